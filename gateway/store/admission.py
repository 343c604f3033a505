"""Admission (:class:`~gateway.store.base.AdmissionStore`): limits, concurrency leases and
budget reservations, in Redis (one :data:`~gateway.tenancy.limits.ADMIT_LUA` call on the
tenant's hash slot) and in this process (:class:`~gateway.tenancy.limits.LocalLimiter`).

An admission that reaches Redis after its caller stopped waiting does nothing: the script
is told the latest moment the caller still waits for (``not_after``, its own clock plus
the call's bound) and compares it with Redis's clock. If a reply comes back ``late``
although the caller did wait (the two clocks disagree, or this process's event loop was
held up past the bound), the call is repeated without the check (and said once in the
log).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Collection

from gateway.store.redis_conn import RedisConn, RedisPart
from gateway.tenancy.limits import (
    ADMIT_LUA,
    NO_RESERVE,
    SLOT_LEASE_MS,
    Admission,
    LocalLimiter,
    Reserve,
    admission_from_lua,
    budget_period,
    hold_for,
    period_ttl,
)
from gateway.tenancy.tenants import Policy

log = logging.getLogger("gateway.store")


class RedisAdmission(RedisPart):
    def __init__(self, c: RedisConn):
        super().__init__(c)
        self._admit = c.script(ADMIT_LUA)
        self._skew_said = False

    async def admit(
        self, tenant_id: str, rid: str, p: Policy, want: Reserve = NO_RESERVE
    ) -> Admission:
        c = self._c
        now = time.time()
        hold = hold_for(p, want, now)
        tp = budget_period(p.token_budget.period if p.token_budget else "day", now)
        cp = budget_period(p.cost_budget.period if p.cost_budget else "day", now)
        keys = [
            c.t(tenant_id, "rpm"),
            c.t(tenant_id, "tpm"),
            c.t(tenant_id, "inflight"),
            c.t(tenant_id, "budget:" + tp),
            c.t(tenant_id, "cost:" + cp),
        ]
        args: list[str | int] = [
            int(now * 1000),
            p.requests_per_minute or 0,
            p.tokens_per_minute or 0,
            p.max_concurrent_requests or 0,
            p.token_budget.tokens if p.token_budget else 0,
            rid,
            SLOT_LEASE_MS,
            round(p.cost_budget.usd * 1e6) if p.cost_budget else 0,
            hold.tokens if hold else 0,
            hold.micro_usd if hold else 0,
            period_ttl(tp),
            period_ttl(cp),
            int((now + c.bound) * 1000),  # not after: the caller has given up by then
        ]
        res = await c.call(self._admit(keys=keys, args=args))
        if _late(res):
            if not self._skew_said:
                self._skew_said = True
                log.warning(
                    "an admission reached Redis after its deadline although its reply was "
                    "awaited (a busy event loop, or Redis's clock ahead of this host's): "
                    "run again without the check"
                )
            res = await c.call(self._admit(keys=keys, args=[*args[:-1], 0]))
        adm = admission_from_lua(res, p)
        return dataclasses.replace(adm, hold=hold) if adm.ok and hold is not None else adm

    async def release(self, tenant_id: str, rid: str) -> None:
        await self._c.call(self._c.r.zrem(self._c.t(tenant_id, "inflight"), rid))

    async def renew(self, tenant_id: str, rids: Collection[str]) -> None:
        """Extend the leases still held (XX: a slot released or expired is not taken back)."""
        if not rids:
            return
        c = self._c
        key = c.t(tenant_id, "inflight")
        until = int(time.time() * 1000) + SLOT_LEASE_MS
        pipe = c.r.pipeline(transaction=False)
        pipe.zadd(key, dict.fromkeys(rids, until), xx=True)
        pipe.pexpire(key, SLOT_LEASE_MS)
        await c.call(pipe.execute())

    async def heartbeat(self, member: str, ttl_ms: int) -> int:
        c = self._c
        key = c.k("fleet")
        now = int(time.time() * 1000)
        pipe = c.pipeline()
        pipe.zadd(key, {member: now + ttl_ms})
        pipe.zremrangebyscore(key, "-inf", now)
        pipe.zcard(key)
        pipe.pexpire(key, ttl_ms)
        out = await c.call(pipe.execute())
        return int(out[2])

    async def leave(self, member: str) -> None:
        await self._c.call(self._c.r.zrem(self._c.k("fleet"), member))


def _late(res: list[object]) -> bool:
    return res[1] in (b"late", "late")


class MemoryLimits:
    """The in-process limiter that admission and usage share in the memory store."""

    def __init__(self) -> None:
        super().__init__()
        self._limiter = LocalLimiter()


class MemoryAdmission(MemoryLimits):
    async def admit(
        self, tenant_id: str, rid: str, p: Policy, want: Reserve = NO_RESERVE
    ) -> Admission:
        return self._limiter.admit(tenant_id, rid, p, want=want)

    async def release(self, tenant_id: str, rid: str) -> None:
        self._limiter.release(tenant_id, rid)

    async def renew(self, tenant_id: str, rids: Collection[str]) -> None:
        self._limiter.renew(tenant_id, rids)

    async def heartbeat(self, member: str, ttl_ms: int) -> int:
        return 1  # an in-process store has one process

    async def leave(self, member: str) -> None:
        return None
