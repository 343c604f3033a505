"""Admission (:class:`~gateway.store.base.AdmissionStore`): limits, concurrency leases and
budget reservations, in Redis (one :data:`~gateway.tenancy.limits.ADMIT_LUA` call on the
tenant's hash slot) and in this process (:class:`~gateway.tenancy.limits.LocalLimiter`).

The embedded store (SQLite) keeps the request path in process too
(:class:`SqliteLimits`): each worker process's own limiter enforces requests/minute,
tokens/minute and concurrency at its share of the processes that share the file (the
limit divided by them, rounded up; counted by the heartbeats), and budgets are counted
together: the spend every process wrote to the file (re-read every :data:`FLUSH_S`) plus
this process's own not yet written and its running requests' reservations. So the
processes together overspend a budget by at most what the others spent in their last
:data:`FLUSH_S`, and a restart keeps the period's spend.

An admission that reaches Redis after its caller stopped waiting does nothing: the script
is told the latest moment the caller still waits for (``not_after``, its own clock plus
the call's bound) and compares it with Redis's clock. If a reply comes back ``late``
although the caller did wait (the two clocks disagree, or this process's event loop was
held up past the bound), the call is repeated without the check (and said once in the
log).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import sqlite3
import time
from collections.abc import Collection, Iterable, Mapping

from gateway.errors import StoreUnavailable
from gateway.store.events import CHANGES_KEEP_S
from gateway.store.redis_conn import RedisConn, RedisPart
from gateway.store.sqlite_db import SqliteDb, SqlitePart
from gateway.tenancy.leases import SYNC_LUA
from gateway.tenancy.limits import (
    ADMIT_LUA,
    NO_RESERVE,
    SLOT_LEASE_MS,
    Admission,
    Denied,
    Hold,
    LocalLimiter,
    Reserve,
    admission_from_lua,
    budget_period,
    hold_for,
    period_ttl,
)
from gateway.tenancy.tenants import Policy, divided

log = logging.getLogger("gateway.store")


class RedisAdmission(RedisPart):
    def __init__(self, c: RedisConn):
        super().__init__(c)
        self._admit = c.script(ADMIT_LUA)
        self._sync = c.script(SYNC_LUA)
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

    async def sync_slots(
        self,
        tenant_id: str,
        owner: str,
        held: Collection[str],
        admitting: Collection[str],
        readd: bool,
    ) -> int:
        """One call (:data:`~gateway.tenancy.limits.SYNC_LUA`): ``owner``'s slots in the
        store become the ``held`` ones (renewed; added back when ``readd``), its others go
        unless ``admitting``; how many went."""
        c = self._c
        args: list[str | int] = [int(time.time() * 1000), SLOT_LEASE_MS, owner, int(readd)]
        args += [len(held), *held, *admitting]
        return int(await c.call(self._sync(keys=[c.t(tenant_id, "inflight")], args=args)))

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

    async def sync_slots(
        self,
        tenant_id: str,
        owner: str,
        held: Collection[str],
        admitting: Collection[str],
        readd: bool,
    ) -> int:
        return self._limiter.sync(tenant_id, owner, held, admitting, readd)

    async def heartbeat(self, member: str, ttl_ms: int) -> int:
        return 1  # an in-process store has one process

    async def leave(self, member: str) -> None:
        return None


FLUSH_S = 1.0  # embedded store: usage and spend written, budgets re-read, this often
Counter = tuple[str, str, str]  # a budget counter: (tenant, "tokens" | "cost", period)
Daily = tuple[str, str, str]  # a usage counter: (tenant, day, field)


def add_to(into: dict[Counter, int], key: Counter, n: int) -> None:
    if n:
        into[key] = into.get(key, 0) + n


def rates(p: Policy, processes: int) -> Policy:
    """What one process's limiter enforces: rates and concurrency at its share, no budgets
    (those are counted together)."""
    if processes > 1:
        p = divided(p, processes)
    return p.model_copy(update={"token_budget": None, "cost_budget": None}) if p.has_budget else p


def _write_out(
    c: sqlite3.Connection,
    spend: Mapping[Counter, int],
    usage: Mapping[Daily, int],
    watch: tuple[str, ...],
) -> dict[Counter, int]:
    """Add this process's spend and usage to the file's counters; read back the budget
    counters of the ``watch``ed tenants (every process's spend)."""
    c.executemany(
        "INSERT INTO usage VALUES (?, ?, ?, ?) ON CONFLICT (tenant_id, day, field)"
        " DO UPDATE SET n = n + excluded.n",
        [(*k, n) for k, n in usage.items()],
    )
    c.executemany(
        "INSERT INTO budgets VALUES (?, ?, ?, ?) ON CONFLICT (tenant_id, kind, period)"
        " DO UPDATE SET n = n + excluded.n",
        [(*k, n) for k, n in spend.items()],
    )
    return _budgets(c, watch)


def _budgets(c: sqlite3.Connection, tenants: Iterable[str]) -> dict[Counter, int]:
    out: dict[Counter, int] = {}
    ids = list(tenants)
    for i in range(0, len(ids), 500):
        part = ids[i : i + 500]
        marks = ",".join("?" * len(part))
        q = f"SELECT tenant_id, kind, period, n FROM budgets WHERE tenant_id IN ({marks})"
        out.update({(t, k, p): int(n) for t, k, p, n in c.execute(q, part)})
    return out


class SqliteLimits(SqlitePart):
    """What admission and usage share in the embedded store (see the module doc): this
    process's limiter, the budget counters, and what waits to be written."""

    def __init__(self, *a: SqliteDb) -> None:
        super().__init__(*a)
        self._limiter = LocalLimiter()
        self._processes = 1
        self._stored: dict[Counter, int] = {}  # as last read from the file (every process's)
        self._unwritten: dict[Counter, int] = {}  # this process's spend, not yet written
        self._writing: dict[Counter, int] = {}  # ... being written now
        self._held: dict[Counter, int] = {}  # this process's running requests' reservations
        self._usage: dict[Daily, int] = {}
        self._usage_writing: dict[Daily, int] = {}
        self._watched: set[str] = set()  # tenants with a budget admitted here: re-read
        self._flusher: asyncio.Task[None] | None = None

    def _spent(self, key: Counter) -> int:
        parts = (self._stored, self._unwritten, self._writing, self._held)
        return sum(d.get(key, 0) for d in parts)

    def _over_budget(self, tenant: str, p: Policy, now: float) -> Denied | None:
        tb, cb = p.token_budget, p.cost_budget
        if tb and self._spent((tenant, "tokens", budget_period(tb.period, now))) >= tb.tokens:
            return "budget"
        if cb and self._spent((tenant, "cost", budget_period(cb.period, now))) >= cb.usd * 1e6:
            return "cost_budget"
        return None

    def _hold(self, tenant: str, hold: Hold, sign: int) -> None:
        add_to(self._held, (tenant, "tokens", hold.token_period), sign * hold.tokens)
        add_to(self._held, (tenant, "cost", hold.cost_period), sign * hold.micro_usd)

    def _started(self) -> None:
        if self._flusher is None:
            self._flusher = asyncio.get_running_loop().create_task(self._flush_every())

    async def _flush_every(self) -> None:
        while True:
            await asyncio.sleep(FLUSH_S)
            await self.flush()

    async def flush(self) -> None:
        """Write this process's usage and spend, and re-read the watched budgets."""
        if not (self._unwritten or self._usage or self._watched):
            return
        self._writing, self._unwritten = self._unwritten, {}
        self._usage_writing, self._usage = self._usage, {}
        spend, usage, watch = dict(self._writing), dict(self._usage_writing), tuple(self._watched)
        try:
            if spend or usage:
                stored = await self._db.write(lambda c: _write_out(c, spend, usage, watch))
            else:
                stored = await self._db.read(lambda c: _budgets(c, watch))
        except StoreUnavailable:  # kept for the next try
            for k, n in spend.items():
                add_to(self._unwritten, k, n)
            for d, n in usage.items():
                self._usage[d] = self._usage.get(d, 0) + n
            stored = self._stored
        self._writing, self._usage_writing, self._stored = {}, {}, stored

    async def _stop_flushing(self) -> None:
        if self._flusher is not None:
            self._flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flusher
            self._flusher = None
        await self.flush()


class SqliteAdmission(SqliteLimits):
    async def admit(
        self, tenant_id: str, rid: str, p: Policy, want: Reserve = NO_RESERVE
    ) -> Admission:
        self._started()
        now = time.time()
        if p.has_budget:
            if tenant_id not in self._watched:  # first sight here: its spend so far
                stored = await self._db.read(lambda c: _budgets(c, [tenant_id]))
                self._stored.update(stored)
                self._watched.add(tenant_id)
            denied = self._over_budget(tenant_id, p, now)
            if denied is not None:
                return Admission(ok=False, denied=denied)
        adm = self._limiter.admit(tenant_id, rid, rates(p, self._processes), now)
        hold = hold_for(p, want, now) if adm.ok else None
        if hold is None:
            return adm
        self._hold(tenant_id, hold, 1)
        return dataclasses.replace(adm, hold=hold)

    async def release(self, tenant_id: str, rid: str) -> None:
        self._limiter.release(tenant_id, rid)

    async def sync_slots(
        self,
        tenant_id: str,
        owner: str,
        held: Collection[str],
        admitting: Collection[str],
        readd: bool,
    ) -> int:
        return self._limiter.sync(tenant_id, owner, held, admitting, readd)

    async def heartbeat(self, member: str, ttl_ms: int) -> int:
        """Count the processes sharing the file; also prune what expired (changes, reveals)."""

        def beat(c: sqlite3.Connection) -> int:
            now = time.time()
            ms = int(now * 1000)
            c.execute("INSERT OR REPLACE INTO fleet VALUES (?, ?)", (member, ms + ttl_ms))
            c.execute("DELETE FROM fleet WHERE until_ms < ?", (ms,))
            c.execute("DELETE FROM changes WHERE at < ?", (now - CHANGES_KEEP_S,))
            c.execute("DELETE FROM reveals WHERE until < ?", (now,))
            return int(c.execute("SELECT count(*) FROM fleet").fetchone()[0])

        self._processes = max(1, await self._db.write(beat))
        return self._processes

    async def leave(self, member: str) -> None:
        await self._db.write(lambda c: c.execute("DELETE FROM fleet WHERE member = ?", (member,)))
