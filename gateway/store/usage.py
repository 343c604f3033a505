"""Usage (:class:`~gateway.store.base.UsageStore`): what answered requests used, counted
against the limits and kept as daily statistics, in Redis and in this process. A day's
counters (:func:`~gateway.store.base.usage_fields`) are read back as one typed
:class:`~gateway.store.base.Usage`.

Redis: settling a request is one :data:`~gateway.tenancy.limits.DEBIT_LUA` call on the
tenant's hash slot: it gives back the admission's reservation, debits the tokens bucket
and the budget counters, and adds to the day's usage hash, all or nothing. It is
idempotent by the request's id (``settle_id``), so a retry after a lost reply, or a
replay of usage that could not be written while Redis was away, counts once; the ids are
kept in one bounded sorted set per tenant (``{tenant}:settled``: the last hour, at most
:data:`~gateway.tenancy.limits.SETTLED_MAX`). ``Used.at`` says when the usage happened,
so a late replay counts in its own day and budget period.

The embedded store (SQLite) counts in process and writes the counters every
:data:`~gateway.store.admission.FLUSH_S` in one transaction
(:class:`~gateway.store.admission.SqliteLimits`); a day's usage read back adds what this
process has not written yet, and a clean shutdown writes the rest. It and the in-process
store settle a request id once too (:class:`Settled`: a retry comes from the process that
settled it).
"""

from __future__ import annotations

import time
from collections import OrderedDict

from gateway.store.admission import MemoryLimits, SqliteLimits, add_to, rates
from gateway.store.base import Usage, Used, today, usage_fields
from gateway.store.redis_conn import RedisConn, RedisPart
from gateway.store.sqlite_db import SqliteDb
from gateway.tenancy.limits import (
    DEBIT_LUA,
    SETTLED_MAX,
    SETTLED_WINDOW_MS,
    USAGE_TTL_S,
    Hold,
    budget_period,
    period_ttl,
)
from gateway.tenancy.tenants import Policy


class RedisUsage(RedisPart):
    def __init__(self, c: RedisConn):
        super().__init__(c)
        self._debit = c.script(DEBIT_LUA)

    async def record_usage(
        self,
        tenant_id: str,
        used: Used,
        p: Policy,
        hold: Hold | None = None,
    ) -> None:
        c = self._c
        now = time.time()
        at = used.at or now
        tp = budget_period(p.token_budget.period if p.token_budget else "day", at)
        cp = budget_period(p.cost_budget.period if p.cost_budget else "day", at)
        keys = [
            c.t(tenant_id, "tpm"),
            c.t(tenant_id, "budget:" + tp),
            c.t(tenant_id, "cost:" + cp),
            c.t(tenant_id, "budget:" + (hold.token_period if hold else tp)),
            c.t(tenant_id, "cost:" + (hold.cost_period if hold else cp)),
            c.t(tenant_id, "usage:" + today(at)),
            c.t(tenant_id, "settled"),
        ]
        args: list[str | int] = [
            int(now * 1000),
            p.tokens_per_minute or 0,
            used.tokens,
            period_ttl(tp),
            used.micro_usd,
            period_ttl(cp),
            hold.tokens if hold else 0,
            hold.micro_usd if hold else 0,
            USAGE_TTL_S,
            used.settle_id or "",
            SETTLED_WINDOW_MS,
            SETTLED_MAX,
        ]
        for field, n in usage_fields(used):
            args += [field, n]
        await c.call(self._debit(keys=keys, args=args))

    async def usage(self, tenant_id: str, day: str | None = None) -> Usage:
        c = self._c
        raw = await c.call(c.r.hgetall(c.t(tenant_id, "usage:" + (day or today()))))
        return Usage.decode({k.decode(): int(v) for k, v in raw.items()})


class Settled:
    """The in-process stores' settle bookkeeping (Redis: ``{tenant}:settled``): the request
    ids settled in the last hour, at most :data:`~gateway.tenancy.limits.SETTLED_MAX`, so
    a settle retried (a backlog replayed) counts once."""

    def __init__(self) -> None:
        self._ids: OrderedDict[tuple[str, str], float] = OrderedDict()

    def first(self, tenant_id: str, settle_id: str | None) -> bool:
        """True the first time ``settle_id`` of ``tenant_id`` is settled (no id: always)."""
        if not settle_id:
            return True
        now = time.time()
        while self._ids and (
            len(self._ids) >= SETTLED_MAX
            or next(iter(self._ids.values())) < now - SETTLED_WINDOW_MS / 1000
        ):
            self._ids.popitem(last=False)
        if (tenant_id, settle_id) in self._ids:
            return False
        self._ids[(tenant_id, settle_id)] = now
        return True


class MemoryUsage(MemoryLimits):
    def __init__(self) -> None:
        super().__init__()
        self._usage: dict[tuple[str, str], dict[str, int]] = {}
        self._settled = Settled()

    async def record_usage(
        self,
        tenant_id: str,
        used: Used,
        p: Policy,
        hold: Hold | None = None,
    ) -> None:
        if not self._settled.first(tenant_id, used.settle_id):
            return
        u = self._usage.setdefault((tenant_id, today(used.at or None)), {})
        for k, n in usage_fields(used):
            u[k] = u.get(k, 0) + n
        self._limiter.debit(tenant_id, used.tokens, p, used.micro_usd, hold)

    async def usage(self, tenant_id: str, day: str | None = None) -> Usage:
        return Usage.decode(self._usage.get((tenant_id, day or today()), {}))


class SqliteUsage(SqliteLimits):
    def __init__(self, *a: SqliteDb) -> None:
        super().__init__(*a)
        self._settled = Settled()

    async def record_usage(
        self,
        tenant_id: str,
        used: Used,
        p: Policy,
        hold: Hold | None = None,
    ) -> None:
        if not self._settled.first(tenant_id, used.settle_id):
            return
        self._started()
        at = used.at or time.time()
        day = today(at)
        for k, n in usage_fields(used):
            self._usage[(tenant_id, day, k)] = self._usage.get((tenant_id, day, k), 0) + n
        tp = budget_period(p.token_budget.period if p.token_budget else "day", at)
        cp = budget_period(p.cost_budget.period if p.cost_budget else "day", at)
        add_to(self._unwritten, (tenant_id, "tokens", tp), used.tokens)
        add_to(self._unwritten, (tenant_id, "cost", cp), used.micro_usd)
        if hold is not None:
            self._hold(tenant_id, hold, -1)
        if p.tokens_per_minute:
            self._limiter.debit(tenant_id, used.tokens, rates(p, self._processes))

    async def usage(self, tenant_id: str, day: str | None = None) -> Usage:
        day = day or today()
        rows = await self._db.read(
            lambda c: c.execute(
                "SELECT field, n FROM usage WHERE tenant_id = ? AND day = ?", (tenant_id, day)
            ).fetchall()
        )
        counters = {str(f): int(n) for f, n in rows}
        for waiting in (self._usage_writing, self._usage):
            for (t, d, k), n in waiting.items():
                if t == tenant_id and d == day:
                    counters[k] = counters.get(k, 0) + n
        return Usage.decode(counters)
