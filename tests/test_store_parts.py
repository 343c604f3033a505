"""The store's parts on their own: store URLs, error reasons, the breaker, the key cache,
slot leases, the settle bookkeeping, the usage backlog, and the same contract on every
kind of Redis (one Redis, a Sentinel master, a Cluster). Pure tables where the logic is
pure; the real Redis on 127.0.0.1:6379 (own prefix) or Redis processes of the test's own.
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncGenerator, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis.exceptions as rx

from gateway.access.backlog import Unsettled, UsageBacklog
from gateway.access.cache import KeyCache
from gateway.access.guard import Access
from gateway.errors import RateLimited, ServiceUnavailable, StoreUnavailable
from gateway.store.base import Store, Usage, Used
from gateway.store.demotions import Demotion
from gateway.store.events import KeyChanged, Resync, RulesChanged, TenantChanged
from gateway.store.health import StoreHealth
from gateway.store.memory_store import MemoryStore
from gateway.store.redis_conn import reason_of
from gateway.store.redis_store import RedisStore
from gateway.store.sqlite_store import SqliteStore
from gateway.storeurl import store_target
from gateway.tenancy.limits import (
    DEBIT_LUA,
    SLOT_LEASE_MS,
    SLOT_RENEW_S,
    LocalLimiter,
)
from gateway.tenancy.tenants import ApiKey, Effective, Policy, Tenant, TokenBudget, key_digest
from tests.conftest import REDIS, free_port
from tests.redis_procs import RedisProc, redis_procs, start_cluster, start_sentinel_rig

# -- store URLs ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "kind", "nodes", "master", "db"),
    [
        ("redis://r:6379/0", "single", (), "", 0),
        ("rediss://:pw@r:6380/2", "single", (), "", 0),
        ("unix:///run/redis.sock", "single", (), "", 0),
        (
            "redis+sentinel://a:26379,b:26380/mymaster/3",
            "sentinel",
            (("a", 26379), ("b", 26380)),
            "mymaster",
            3,
        ),
        ("redis+sentinel://a:26379/mymaster", "sentinel", (("a", 26379),), "mymaster", 0),
        (
            "redis+cluster://a:7000,b:7001,c:7002",
            "cluster",
            (("a", 7000), ("b", 7001), ("c", 7002)),
            "",
            0,
        ),
    ],
)
def test_store_urls(url: str, kind: str, nodes: tuple[Any, ...], master: str, db: int) -> None:
    t = store_target(url)
    assert (t.kind, t.nodes, t.master, t.db) == (kind, nodes, master, db)


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("memcached://m:11211", "unsupported store URL scheme 'memcached://'"),
        ("redis+sentinel://a:26379", "needs /<master-name>"),
        ("redis+sentinel://a:26379/m/x", "needs /<master-name>"),
        ("redis+cluster://a:7000/1", "takes no path"),
        ("redis+cluster://a", "'a' is not host:port"),
        ("redis+cluster://:s3cret@a:99999", "'a:99999' is not host:port"),
        ("redis://r:port/0", "the port is not a number"),
    ],
)
def test_bad_store_urls_say_what_is_wrong(url: str, says: str) -> None:
    with pytest.raises(ValueError) as e:
        store_target(url)
    assert says in str(e.value) and "s3cret" not in str(e.value) and "\n" not in str(e.value)


def test_password_never_in_the_repr() -> None:
    assert "pw" not in repr(store_target("redis+cluster://u:pw@a:7000"))
    assert "pw" not in repr(store_target("redis://u:pw@a:6379/0"))


# -- error reasons ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (rx.ReadOnlyError("You can't write against a read only replica."), "read-only replica"),
        (
            rx.OutOfMemoryError("OOM command not allowed when used memory > 'maxmemory'."),
            "out of memory",
        ),
        (rx.BusyLoadingError("Redis is loading the dataset in memory"), "loading its data"),
        (rx.NoScriptError("No matching script."), "script missing"),
        (rx.MovedError("3999 127.0.0.1:6381"), "slot moved"),
        (rx.AskError("3999 127.0.0.1:6381"), "slot moving"),
        (rx.ClusterDownError("The cluster is down"), "cluster down"),
        (rx.ResponseError("BUSY Redis is busy running a script."), "busy"),
        (rx.ResponseError("MISCONF Redis is configured to save RDB snapshots"), "misconf"),
        (rx.ResponseError("something odd at 10.0.0.5:6379"), "error reply"),
        (rx.TimeoutError("Timeout reading from 10.0.0.5:6379"), "timed out"),
        (TimeoutError(), "timed out"),
        (
            rx.ConnectionError("Error 111 connecting to 10.0.0.5:6379. Connection refused."),
            "unreachable",
        ),
        (ConnectionRefusedError(111, "refused"), "unreachable"),
        (
            rx.RedisClusterException("Redis Cluster cannot be connected 10.0.0.5:7000"),
            "cluster unreachable",
        ),
        (KeyError("slot"), "keyerror"),
    ],
)
def test_every_store_error_has_a_host_free_reason(error: Exception, reason: str) -> None:
    got = reason_of(error)
    assert got == reason and "10.0.0.5" not in got and "6379" not in got


# -- the breaker --------------------------------------------------------------------------------


class _Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_breaker_opens_after_failures_in_a_row_and_logs_once_each_way(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = _Clock()
    h = StoreHealth("single", failures=3, span=0.5, clock=clock)
    seen: list[bool] = []
    h.on_change(seen.append)
    caplog.set_level(logging.WARNING, "gateway.store")
    assert [h.failed("timed out") for _ in range(20)] == [False] * 20  # one wave: not yet
    h.succeeded()  # a success in between: the count starts over
    clock.t += 1.0
    assert [h.failed("timed out"), h.failed("timed out")] == [False, False]
    clock.t += 0.5  # the same store still failing a timeout later
    assert h.failed("timed out", "TimeoutError: Timeout reading from 10.0.0.5:6379")
    assert h.degraded and h.state() == {
        "kind": "single",
        "state": "degraded",
        "reason": "timed out",
        "for_s": 0.0,
    }
    for _ in range(50):
        h.failed("read-only replica")  # already open: nothing more is said
        with pytest.raises(StoreUnavailable, match="degraded, timed out"):
            h.check()
    h.still("read-only replica")
    assert h.state()["reason"] == "read-only replica"
    clock.t += 2.0
    h.recovered()
    h.recovered()
    h.check()  # closed: calls go through
    assert seen == [True, False] and h.refused == 50 and h.outages == 1
    lines = [r.getMessage() for r in caplog.records if r.name == "gateway.store"]
    assert len(lines) == 2 and lines[0].startswith("store degraded: timed out (single: Timeout")
    assert lines[1] == "store back after 2.0 s"
    text = h.prometheus().decode()
    assert 'gateway_store_degraded{kind="single"} 0' in text
    assert 'gateway_store_errors_total{reason="read-only replica"} 50' in text


@pytest.mark.processes
def test_a_dead_redis_is_refused_at_once_and_the_probe_closes_the_breaker(tmp_path: Path) -> None:
    """Calls to a Redis that is not there open the breaker; then they fail without waiting;
    the Redis started on that port is found by the probe, without a call."""
    port = free_port()

    async def run() -> None:
        store = RedisStore(f"redis://127.0.0.1:{port}/0", "gwbreak:", timeout=0.3)
        try:
            while not store.health.degraded:  # refused at once: over one timeout, it opens
                with pytest.raises(StoreUnavailable, match="unreachable"):
                    await store.get_tenant("t")
                await asyncio.sleep(0.05)
            refused = store.health.refused
            with pytest.raises(StoreUnavailable, match="degraded"):
                await store.get_tenant("t")
            assert store.health.refused == refused + 1  # refused by the breaker, not tried
            with redis_procs() as procs:
                procs.append(RedisProc(tmp_path, port=port))
                deadline = time.monotonic() + 10
                while store.health.degraded and time.monotonic() < deadline:
                    await asyncio.sleep(0.05)
                assert not store.health.degraded
                assert await store.get_tenant("t") is None
        finally:
            await store.close()

    asyncio.run(run())


# -- the key cache ------------------------------------------------------------------------------


def _eff(tid: str, fail_closed: bool | None = None) -> Effective:
    return Effective(Policy(fail_closed=fail_closed), tenant_id=tid)


def test_key_cache_is_bounded_least_recently_used_out() -> None:
    c = KeyCache(ttl=30, stale_max=300, max_entries=3)
    for d in "abc":
        c.put(d, _eff(d), 0.0)
    assert c.get("a") is not None  # used: now the newest
    c.put("d", _eff("d"), 0.0)
    assert len(c) == 3 and c.get("b") is None and c.get("a") is not None


@pytest.mark.parametrize(
    ("age", "stale", "fail_closed", "fresh", "served_degraded"),
    [
        (1.0, False, None, True, True),
        (31.0, False, None, False, True),  # re-read, but served if the store cannot answer
        (1.0, True, None, False, True),  # marked stale (an event gap): re-read first
        (299.0, False, None, False, True),
        (301.0, False, None, False, False),  # past stale_max: a revocation has taken effect
        (1.0, False, True, True, False),  # fail_closed: never served blind
    ],
)
def test_key_cache_freshness_and_last_known(
    age: float, stale: bool, fail_closed: bool | None, fresh: bool, served_degraded: bool
) -> None:
    c = KeyCache(ttl=30, stale_max=300, max_entries=10)
    c.put("k", _eff("t", fail_closed), 1000.0)
    if stale:
        c.mark_stale()
    entry = c.get("k")
    assert entry is not None
    assert c.fresh(entry, 1000.0 + age) is fresh
    assert (c.last_known(entry, 1000.0 + age) is not None) is served_degraded


# -- slot leases --------------------------------------------------------------------------------

LEASE = SLOT_LEASE_MS / 1000
ONE = Policy(max_concurrent_requests=1)


@pytest.mark.parametrize(
    ("renew_at", "then", "free"),
    [
        (None, LEASE - 0.5, False),  # within the lease: still held
        (None, LEASE + 0.5, True),  # its holder stopped renewing: free again
        (LEASE - 1.0, LEASE + 0.5, False),  # renewed: held on
        (LEASE - 1.0, 2 * LEASE, True),  # renewed once, then no more
    ],
)
def test_a_slot_is_a_lease(renew_at: float | None, then: float, free: bool) -> None:
    lim = LocalLimiter()
    assert lim.admit("t", "a", ONE, now=0.0).ok
    if renew_at is not None:
        lim.renew("t", ["a"], now=renew_at)
    assert lim.admit("t", "b", ONE, now=then).ok is free


def test_a_released_slot_is_not_renewed_back() -> None:
    lim = LocalLimiter()
    assert lim.admit("t", "a", ONE, now=0.0).ok
    lim.release("t", "a")
    lim.renew("t", ["a"], now=1.0)
    assert lim.admit("t", "b", ONE, now=1.0).ok


def test_renewal_keeps_the_lease_past_its_first_expiry(prefix: str) -> None:
    """Access renews the slots it holds (every SLOT_RENEW_S): the lease in Redis moves on."""

    async def run() -> tuple[float, float, float]:
        store = RedisStore(REDIS, prefix)
        try:
            access = Access(store, b"s", True, 30.0)
            eff = Effective(Policy(max_concurrent_requests=2), tenant_id="ten_lease")
            await access.admit(eff, "adm_long")
            key = store.conn.t("ten_lease", "inflight")
            slot = access.leases.slot("adm_long")  # stamped with this process's fleet id
            first = float(await store.conn.r.zscore(key, slot))
            deadline = time.monotonic() + SLOT_RENEW_S * 3
            later = first
            while later <= first and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
                later = float(await store.conn.r.zscore(key, slot))
            await access.release("ten_lease", "adm_long")
            # a renewal that crossed the release (not re-adding) does not take it back
            await store.sync_slots("ten_lease", access.leases.owner, [slot], [], readd=False)
            gone = await store.conn.r.zscore(key, slot)
            await access.close()
            return first, later, -1.0 if gone is None else float(gone)
        finally:
            await store.close()

    first, later, gone = asyncio.run(run())
    assert later > first and gone == -1.0


def test_an_admission_that_reaches_redis_too_late_takes_nothing(prefix: str) -> None:
    """ARGV[13] (not after, Redis's clock) in the past: the script refuses and writes nothing."""

    async def run() -> tuple[Any, int]:
        store = RedisStore(REDIS, prefix)
        try:
            c = store.conn
            keys = [c.t("ten_late", k) for k in ("rpm", "tpm", "inflight", "budget:x", "cost:x")]
            args = [int(time.time() * 1000), 0, 0, 5, 0, "adm_1", SLOT_LEASE_MS, 0, 0, 0, 60, 60]
            res = await store._admit(keys=keys, args=[*args, int(time.time() * 1000) - 1])
            return res, int(await c.r.zcard(keys[2]))
        finally:
            await store.close()

    res, held = asyncio.run(run())
    assert res[1] == b"late" and held == 0


# -- settle bookkeeping -------------------------------------------------------------------------


def test_settle_ids_are_one_bounded_key_per_tenant(prefix: str) -> None:
    async def run() -> tuple[int, int, Usage, int]:
        store = RedisStore(REDIS, prefix)
        try:
            p = Policy(token_budget=TokenBudget(tokens=10_000))
            for i in range(30):
                await store.record_usage(
                    "ten_set", Used("highspeed", 1, 2, settle_id=f"adm_{i}"), p
                )
            await store.record_usage("ten_set", Used("highspeed", 1, 2, settle_id="adm_3"), p)
            c = store.conn
            keys = [k async for k in c.r.scan_iter(match=c.t("ten_set", "settled") + "*")]
            members = int(await c.r.zcard(c.t("ten_set", "settled")))
            # the same script with a cap of 5: only the newest 5 ids are kept
            t = [c.t("ten_cap", w) for w in ("tpm", "b", "c", "b", "c", "u", "settled")]
            for i in range(12):
                args = [int(time.time() * 1000) + i, 0, 1, 60, 0, 60, 0, 0, 60, f"a{i}", 60_000, 5]
                await c.r.eval(DEBIT_LUA, len(t), *t, *args)
            capped = int(await c.r.zcard(t[6]))
            return len(keys), members, await store.usage("ten_set"), capped
        finally:
            await store.close()

    keys, members, usage, capped = asyncio.run(run())
    assert keys == 1 and members == 30 and capped == 5
    assert usage.requests == 30 and usage.prompt_tokens == 30  # the repeat counted once


def test_usage_counts_in_its_own_day() -> None:
    async def run() -> Usage:
        s = MemoryStore()
        await s.record_usage("t", Used("standard", 1, 1, at=86400.0 * 3), Policy())
        return await s.usage("t", "19700104")

    assert asyncio.run(run()).requests == 1


# -- the usage backlog --------------------------------------------------------------------------


class _Away(MemoryStore):
    """A store whose usage writes fail while ``away`` (at the store interface)."""

    away = True

    async def record_usage(self, tenant_id: str, used: Used, p: Policy, hold: Any = None) -> None:
        if self.away:
            raise StoreUnavailable("unreachable")
        await super().record_usage(tenant_id, used, p, hold)


def test_usage_the_store_could_not_take_is_written_when_it_is_back() -> None:
    async def run() -> tuple[int, Usage, int]:
        store = _Away()
        access = Access(store, b"s", True, 30.0)
        eff = Effective(Policy(), tenant_id="ten_b")
        for i in range(3):
            await access.done(eff, f"adm_{i}", "standard", {"prompt_tokens": 2}, None)
        waiting = len(access.backlog or [])
        store.away = False
        deadline = time.monotonic() + 5
        while (await store.usage("ten_b")).requests < 3 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        await access.close()
        return waiting, await store.usage("ten_b"), len(access.backlog or [])

    waiting, usage, left = asyncio.run(run())
    assert waiting == 3 and usage.requests == 3 and usage.prompt_tokens == 6 and left == 0


def test_the_backlog_is_bounded() -> None:
    async def run() -> tuple[int, int]:
        b = UsageBacklog(_Away(), max_entries=4)
        for i in range(10):
            b.add(Unsettled("t", Used("standard", 1, 1, settle_id=str(i)), Policy(), None))
        await b.close(flush_s=0.1)
        return len(b), b.dropped

    assert asyncio.run(run()) == (4, 6)


# -- degraded access, by policy -----------------------------------------------------------------


class _Down(MemoryStore):
    """Every call fails while ``down`` and the breaker says so (at the store interface)."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False

    def fail(self) -> None:
        if self.down:
            raise StoreUnavailable("unreachable")

    async def key_by_digest(self, digest: str) -> Any:
        self.fail()
        return await super().key_by_digest(digest)

    async def admit(self, *a: Any, **k: Any) -> Any:
        self.fail()
        return await super().admit(*a, **k)


@pytest.mark.parametrize(
    ("policy", "first_five", "sixth"),
    [
        ({"requests_per_minute": 5}, 200, 429),  # fail-open: this replica's own limit
        ({"requests_per_minute": 5, "fail_closed": True}, 503, 503),
        ({"fail_closed": True}, 503, 503),
        ({}, 200, 200),
    ],
)
def test_store_down_limits_fail_open_or_closed_by_policy(
    policy: dict[str, Any], first_five: int, sixth: int
) -> None:
    async def run() -> list[int]:
        store = _Down()
        await store.create_tenant(Tenant(id="ten_p", name="t", policy=Policy(**policy)))
        await store.add_key(
            ApiKey(id="k", tenant_id="ten_p", digest=key_digest(b"s", "gk-1"), prefix="gk")
        )
        access = Access(store, b"s", True, 30.0)
        await access.authenticate("Bearer gk-1")  # seen while the store answered
        store.down = True
        store.health.span = 0.0
        for _ in range(3):
            store.health.failed("unreachable")
        out = []
        for i in range(6):
            try:
                eff = await access.authenticate("Bearer gk-1")
                await access.admit(eff, f"adm_{i}")
                out.append(200)
            except ServiceUnavailable:
                out.append(503)
            except RateLimited:
                out.append(429)
        return out

    got = asyncio.run(run())
    assert got == [first_five] * 5 + [sixth]


# -- the same contract on one Redis, a Sentinel master and a Cluster ----------------------------


@pytest.fixture(scope="module")
def store_urls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    tmp = tmp_path_factory.mktemp("kinds")
    with redis_procs() as procs:
        _, cluster = start_cluster(tmp, procs)
        _, _, sentinel = start_sentinel_rig(tmp, procs)
        yield {"single": REDIS, "sentinel": sentinel, "cluster": cluster}


def open_store(kind: str, request: pytest.FixtureRequest, tmp: Path) -> Store:
    """A store of ``kind``: a Redis one (``single``, ``sentinel``, ``cluster``; own prefix),
    the embedded store's file (``sqlite``) or the in-process one (``memory``)."""
    if kind == "sqlite":
        return SqliteStore(str(tmp / "gateway.db"))
    if kind == "memory":
        return MemoryStore()
    urls: dict[str, str] = request.getfixturevalue("store_urls")
    return RedisStore(urls[kind], f"gwkind:{uuid.uuid4().hex[:6]}:")


async def close_store(store: Store) -> None:
    if isinstance(store, RedisStore):
        await store.delete_prefix()
    await store.close()


OWN_REDIS = [  # Redis servers of its own
    pytest.param(k, marks=pytest.mark.processes) for k in ("single", "sentinel", "cluster")
]


@pytest.mark.parametrize("kind", [*OWN_REDIS, "sqlite", "memory"])
def test_every_store_keeps_the_same_contract(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """The same calls, the same answers and the same events from every store: Redis of
    every kind, the embedded store's file, the in-process one."""

    async def run() -> None:
        store = open_store(kind, request, tmp_path)
        events = store.events()
        assert isinstance(events, AsyncGenerator)  # closed below (the protocol says iterator)
        try:
            assert await anext(events) == Resync()  # subscribed
            await store.create_tenant(Tenant(id="ten_k", name="k"))
            await store.add_key(ApiKey(id="key_k", tenant_id="ten_k", digest="dk", prefix="gk"))
            found = await store.key_by_digest("dk")
            assert found is not None and found[1].id == "ten_k"
            new = await store.update_tenant("ten_k", lambda t: t.model_copy(update={"name": "x"}))
            assert new is not None and new.version == 2
            p = Policy(max_concurrent_requests=1, token_budget=TokenBudget(tokens=100))
            assert (await store.admit("ten_k", "a1", p)).ok
            assert not (await store.admit("ten_k", "a2", p)).ok  # concurrency, in one slot
            assert await store.sync_slots("ten_k", "a", ["a1"], [], False) == 0  # renewed
            await store.release("ten_k", "a1")
            for _ in range(2):
                await store.record_usage("ten_k", Used("standard", 3, 4, settle_id="a1"), p)
            assert (await store.usage("ten_k")).requests == 1
            await store.audit({"action": "x"})
            await store.push_shadow({"f1": 1.0})
            assert len(await store.audit_log()) == len(await store.shadow_records()) == 1
            v = await store.save_rules("a: 1", {"by": "t"})
            await store.set_current_rules(v)
            assert await store.current_rules() == (v, "a: 1")
            said = [
                TenantChanged("ten_k"),
                KeyChanged("dk"),
                TenantChanged("ten_k"),
                RulesChanged(v),
            ]
            assert [await asyncio.wait_for(anext(events), 5) for _ in said] == said
            assert [k.id for k in await store.delete_tenant("ten_k") or []] == ["key_k"]
            assert await store.key_by_digest("dk") is None and await store.list_tenants() == []
            await store.put_reveal("tok", b"shown once", 60)
            assert await store.take_reveal("tok") == b"shown once"
            assert await store.take_reveal("tok") is None
            await store.put_reveal("old", b"x", 0.001)
            await asyncio.sleep(0.05)
            assert await store.take_reveal("old") is None
            now = time.time()  # the quality circuit's records: one script on one slot
            d = await store.demote(Demotion("default", "highspeed", "loops", now, now + 60))
            assert await store.demote(Demotion("default", "highspeed", "later", now)) == d
            assert await store.probed(d, True, 3) == "1"
            assert await store.restore("default", "highspeed", d.version) == d
            assert await store.demotions() == []
            assert not store.health.degraded
        finally:
            await events.aclose()
            await close_store(store)

    asyncio.run(run())


# -- start-up and a full memory -----------------------------------------------------------------


@pytest.mark.processes
def test_an_unsupported_store_url_is_one_line_and_exit_2() -> None:
    env = {
        **os.environ,
        "GATEWAY_REDIS_URL": "memcached://:s3cret@cache:11211",
        "GATEWAY_KEY_SECRET": "k" * 16,
    }
    r = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "serve", "--port", str(free_port())],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr and "s3cret" not in r.stderr
    assert r.stderr.strip().splitlines() == [
        "error: bad settings: GATEWAY_REDIS_URL: unsupported store URL scheme 'memcached://'; "
        "use redis://, rediss://, unix://, redis+sentinel:// or redis+cluster://"
    ]


@pytest.mark.processes
def test_a_full_memory_is_degraded_and_no_usage_is_lost(tmp_path: Path) -> None:
    """maxmemory reached: settling still counts (one script, which Redis lets write), plain
    writes fail as OOM until the breaker opens; the usage of the degraded time is kept and
    written once Redis has room again (OOM used to escape the usage task: usage lost)."""

    async def run(redis: RedisProc) -> tuple[int, str | None, int, Usage]:
        store = RedisStore(redis.url, "gwoom:", timeout=0.3)
        access = Access(store, b"s", True, 30.0)
        eff = Effective(Policy(), tenant_id="ten_oom")
        try:
            redis.cli("config", "set", "maxmemory", "1")
            for i in range(3):
                await access.done(eff, f"adm_{i}", "standard", {"prompt_tokens": 1}, None)
            counted = (await store.usage("ten_oom")).requests
            while not store.health.degraded:  # an admin write each 0.1 s: OOM
                with pytest.raises(StoreUnavailable):
                    await store.create_tenant(Tenant(id="ten_x", name="x"))
                await asyncio.sleep(0.1)
            reason = store.health.reason
            for i in range(3, 6):
                await access.done(eff, f"adm_{i}", "standard", {"prompt_tokens": 1}, None)
            waiting = len(access.backlog or [])
            redis.cli("config", "set", "maxmemory", "0")
            deadline = time.monotonic() + 10
            while access.backlog and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            return counted, reason, waiting, await store.usage("ten_oom")
        finally:
            await access.close()
            await store.close()

    with redis_procs() as procs:
        redis = RedisProc(tmp_path, "--maxmemory-policy", "noeviction")
        procs.append(redis)
        counted, reason, waiting, usage = asyncio.run(run(redis))
    assert counted == 3 and reason == "out of memory" and waiting == 3
    assert usage.requests == 6 and usage.prompt_tokens == 6
