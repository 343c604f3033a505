"""Limits under load: two gateway replicas on one Redis, 64 concurrent clients.

A busy Redis is not a down Redis: the connection pool is sized and waits briefly for a
free connection, so no tenant gets a spurious 429 or 503, and every concurrency slot is
back to zero afterwards. A release that fails is reclaimed, never left to its lease.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest

from gateway.access.guard import Access
from gateway.errors import StoreUnavailable
from gateway.store.events import Resync
from gateway.store.memory_store import MemoryStore
from gateway.store.redis_store import RedisStore
from gateway.tenancy.tenants import Effective, Policy
from tests.conftest import REDIS, Proc, rules_for_tests, start_gateway
from tests.test_tenancy import new_tenant, tenancy_env
from tests.waiting import wait_until

pytestmark = pytest.mark.processes

CLIENTS = 64
PER_CLIENT = 4


@pytest.fixture(scope="module")
def pair(
    engines: dict[str, str], prefix: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[tuple[Proc, str]]]:
    tmp = tmp_path_factory.mktemp("gw")
    procs = [start_gateway(tmp, rules_for_tests(), engines, tenancy_env(prefix)) for _ in "ab"]
    yield procs
    for p, _ in procs:
        p.stop()


def inflight(prefix: str, tenant: str) -> int:
    """The concurrency slots ``tenant`` holds in the store under ``prefix``."""
    return asyncio.run(_inflight(prefix, tenant))


async def _inflight(prefix: str, tenant: str) -> int:
    s = RedisStore(REDIS, prefix)
    try:
        return int(await s.conn.r.zcard(s.conn.t(tenant, "inflight")))
    finally:
        await s.close()


async def _load(urls: list[str], key: str, content: str = "load") -> dict[int, int]:
    statuses: dict[int, int] = {}
    headers = {"Authorization": f"Bearer {key}"}
    body = {"model": "auto", "messages": [{"role": "user", "content": content}]}

    async def client(i: int, http: aiohttp.ClientSession) -> None:
        for _ in range(PER_CLIENT):
            url = f"{urls[i % len(urls)]}/v1/chat/completions"
            async with http.post(url, json=body, headers=headers) as r:
                await r.read()
                statuses[r.status] = statuses.get(r.status, 0) + 1

    timeout = aiohttp.ClientTimeout(total=60)
    conn = aiohttp.TCPConnector(limit=CLIENTS * 2)
    async with aiohttp.ClientSession(timeout=timeout, connector=conn) as http:
        await asyncio.gather(*(client(i, http) for i in range(CLIENTS)))
    return statuses


def test_64_clients_on_two_replicas_no_spurious_limits(
    pair: list[tuple[Proc, str]], prefix: str
) -> None:
    policy = {
        "max_concurrent_requests": 1000,
        "requests_per_minute": 100_000,
        "tokens_per_minute": 10_000_000,
        "fail_closed": True,  # a Redis that looked down would answer 503
    }
    tenant, _, key = new_tenant(pair[0][0].admin, policy)
    statuses = asyncio.run(_load([url for _, url in pair], key))
    assert statuses == {200: CLIENTS * PER_CLIENT}
    _slots_back(prefix, tenant)
    for proc, _ in pair:
        assert "Too many connections" not in proc.log()


def test_a_full_pool_waits_for_a_connection(prefix: str) -> None:
    """200 admissions at once through a pool of 4 connections: all wait their turn."""

    async def run() -> list[bool]:
        store = RedisStore(REDIS, prefix, timeout=0.5, max_connections=4, pool_wait=2.0)
        p = Policy(max_concurrent_requests=1000)
        try:
            adms = await asyncio.gather(*(store.admit("ten_pool", f"a{i}", p) for i in range(200)))
            await asyncio.gather(*(store.release("ten_pool", f"a{i}") for i in range(200)))
            return [a.ok for a in adms]
        finally:
            await store.close()

    assert all(asyncio.run(run()))
    assert asyncio.run(_inflight(prefix, "ten_pool")) == 0


def test_64_clients_on_two_replicas_limits_hold_exactly(
    pair: list[tuple[Proc, str]], prefix: str
) -> None:
    """Requests per minute and concurrency, shared by both replicas: what is over the limit
    is a 429, nothing else is refused, and the slots come back."""
    urls = [url for _, url in pair]
    tenant, _, key = new_tenant(pair[0][0].admin, {"requests_per_minute": 100})
    t0 = time.monotonic()
    statuses = asyncio.run(_load(urls, key))
    refilled = (time.monotonic() - t0) * 100 / 60  # the bucket refills meanwhile
    assert set(statuses) == {200, 429}
    assert 100 <= statuses[200] <= 100 + refilled + 1
    tenant, _, key = new_tenant(pair[0][0].admin, {"max_concurrent_requests": 8})
    statuses = asyncio.run(_load(urls, key, "[[*: delay=0.2]]"))
    assert set(statuses) <= {200, 429} and statuses[200] >= 8
    _slots_back(prefix, tenant)


def _slots_back(prefix: str, tenant: str) -> None:
    """Every concurrency slot of ``tenant`` released (the last ones settle after the answer)."""
    wait_until(lambda: asyncio.run(_inflight(prefix, tenant)) == 0, f"{tenant}'s slots back")


class _FlakyRelease(MemoryStore):
    """Redis that fails the first ``fails`` releases (a blip), at the store interface."""

    def __init__(self, fails: int) -> None:
        super().__init__()
        self.fails = fails
        self.releases = 0

    async def release(self, tenant_id: str, rid: str) -> None:
        self.releases += 1
        if self.fails > 0:
            self.fails -= 1
            raise StoreUnavailable("blip")
        await super().release(tenant_id, rid)


def test_a_failed_release_is_reclaimed_not_dropped() -> None:
    """The store fails the release: the next admission that finds the tenant full gives
    the stale slot back first (first contact), and is admitted."""

    async def run() -> tuple[int, Any, int]:
        store = _FlakyRelease(fails=1)
        access = Access(store, b"s", True, 30.0)
        eff = Effective(Policy(max_concurrent_requests=1), tenant_id="ten_1")
        assert (await access.admit(eff, "adm_1")).ok
        with pytest.raises(Exception, match="concurrent"):
            await access.admit(eff, "adm_2")
        await access.done(eff, "adm_1", "standard", None, None)
        adm = await access.admit(eff, "adm_3")
        reclaimed = access.leases.reclaimed
        await access.close()
        return store.releases, adm, reclaimed

    releases, adm, reclaimed = asyncio.run(run())
    assert releases == 1 and adm.ok and reclaimed == 1


def test_streams_are_charged_for_prompt_and_completion(pair: list[tuple[Proc, str]]) -> None:
    import openai

    from tests.test_tenancy import call
    from tests.waiting import until

    admin, url = pair[0][0].admin, pair[1][1]
    tenant, _, key = new_tenant(admin)
    client = openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=20)
    chunks = list(
        client.chat.completions.create(
            model="auto", messages=[{"role": "user", "content": "stream"}], stream=True
        )
    )
    client.close()
    assert chunks and all(c.choices for c in chunks)  # no usage chunk the client did not ask for

    def usage() -> dict[str, Any]:
        return dict(call(admin, "GET", f"/admin/tenants/{tenant}/usage")[1])

    assert until(lambda: usage()["requests"] == 1)
    u = usage()
    assert u["prompt_tokens"] == 10 and u["completion_tokens"] > 0  # the engine's own report


class _Restarting(MemoryStore):
    """A store whose reads fail while ``down`` (Redis restarting, still loading)."""

    down = False

    async def key_by_digest(self, digest: str) -> Any:
        if self.down:
            raise StoreUnavailable("LOADING Redis is loading the dataset in memory")
        return await super().key_by_digest(digest)


def test_known_keys_keep_working_right_after_a_redis_restart() -> None:
    from gateway.tenancy.tenants import ApiKey, Tenant, key_digest

    async def run() -> str:
        store = _Restarting()
        await store.create_tenant(Tenant(id="ten_1", name="t"))
        await store.add_key(
            ApiKey(id="key_1", tenant_id="ten_1", digest=key_digest(b"s", "gk-1"), prefix="gk-1")
        )
        access = Access(store, b"s", True, 30.0)
        assert (await access.authenticate("Bearer gk-1")).tenant_id == "ten_1"
        access.on_event(Resync())  # Redis is back: every key is re-read ...
        store.down = True  # ... but the first calls still fail
        eff = await access.authenticate("Bearer gk-1")  # the last known policy, not a 503
        store.down = False
        return str(eff.tenant_id)

    assert asyncio.run(run()) == "ten_1"
