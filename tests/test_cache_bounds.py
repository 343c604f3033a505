"""Every structure of the response cache inside its byte bound and its TTL, in process and in
Redis: the semantic index's records count in a tenant's bytes and go with the answers they
point at (evicted, expired, deleted, purged), so many distinct conversations cannot grow
an index beside the bound (issue 43: 800 of them left 401 index keys, 409 records and
480 kB outside a 100 kB bound, pointing at answers already evicted)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest

from gateway.cache.backend import Backend
from gateway.cache.memory import MemoryBackend
from gateway.cache.redis_backend import SLACK_MS, RedisBackend
from tests.conftest import REDIS

BOUND = 100_000  # a tenant's bytes
ANSWER = 900  # bytes of one stored answer
RECORD = 800  # bytes of one semantic record (384 float16 and a signature)
KEEP = 200  # max_candidates


@asynccontextmanager
async def _memory() -> AsyncIterator[tuple[Backend, Any]]:
    yield MemoryBackend(max_bytes=4 * BOUND, tenant_max_bytes=BOUND), None


@asynccontextmanager
async def _redis() -> AsyncIterator[tuple[Backend, Any]]:
    import redis.asyncio as redis

    prefix = f"gwtest:{uuid.uuid4().hex[:8]}:"
    r = redis.Redis.from_url(REDIS)
    try:
        yield RedisBackend(r, prefix, 2.0, tenant_max_bytes=BOUND), (r, prefix)
    finally:
        async for k in r.scan_iter(match=prefix + "*"):
            await r.delete(k)
        await r.aclose()


STORES = {"memory": _memory, "redis": _redis}


def _run(store: str, test: Callable[[Backend, Any], Awaitable[None]]) -> None:
    async def go() -> None:
        async with STORES[store]() as (b, r):
            await test(b, r)

    asyncio.run(go())


async def _keep(b: Backend, key: str, scope: str, expires_at: float) -> bool:
    """An answer kept as the cache keeps one: stored, then indexed."""
    await b.put("t", key, b"a" * ANSWER, expires_at)
    return await b.add_vector("t", scope, key, b"r" * RECORD, KEEP)


@pytest.mark.parametrize("store", STORES)
def test_800_distinct_conversations_stay_inside_the_bound(store: str) -> None:
    async def test(b: Backend, r: Any) -> None:
        later = time.time() + 3600
        for i in range(800):
            await _keep(b, f"k{i:04d}", f"scope{i:04d}", later)
        u = await b.usage("t")
        assert u.bytes <= BOUND, u
        assert u.vectors == u.entries, u  # one record per answer kept, none without one
        assert u.bytes == u.entries * (ANSWER + RECORD) + (_members(u.entries) if r else 0)
        kept = {k for k, _ in await b.entries("t", 10_000)}
        for i in range(800):  # a record for every live answer, none for an evicted one
            key = f"k{i:04d}"
            records = await b.vectors("t", f"scope{i:04d}", time.time(), KEEP)
            assert [k for k, _ in records] == ([key] if key in kept else []), key
        if r is not None:
            client, prefix = r
            keys = [k.decode() async for k in client.scan_iter(match=prefix + "*")]
            assert len(keys) == 5, keys  # data, exp, meta, vec, idx: whatever the scopes
            for k in keys:  # none outlives the newest answer by more than the slack
                assert 0 < await client.pttl(k) <= (3600 * 1000) + SLACK_MS, k

    _run(store, test)


def _members(n: int) -> int:
    """Redis's index members: ``<scope>:<12-digit seq>:<key>\\n`` beside each record."""
    return n * (len("scope0000") + 1 + 12 + 1 + len("k0000") + 1)


@pytest.mark.parametrize("store", STORES)
def test_a_record_goes_with_its_answer(store: str) -> None:
    async def test(b: Backend, r: Any) -> None:
        later = time.time() + 3600
        for k in ("a", "b", "c"):
            assert await _keep(b, k, "s", later)
        assert await b.delete("t", "b")
        assert [k for k, _ in await b.vectors("t", "s", time.time(), KEEP)] == ["a", "c"]
        await b.put("t", "soon", b"x" * 10, time.time() + 0.2)
        assert await b.add_vector("t", "s", "soon", b"r" * RECORD, KEEP)
        await asyncio.sleep(0.3)
        assert [k for k, _ in await b.vectors("t", "s", time.time(), KEEP)] == ["a", "c"]
        assert (await b.usage("t")).vectors == 2
        assert not await b.add_vector("t", "s", "never-stored", b"r", KEEP)  # nothing to point at
        assert not await b.add_vector("t", "s", "soon", b"r", KEEP)  # expired
        await b.put("t", "a", b"new answer", later)  # replaced: the old record goes with it
        assert [k for k, _ in await b.vectors("t", "s", time.time(), KEEP)] == ["c"]
        assert await b.purge("t") >= 2
        u = await b.usage("t")
        assert (u.entries, u.bytes, u.vectors) == (0, 0, 0)

    _run(store, test)


@pytest.mark.parametrize("store", STORES)
def test_a_scope_keeps_the_records_of_its_newest_answers(store: str) -> None:
    async def test(b: Backend, r: Any) -> None:
        later = time.time() + 3600
        for i in range(5):
            await b.put("t", f"k{i}", b"a" * 10, later)
            assert await b.add_vector("t", "s", f"k{i}", b"r" * 10, 3)
        assert [k for k, _ in await b.vectors("t", "s", time.time(), 10)] == ["k2", "k3", "k4"]
        assert [k for k, _ in await b.vectors("t", "s", time.time(), 2)] == ["k3", "k4"]
        u = await b.usage("t")
        assert (u.entries, u.vectors) == (5, 3)  # older answers stay, for exact hits

    _run(store, test)
