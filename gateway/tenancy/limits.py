"""Rate limits, concurrency and token budgets: one admission decision per request.

Requests/minute and tokens/minute are token buckets (capacity = the per-minute limit,
refilled continuously); a request needs one request token, and the tokens bucket must
not be empty (actual usage is debited when the answer is known, so a big answer makes
the next requests wait). Concurrency is a set of in-flight request ids, each a *lease*:
it expires :data:`SLOT_LEASE_MS` after it was taken or last renewed, and its holder renews
it while the request runs (every :data:`SLOT_RENEW_S`). A replica that dies or a release
that is lost leaves a slot that comes back within one lease; an admission that reaches
Redis after its caller stopped waiting (``ARGV[13]``, checked against Redis's own clock)
takes no slot at all. Budgets compare the period's counter to the budget, and the
counter holds the reservations of the requests still running: admission
adds a request's worst case (:class:`Reserve`: its prompt plus ``max_tokens``, at the
dearest tier it may use) and the end of the request settles it (:class:`Hold`), replacing
the reservation by what it really used. A request is admitted while the counter is below
the budget, so any number of gateway replicas together overspend by one reservation at
most (the last one admitted).

:data:`ADMIT_LUA` does all of it atomically in Redis in one round trip;
:class:`LocalLimiter` does the same in process (the in-memory store, and the
per-replica fallback while Redis is unreachable).
"""

from __future__ import annotations

import time
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Literal

from gateway.tenancy.leases import SLOT_LEASE_MS as SLOT_LEASE_MS  # where callers look
from gateway.tenancy.leases import SLOT_RENEW_S as SLOT_RENEW_S
from gateway.tenancy.leases import sync
from gateway.tenancy.tenants import Policy

Denied = Literal["requests", "tokens", "concurrency", "budget", "cost_budget"]
SETTLED_WINDOW_MS = 3_600_000  # a settle retried within this counts once ...
SETTLED_MAX = 20_000  # ... among a tenant's latest this many settles (bounded bookkeeping)
USAGE_TTL_S = 40 * 86400


@dataclass(frozen=True, slots=True)
class Reserve:
    """A request's worst case, reserved against its tenant's budgets at admission."""

    tokens: int = 0
    micro_usd: int = 0


NO_RESERVE = Reserve()


@dataclass(frozen=True, slots=True)
class Hold:
    """What an admission reserved, and in which budget periods (settled at the end even
    when the period has turned). ``local``: held by this replica's own limiter (the
    store was unreachable at admission)."""

    tokens: int
    micro_usd: int
    token_period: str
    cost_period: str
    local: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Admission:
    ok: bool
    denied: Denied | None = None
    retry_after_s: float = 0.0
    limit_requests: int | None = None
    remaining_requests: int | None = None
    limit_tokens: int | None = None
    remaining_tokens: int | None = None
    hold: Hold | None = None  # reserved against the budgets; settled by the usage debit


def hold_for(p: Policy, want: Reserve, now: float) -> Hold | None:
    """The part of ``want`` that ``p``'s budgets reserve (None: nothing to reserve)."""
    tokens = want.tokens if p.token_budget is not None else 0
    micro = want.micro_usd if p.cost_budget is not None else 0
    if not (tokens or micro):
        return None
    tp = budget_period(p.token_budget.period if p.token_budget else "day", now)
    cp = budget_period(p.cost_budget.period if p.cost_budget else "day", now)
    return Hold(tokens, micro, tp, cp)


def period_ttl(period: str) -> int:
    """Seconds a budget counter of this period is kept (a day's: 2 days; a month's: 40)."""
    return 2 * 86400 if len(period) == 8 else 40 * 86400


ALLOW = Admission(ok=True)


def budget_period(period: str, now: float) -> str:
    t = time.gmtime(now)
    return time.strftime("%Y%m%d" if period == "day" else "%Y%m", t)


# KEYS: rpm bucket, tpm bucket, concurrency zset, budget counter, cost counter (micro-USD)
# ARGV: now_ms, rpm, tpm, max_conc, budget, request id, slot lease ms, cost budget (0 = no
#       limit), tokens to reserve, micro-USD to reserve, budget counter ttl s, cost counter
#       ttl s, not after (Redis's clock, ms; 0: no check): the caller has given up by then
ADMIT_LUA = """
local not_after = tonumber(ARGV[13] or '0')
if not_after > 0 then
  local t = redis.call('TIME')
  if tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) > not_after then
    return {0, 'late', 0, -1, -1}
  end
end
local now = tonumber(ARGV[1])
local rpm, tpm = tonumber(ARGV[2]), tonumber(ARGV[3])
local conc, budget = tonumber(ARGV[4]), tonumber(ARGV[5])
local function bucket(key, cap)
  local b = redis.call('HMGET', key, 't', 'ts')
  local tokens, ts = tonumber(b[1]), tonumber(b[2])
  if tokens == nil then tokens, ts = cap, now end
  tokens = math.min(cap, tokens + (now - ts) * cap / 60000)
  return tokens
end
local rt, tt = -1, -1
if budget > 0 then
  local used = tonumber(redis.call('GET', KEYS[4]) or '0')
  if used >= budget then return {0, 'budget', 0, -1, -1} end
end
local cost_budget = tonumber(ARGV[8] or '0')
if cost_budget > 0 then
  local spent = tonumber(redis.call('GET', KEYS[5]) or '0')
  if spent >= cost_budget then return {0, 'cost_budget', 0, -1, -1} end
end
if rpm > 0 then
  rt = bucket(KEYS[1], rpm)
  if rt < 1 then
    return {0, 'requests', math.ceil((1 - rt) * 60000 / rpm), 0, -1}
  end
end
if tpm > 0 then
  tt = bucket(KEYS[2], tpm)
  if tt <= 0 then
    return {0, 'tokens', math.ceil((1 - tt) * 60000 / tpm), math.floor(rt), 0}
  end
end
if conc > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
  if redis.call('ZCARD', KEYS[3]) >= conc then return {0, 'concurrency', 1000, -1, -1} end
  redis.call('ZADD', KEYS[3], now + tonumber(ARGV[7]), ARGV[6])
  redis.call('PEXPIRE', KEYS[3], tonumber(ARGV[7]))
end
if rpm > 0 then
  rt = rt - 1
  redis.call('HSET', KEYS[1], 't', rt, 'ts', now)
  redis.call('PEXPIRE', KEYS[1], 120000)
end
if tpm > 0 then
  redis.call('HSET', KEYS[2], 't', tt, 'ts', now)
  redis.call('PEXPIRE', KEYS[2], 120000)
end
local want_t, want_m = tonumber(ARGV[9] or '0'), tonumber(ARGV[10] or '0')
if budget > 0 and want_t > 0 then
  redis.call('INCRBY', KEYS[4], want_t)
  redis.call('EXPIRE', KEYS[4], tonumber(ARGV[11]))
end
if cost_budget > 0 and want_m > 0 then
  redis.call('INCRBY', KEYS[5], want_m)
  redis.call('EXPIRE', KEYS[5], tonumber(ARGV[12]))
end
return {1, '', 0, math.floor(rt), math.floor(tt)}
"""

# KEYS: tpm bucket, budget counter, cost counter, the held budget and cost counters, the
#       usage hash, the settled zset
# ARGV: now_ms, tpm, tokens, budget ttl seconds, micro-USD, cost counter ttl seconds,
#       tokens held, micro-USD held (given back to the held counters, which may be of an
#       earlier period; one that expired meanwhile has nothing to give back), usage ttl s,
#       settle id ('' : none), settled window ms, settled max, then usage field/amount pairs
# The settled zset holds the ids settled in the window, the latest SETTLED_MAX of them: one
# key per tenant, not one per request.
DEBIT_LUA = """
local now = tonumber(ARGV[1])
if ARGV[10] ~= '' then
  redis.call('ZREMRANGEBYSCORE', KEYS[7], '-inf', now - tonumber(ARGV[11]))
  if redis.call('ZADD', KEYS[7], 'NX', now, ARGV[10]) == 0 then
    return 0  -- settled already (a retry after a lost reply): count it once
  end
  local n, cap = redis.call('ZCARD', KEYS[7]), tonumber(ARGV[12])
  if n > cap then redis.call('ZREMRANGEBYRANK', KEYS[7], 0, n - cap - 1) end
  redis.call('PEXPIRE', KEYS[7], tonumber(ARGV[11]))
end
local tpm, n = tonumber(ARGV[2]), tonumber(ARGV[3])
if tpm > 0 then
  local b = redis.call('HMGET', KEYS[1], 't', 'ts')
  local tokens, ts = tonumber(b[1]), tonumber(b[2])
  if tokens == nil then tokens, ts = tpm, now end
  tokens = math.min(tpm, tokens + math.max(0, now - ts) * tpm / 60000) - n
  redis.call('HSET', KEYS[1], 't', tokens, 'ts', math.max(now, ts))
  redis.call('PEXPIRE', KEYS[1], 120000)
end
redis.call('INCRBY', KEYS[2], n)
redis.call('EXPIRE', KEYS[2], tonumber(ARGV[4]))
local micro = tonumber(ARGV[5] or '0')
if micro > 0 then
  redis.call('INCRBY', KEYS[3], micro)
  redis.call('EXPIRE', KEYS[3], tonumber(ARGV[6]))
end
local held_t, held_m = tonumber(ARGV[7] or '0'), tonumber(ARGV[8] or '0')
if held_t > 0 and redis.call('EXISTS', KEYS[4]) == 1 then
  redis.call('DECRBY', KEYS[4], held_t)
end
if held_m > 0 and redis.call('EXISTS', KEYS[5]) == 1 then
  redis.call('DECRBY', KEYS[5], held_m)
end
for i = 13, #ARGV, 2 do
  redis.call('HINCRBY', KEYS[6], ARGV[i], tonumber(ARGV[i + 1]))
end
redis.call('EXPIRE', KEYS[6], tonumber(ARGV[9]))
return 1
"""


def admission_from_lua(res: list[object], p: Policy) -> Admission:
    ok = int(res[0]) == 1  # type: ignore[call-overload]
    denied = res[1].decode() if isinstance(res[1], bytes) else str(res[1])
    rt, tt = int(res[3]), int(res[4])  # type: ignore[call-overload]
    return Admission(
        ok=ok,
        denied=None if ok else denied,  # type: ignore[arg-type]
        retry_after_s=int(res[2]) / 1000,  # type: ignore[call-overload]
        limit_requests=p.requests_per_minute,
        remaining_requests=rt if rt >= 0 else None,
        limit_tokens=p.tokens_per_minute,
        remaining_tokens=tt if tt >= 0 else None,
    )


class _Bucket:
    __slots__ = ("tokens", "ts")

    def __init__(self, cap: float, now: float):
        self.tokens, self.ts = cap, now

    def level(self, cap: float, now: float) -> float:
        self.tokens = min(cap, self.tokens + (now - self.ts) * cap / 60.0)
        self.ts = now
        return self.tokens


class LocalLimiter:
    """The same decisions as :data:`ADMIT_LUA`, for one process."""

    def __init__(self) -> None:
        self._rpm: dict[str, _Bucket] = {}
        self._tpm: dict[str, _Bucket] = {}
        self._inflight: dict[str, dict[str, float]] = {}
        self._used: dict[str, int] = {}  # budget counters: "tenant:period" -> tokens
        self._spent: dict[str, int] = {}  # cost counters: "tenant:period" -> micro-USD

    def admit(
        self,
        tenant: str,
        rid: str,
        p: Policy,
        now: float | None = None,
        want: Reserve = NO_RESERVE,
    ) -> Admission:
        now = time.time() if now is None else now
        if p.token_budget is not None:
            key = f"{tenant}:{budget_period(p.token_budget.period, now)}"
            if self._used.get(key, 0) >= p.token_budget.tokens:
                return Admission(ok=False, denied="budget")
        if p.cost_budget is not None:
            key = f"{tenant}:{budget_period(p.cost_budget.period, now)}"
            if self._spent.get(key, 0) >= p.cost_budget.usd * 1e6:
                return Admission(ok=False, denied="cost_budget")
        rt = tt = None
        if p.requests_per_minute:
            cap = p.requests_per_minute
            b = self._rpm.setdefault(tenant, _Bucket(cap, now))
            rt = b.level(cap, now)
            if rt < 1:
                return Admission(
                    ok=False,
                    denied="requests",
                    retry_after_s=(1 - rt) * 60 / cap,
                    limit_requests=cap,
                    remaining_requests=0,
                )
        if p.tokens_per_minute:
            cap = p.tokens_per_minute
            tb = self._tpm.setdefault(tenant, _Bucket(cap, now))
            tt = tb.level(cap, now)
            if tt <= 0:
                return Admission(
                    ok=False,
                    denied="tokens",
                    retry_after_s=(1 - tt) * 60 / cap,
                    limit_tokens=cap,
                    remaining_tokens=0,
                )
        if p.max_concurrent_requests:
            slots = self._inflight.setdefault(tenant, {})
            for r in [r for r, exp in slots.items() if exp < now]:
                del slots[r]
            if len(slots) >= p.max_concurrent_requests:
                return Admission(ok=False, denied="concurrency", retry_after_s=1.0)
            slots[rid] = now + SLOT_LEASE_MS / 1000
        if rt is not None:
            self._rpm[tenant].tokens = rt - 1
        return Admission(
            ok=True,
            limit_requests=p.requests_per_minute,
            remaining_requests=None if rt is None else int(rt - 1),
            limit_tokens=p.tokens_per_minute,
            remaining_tokens=None if tt is None else int(tt),
            hold=self._reserve(tenant, p, want, now),
        )

    def _reserve(self, tenant: str, p: Policy, want: Reserve, now: float) -> Hold | None:
        hold = hold_for(p, want, now)
        if hold is not None:
            tk, ck = f"{tenant}:{hold.token_period}", f"{tenant}:{hold.cost_period}"
            self._used[tk] = self._used.get(tk, 0) + hold.tokens
            self._spent[ck] = self._spent.get(ck, 0) + hold.micro_usd
        return hold

    def release(self, tenant: str, rid: str) -> None:
        self._inflight.get(tenant, {}).pop(rid, None)

    def renew(self, tenant: str, rids: Iterable[str], now: float | None = None) -> None:
        """Extend the leases of ``rids`` that are still held (a released one stays free)."""
        until = (time.time() if now is None else now) + SLOT_LEASE_MS / 1000
        slots = self._inflight.get(tenant, {})
        for rid in rids:
            if rid in slots:
                slots[rid] = until

    def sync(
        self,
        tenant: str,
        owner: str,
        held: Collection[str],
        admitting: Collection[str],
        readd: bool,
        now: float | None = None,
    ) -> int:
        """:func:`~gateway.tenancy.leases.sync` on this limiter's slots of ``tenant``."""
        now = time.time() if now is None else now
        return sync(self._inflight.setdefault(tenant, {}), owner, held, admitting, readd, now)

    def debit(
        self,
        tenant: str,
        tokens: int,
        p: Policy,
        micro_usd: int = 0,
        hold: Hold | None = None,
    ) -> None:
        """Count what a request used; give back what its admission held (``hold``)."""
        now = time.time()
        if hold is not None:
            tk, ck = f"{tenant}:{hold.token_period}", f"{tenant}:{hold.cost_period}"
            if tk in self._used:
                self._used[tk] -= hold.tokens
            if ck in self._spent:
                self._spent[ck] -= hold.micro_usd
        if p.tokens_per_minute:
            cap = p.tokens_per_minute
            b = self._tpm.setdefault(tenant, _Bucket(cap, now))
            b.level(cap, now)
            b.tokens -= tokens
        period = budget_period(p.token_budget.period if p.token_budget else "day", now)
        key = f"{tenant}:{period}"
        self._used[key] = self._used.get(key, 0) + tokens
        if micro_usd:
            cost_period = p.cost_budget.period if p.cost_budget else "day"
            key = f"{tenant}:{budget_period(cost_period, now)}"
            self._spent[key] = self._spent.get(key, 0) + micro_usd
