"""Concurrency slots that a failing store cannot turn into a lockout.

* Tables: a sync (:data:`~gateway.tenancy.limits.SYNC_LUA` on the real Redis, and its twin
  in process) keeps what its owner holds or is admitting, removes the owner's other slots
  and leaves other processes' alone; a store that failed gets the held slots back and loses
  the ended ones as soon as it answers.
* Real processes: a tenant at its concurrency limit when Redis dies (AOF on, back 6 s
  later) or fails over (Sentinel) is served again within 2 s; a client that sends one
  request at a time, exactly at its limit, never gets a 429 (JSON and streams, a gateway
  of two workers).
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.access.guard import Access
from gateway.errors import RateLimited, StoreUnavailable
from gateway.store.health import StoreHealth
from gateway.store.memory_store import MemoryStore
from gateway.store.redis_store import RedisStore
from gateway.tenancy.limits import SLOT_LEASE_MS, LocalLimiter, Reserve
from gateway.tenancy.tenants import Effective, Policy
from tests.conftest import REDIS, Proc, rules_for_tests, start_gateway
from tests.redis_procs import (
    RedisProc,
    redis_procs,
    sentinel_master,
    start_sentinel_rig,
    wait_for,
)
from tests.test_store_faults import inflight, metric, store_state
from tests.test_tenancy import new_tenant, tenancy_env

OUTAGE_S = 6.0  # as in the report: Redis back 6 s after it died, its slots' leases still running
BACK_WITHIN_S = 2.0
LEASE_S = SLOT_LEASE_MS / 1000

# -- a sync, table by table -----------------------------------------------------------------------

NOW = 1_000_000.0  # seconds; slots' expiries are relative to it
# the slots before the sync: name -> seconds of lease left ("a:" is the syncing process)
BEFORE = {"a:held": 5.0, "a:ended": 5.0, "a:admitting": 5.0, "b:other": 5.0, "a:expired": -1.0}


@pytest.mark.parametrize(
    ("held", "readd", "after", "gone"),
    [
        # renewing: the ended slot goes, the others' and the admitting one stay
        (["a:held"], False, {"a:held", "a:admitting", "b:other"}, 1),
        # a slot the store lost is not added back by a plain renewal (it may be released)...
        (["a:held", "a:lost"], False, {"a:held", "a:admitting", "b:other"}, 1),
        # ... but is by a sync after a failure
        (["a:held", "a:lost"], True, {"a:held", "a:lost", "a:admitting", "b:other"}, 1),
        # nothing held: every slot of the owner's goes, but the one being admitted
        ([], True, {"a:admitting", "b:other"}, 2),
    ],
)
@pytest.mark.parametrize("where", ["redis", "process"])
def test_a_sync_leaves_the_owner_what_it_holds(
    where: str, held: list[str], readd: bool, after: set[str], gone: int, prefix: str
) -> None:
    if where == "process":
        lim = LocalLimiter()
        many = Policy(max_concurrent_requests=100)
        for name, left in BEFORE.items():
            assert lim.admit("t", name, many, now=NOW + left - LEASE_S).ok
        assert lim.sync("t", "a:", held, ["a:admitting"], readd, now=NOW) == gone
        assert set(_local_slots(lim, "t", NOW)) == after
        return

    async def run() -> tuple[int, set[str], list[float], float]:
        store = RedisStore(REDIS, prefix)
        try:
            key = store.conn.t("ten_sync", "inflight")
            now_ms = int(time.time() * 1000)
            await store.conn.r.delete(key)
            await store.conn.r.zadd(
                key, {n: now_ms + int(left * 1000) for n, left in BEFORE.items()}
            )
            n = await store.sync_slots("ten_sync", "a:", held, ["a:admitting"], readd)
            remaining = {m.decode() for m in await store.conn.r.zrange(key, 0, -1)}
            scores = [float(await store.conn.r.zscore(key, h) or 0) - now_ms for h in held]
            ttl = float(await store.conn.r.pttl(key))
            return n, remaining, scores, ttl
        finally:
            await store.close()

    n, remaining, renewed_ms, ttl_ms = asyncio.run(run())
    assert (n, remaining) == (gone, after)
    for name, ms in zip(held, renewed_ms, strict=True):
        if name in after:
            assert ms > SLOT_LEASE_MS - 1000  # renewed for a whole lease
    assert 0 < ttl_ms <= SLOT_LEASE_MS


def _local_slots(lim: LocalLimiter, tenant: str, now: float) -> list[str]:
    """The slots a limiter holds for ``tenant`` at ``now``: a sync with an owner nobody has
    removes nothing, and the expired ones go first."""
    lim.sync(tenant, "\x00", [], [], False, now=now)
    return list(lim._inflight.get(tenant, {}))


# -- a store that fails, at the store interface -----------------------------------------------


class _Failing(MemoryStore):
    """An in-process store that can be made to fail every call (and counts it as failed,
    as the Redis store does), and to lose slots (a failover onto a replica behind)."""

    def __init__(self) -> None:
        super().__init__()
        self._health = StoreHealth("single", failures=1, span=0.0)
        self.down = False

    def _call(self) -> None:
        if self.down:
            self.health.failed("unreachable")
            raise StoreUnavailable("unreachable")

    async def admit(self, *a: Any, **kw: Any) -> Any:
        self._call()
        return await super().admit(*a, **kw)

    async def release(self, tenant_id: str, rid: str) -> None:
        self._call()
        await super().release(tenant_id, rid)

    async def sync_slots(self, *a: Any, **kw: Any) -> int:
        self._call()
        return await super().sync_slots(*a, **kw)

    def slots(self, tenant: str) -> set[str]:
        return set(_local_slots(self._limiter, tenant, time.time()))

    def lose(self, tenant: str, slot: str) -> None:
        self._limiter.release(tenant, slot)


def test_a_store_that_failed_gets_back_what_is_held_and_loses_what_ended() -> None:
    """Two slots held; the store fails: one request ends (its release is lost), the store
    loses the other's slot (a failover). Back: at once, the store holds exactly the
    running request's slot; the tenant is not full."""

    async def run() -> tuple[set[str], set[str], bool]:
        store = _Failing()
        access = Access(store, b"s", True, 30.0)
        eff = Effective(Policy(max_concurrent_requests=2), tenant_id="ten_1")
        for rid in ("adm_ended", "adm_running"):
            assert (await access.admit(eff, rid)).ok
        ended, running = access.leases.slot("adm_ended"), access.leases.slot("adm_running")
        store.down = True
        await access.done(eff, "adm_ended", "standard", None, None)
        store.lose("ten_1", running)
        before = store.slots("ten_1")
        store.down = False
        store.health.recovered()  # the breaker's probe succeeded
        for _ in range(200):
            if store.slots("ten_1") == {running}:
                break
            await asyncio.sleep(0.005)
        after = store.slots("ten_1")
        ok = (await access.admit(eff, "adm_next")).ok
        await access.close()
        assert ended in before and running not in before
        return before, after, ok

    _, after, ok = asyncio.run(run())
    assert len(after) == 1 and next(iter(after)).endswith(":adm_running") and ok


def test_an_admission_that_finds_the_tenant_full_reclaims_first() -> None:
    """The store answers again before this process knew (no breaker transition): the first
    admission that finds the tenant full gives back the stale slots first."""

    async def run() -> tuple[bool, int]:
        store = _Failing()
        access = Access(store, b"s", True, 30.0)
        eff = Effective(Policy(max_concurrent_requests=1), tenant_id="ten_1")
        assert (await access.admit(eff, "adm_1")).ok
        store.down = True
        await access.release("ten_1", "adm_1")  # lost
        store.down = False
        try:
            ok = (await access.admit(eff, "adm_2", Reserve())).ok
        except RateLimited:
            ok = False
        reclaimed = access.leases.reclaimed
        await access.close()
        return ok, reclaimed

    assert asyncio.run(run()) == (True, 1)


# -- real processes ------------------------------------------------------------------------------


@dataclass
class Paced:
    """``clients`` clients sending chat completions in a thread of their own until the block
    ends; each pauses ``pause`` seconds after an answer that is not a 200 (a client backing
    off a 429 a little). ``done`` holds (status, sent, answered) per request (monotonic)."""

    url: str
    key: str
    clients: int = 8
    content: str = "[[*: delay=0.05]] hi"
    pause: float = 0.01
    done: list[tuple[int, float, float]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> Paced:
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(40)

    def served(self, since: float = 0.0) -> int:
        return sum(1 for st, sent, _ in list(self.done) if st == 200 and sent >= since)

    def longest_without_a_200(self, start: float, end: float) -> float:
        """The longest time within [start, end] in which no request was answered 200."""
        times = sorted(t for st, _, t in list(self.done) if st == 200 and start <= t <= end)
        edges = [start, *times, end]
        return max(b - a for a, b in itertools.pairwise(edges))

    async def _run(self) -> None:
        timeout = aiohttp.ClientTimeout(total=30)
        async with aiohttp.ClientSession(timeout=timeout) as http:
            await asyncio.gather(*(self._client(http) for _ in range(self.clients)))

    async def _client(self, http: aiohttp.ClientSession) -> None:
        body = {"model": "auto", "messages": [{"role": "user", "content": self.content}]}
        headers = {"Authorization": f"Bearer {self.key}"}
        while not self._stop.is_set():
            t0 = time.monotonic()
            try:
                async with http.post(
                    f"{self.url}/v1/chat/completions", json=body, headers=headers
                ) as r:
                    await r.read()
                    status = r.status
            except (aiohttp.ClientError, TimeoutError):
                status = 0
            self.done.append((status, t0, time.monotonic()))
            if status != 200:
                await asyncio.sleep(self.pause)


def _two_workers(tmp: Path, engines: dict[str, str], prefix: str, url: str) -> tuple[Proc, str]:
    env = {**tenancy_env(prefix, url), "GATEWAY_WORKERS": "2"}
    return start_gateway(tmp, rules_for_tests(), engines, env)


def _served_again(load: Paced, proc: Proc, base: str, back: float) -> None:
    """Served again within 2 s of ``back`` (the store answers again), and nothing broke."""
    assert wait_for(lambda: store_state(base) == "ok", timeout=15)
    ok_at = time.monotonic()
    assert wait_for(lambda: load.served(since=ok_at) >= 20, timeout=15)
    gap = load.longest_without_a_200(back, time.monotonic())
    print(f"longest stretch without a 200 after the store came back: {gap:.2f} s")
    assert gap < BACK_WITHIN_S, f"no request served for {gap:.2f} s after the store came back"
    # there were stale slots (requests that ended while it was away), and they were reclaimed
    # (each worker writes its metrics for the merged /metrics every second)
    assert wait_for(lambda: metric(base, "gateway_slots_reclaimed_total") > 0, timeout=5)
    assert 500 not in {st for st, _, _ in load.done} and "Traceback" not in proc.log()


def _slots_back(redis: RedisProc, prefix: str, tenant: str) -> None:
    assert wait_for(lambda: inflight(redis, prefix, tenant) == 0, timeout=15)


@pytest.mark.processes
def test_a_busy_tenant_is_served_within_2s_of_redis_returning(
    engines: dict[str, str], tmp_path: Path
) -> None:
    """Four slots, eight clients: the tenant is at its limit when Redis is killed (AOF
    on) and started again 6 s later. The slots of requests that ended meanwhile are
    reclaimed on first contact, not left to their lease: served within 2 s of its return."""
    with redis_procs() as procs:
        r = RedisProc(tmp_path, "--appendonly", "yes", "--appendfsync", "always")
        procs.append(r)
        prefix = "gwslots:"
        proc, base = _two_workers(tmp_path, engines, prefix, r.url)
        try:
            policy = {"max_concurrent_requests": 4, "requests_per_minute": 1_000_000}
            tenant, _, key = new_tenant(proc.admin, policy)
            with Paced(base, key) as load:
                assert wait_for(lambda: load.served() >= 30)
                r.kill()
                time.sleep(OUTAGE_S)  # the outage itself: the stale slots' leases still run
                r.start()
                back = time.monotonic()
                _served_again(load, proc, base, back)
            _slots_back(r, prefix, tenant)
        finally:
            proc.stop()


@pytest.mark.processes
def test_a_busy_tenant_is_served_within_2s_of_a_sentinel_failover(
    engines: dict[str, str], tmp_path: Path
) -> None:
    with redis_procs() as procs:
        master, replica, url = start_sentinel_rig(tmp_path, procs)
        prefix = "gwslotsf:"
        proc, base = _two_workers(tmp_path, engines, prefix, url)
        try:
            policy = {"max_concurrent_requests": 4, "requests_per_minute": 1_000_000}
            tenant, _, key = new_tenant(proc.admin, policy)
            with Paced(base, key) as load:
                assert wait_for(lambda: load.served() >= 30)
                master.kill()
                assert wait_for(lambda: sentinel_master(url) == replica.port, timeout=20)
                back = time.monotonic()
                _served_again(load, proc, base, back)
            _slots_back(replica, prefix, tenant)
        finally:
            proc.stop()


@pytest.fixture(scope="module")
def workers(
    engines: dict[str, str], prefix: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Proc, str]]:
    proc, base = _two_workers(tmp_path_factory.mktemp("gw"), engines, prefix, REDIS)
    yield proc, base
    proc.stop()


SEQUENTIAL = 500


@pytest.mark.processes
def test_one_at_a_time_clients_at_their_limit_never_get_a_429(
    workers: tuple[Proc, str],
) -> None:
    """Four tenants with one slot each, a client each sending 500 requests one after the
    other (two JSON, two streams), through two workers: the slot is free before the
    answer ends, so the next request never finds it taken."""
    proc, base = workers
    keys = [new_tenant(proc.admin, {"max_concurrent_requests": 1})[2] for _ in range(4)]

    async def client(key: str, stream: bool) -> dict[int, int]:
        out: dict[int, int] = {}
        body = {"model": "auto", "messages": [{"role": "user", "content": "hi"}]}
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
            for _ in range(SEQUENTIAL):
                async with http.post(
                    f"{base}/v1/chat/completions",
                    json={**body, "stream": stream},
                    headers={"Authorization": f"Bearer {key}"},
                ) as r:
                    await r.read()
                    out[r.status] = out.get(r.status, 0) + 1
        return out

    async def run() -> list[dict[int, int]]:
        return await asyncio.gather(*(client(k, i % 2 == 1) for i, k in enumerate(keys)))

    assert asyncio.run(run()) == [{200: SEQUENTIAL}] * 4
