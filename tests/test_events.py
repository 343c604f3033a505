"""Store events: typed values with one encoding, announced by the store write itself.

The codec round-trips every kind and speaks the wire format replicas have always spoken
(rolling upgrades); what it cannot read is :class:`Unknown`, never an error. Each store
write (in process, in the embedded store's file and in Redis) publishes its own event,
once; no admin route does.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import orjson
import pytest

from gateway.access.guard import Access
from gateway.store.base import Store
from gateway.store.events import (
    KINDS,
    DemotionChanged,
    Event,
    KeyChanged,
    Resync,
    RulesChanged,
    StoreDown,
    TenantChanged,
    Unknown,
    decode,
    encode,
)
from gateway.store.memory_store import MemoryStore
from gateway.store.redis_store import RedisStore
from gateway.store.sqlite_store import SqliteStore
from gateway.tenancy.tenants import ApiKey, Effective, Policy, Tenant
from tests.conftest import REDIS

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES: tuple[Event, ...] = (
    RulesChanged(7),
    TenantChanged("ten_1"),
    KeyChanged("digest_1"),
    DemotionChanged("default", "highspeed", 3),
    Resync(),
    StoreDown(),
)


def test_every_kind_has_an_example() -> None:
    assert {type(ev) for ev in EXAMPLES} == set(KINDS)


@pytest.mark.parametrize("ev", [*EXAMPLES, Unknown("newer_kind", {"x": 1})], ids=repr)
def test_the_codec_round_trips(ev: Event) -> None:
    assert decode(encode(ev)) == ev


def test_the_wire_is_what_replicas_always_spoke() -> None:
    assert orjson.loads(encode(TenantChanged("t"))) == {"type": "tenant", "id": "t"}
    assert orjson.loads(encode(KeyChanged("d"))) == {"type": "key", "digest": "d"}
    assert orjson.loads(encode(RulesChanged(3))) == {"type": "rules", "version": 3}
    assert decode(b'{"type": "rules", "version": 3, "by": "admin"}') == RulesChanged(3)


@pytest.mark.parametrize(
    "raw",
    [
        b'{"type": "demoted", "tier": "highspeed"}',
        b'{"type": "key"}',
        b'{"type": "rules", "version": "3"}',
        b'{"type": "rules", "version": true}',
        b'{"type": 5}',
        b"{}",
        b"[1]",
        b"not json",
        b"",
    ],
)
def test_what_cannot_be_read_is_unknown_not_an_error(raw: bytes) -> None:
    ev = decode(raw)
    assert isinstance(ev, Unknown)
    access = Access(None, b"s", False, 30.0)
    access.cache.put("d", Effective(Policy(), tenant_id="t"), time.monotonic())
    access.on_event(ev)  # ignored
    assert len(access.cache) == 1


def test_the_key_cache_follows_the_events() -> None:
    access = Access(None, b"s", False, 30.0)
    now = time.monotonic()
    for d, t in (("d1", "t1"), ("d2", "t1"), ("d3", "t2")):
        access.cache.put(d, Effective(Policy(), tenant_id=t), now)
    access.on_event(KeyChanged("d3"))
    assert access.cache.get("d3") is None and len(access.cache) == 2
    access.on_event(TenantChanged("t1"))
    assert len(access.cache) == 0


# -- a write announces itself --------------------------------------------------------------


async def _writes(s: Store) -> list[Event]:
    """Every kind of write, straight at the store (no admin route); what each announces."""
    v1, _, ours = await s.claim_first_rules("a: 1", {"by": "t"})  # an empty store: ours
    assert ours
    assert not (await s.claim_first_rules("a: 2", {"by": "t"}))[2]  # adopted: says nothing
    await s.create_tenant(Tenant(id="ten_e", name="e"))
    await s.add_key(ApiKey(id="key_e", tenant_id="ten_e", digest="de", prefix="gk"))
    await s.update_tenant("ten_e", lambda t: t.model_copy(update={"name": "f"}))
    v2 = await s.save_rules("a: 3", {"by": "t"})  # stored, not current: says nothing
    await s.set_current_rules(v2)
    await s.delete_key("key_e")
    await s.add_key(ApiKey(id="key_f", tenant_id="ten_e", digest="df", prefix="gk"))
    await s.delete_tenant("ten_e")  # its keys, then itself
    return [
        RulesChanged(v1),
        TenantChanged("ten_e"),
        KeyChanged("de"),
        TenantChanged("ten_e"),
        RulesChanged(v2),
        KeyChanged("de"),
        KeyChanged("df"),
        KeyChanged("df"),
        TenantChanged("ten_e"),
    ]


async def _announced(
    store: Store, writes: Callable[[Store], Awaitable[list[Event]]]
) -> tuple[list[Event], list[Event]]:
    """(what a subscriber heard while ``writes`` ran, then 0.3 s more; what it expected)."""
    heard: list[Event] = []
    subscribed = asyncio.Event()

    async def listen() -> None:
        async for ev in store.events():
            if ev == Resync():  # Redis: subscribed
                subscribed.set()
            else:
                heard.append(ev)

    task = asyncio.get_running_loop().create_task(listen())
    try:
        if isinstance(store, RedisStore):
            await asyncio.wait_for(subscribed.wait(), 5)
        else:
            await asyncio.sleep(0.01)  # the listener is registered at its first step
        want = await writes(store)
        deadline = time.monotonic() + 5
        while len(heard) < len(want) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.3)  # and nothing more: each write says it once
        return heard, want
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def test_a_memory_store_write_announces_itself_once() -> None:
    heard, want = asyncio.run(_announced(MemoryStore(), _writes))
    assert heard == want


def test_a_redis_store_write_announces_itself_once(prefix: str) -> None:
    async def run() -> tuple[list[Event], list[Event]]:
        store = RedisStore(REDIS, prefix + "ev:")
        try:
            return await _announced(store, _writes)
        finally:
            await store.delete_prefix()
            await store.close()

    heard, want = asyncio.run(run())
    assert heard == want


def test_a_sqlite_store_write_announces_itself_once(tmp_path: Path) -> None:
    async def run() -> tuple[list[Event], list[Event]]:
        store = SqliteStore(str(tmp_path / "gateway.db"))
        try:
            return await _announced(store, _writes)
        finally:
            await store.close()

    heard, want = asyncio.run(run())
    assert heard == want


def test_another_process_of_the_file_hears_every_write(tmp_path: Path) -> None:
    """Two embedded stores on one file (two worker processes): what one writes, the other
    hears, in order, within a poll; a change counter, no pub/sub."""

    async def run() -> tuple[list[Event], list[Event], float]:
        path = str(tmp_path / "gateway.db")
        writer, other = SqliteStore(path), SqliteStore(path)
        heard: list[Event] = []
        events = other.events()
        assert await anext(events) == Resync()

        async def listen() -> None:
            async for ev in events:
                heard.append(ev)

        task = asyncio.get_running_loop().create_task(listen())
        try:
            start = time.monotonic()
            await writer.create_tenant(Tenant(id="ten_w", name="w"))
            while not heard and time.monotonic() - start < 5:
                await asyncio.sleep(0.005)
            took = time.monotonic() - start
            want = await _writes(writer)
            deadline = time.monotonic() + 5
            while len(heard) < len(want) + 1 and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            return heard, [TenantChanged("ten_w"), *want], took
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await writer.close()
            await other.close()

    heard, want, took = asyncio.run(run())
    assert heard == want and took < 1.0


def test_no_admin_route_announces_a_write() -> None:
    for path in sorted((ROOT / "gateway" / "admin").rglob("*.py")):
        assert ".publish(" not in path.read_text(encoding="utf-8"), path
