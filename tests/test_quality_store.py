"""The demotions' store contract, alike in this process, in the embedded store's file and in
Redis: compare-and-set writes (one record however many replicas decide; a pin replaces; a
restore ends only the version it judged), the fleet's probe verdicts per version, expiry,
and one event per change."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path

import pytest

from gateway.store.base import Store
from gateway.store.demotions import Demotion
from gateway.store.events import DemotionChanged
from gateway.store.memory_store import MemoryStore
from gateway.store.redis_store import RedisStore
from gateway.store.sqlite_store import SqliteStore
from tests.conftest import REDIS

Make = Callable[[], Awaitable[Store]]


@pytest.fixture(params=["memory", "sqlite", "redis"])
def make(request: pytest.FixtureRequest, tmp_path: Path, prefix: str) -> Make:
    async def build() -> Store:
        if request.param == "memory":
            return MemoryStore()
        if request.param == "sqlite":
            return SqliteStore(str(tmp_path / "gateway.db"))
        s = RedisStore(REDIS, f"{prefix}{time.monotonic_ns()}:")
        return s

    return build


def _d(
    reason: str = "92% check failures",
    ttl: float | None = 60.0,
    by: str = "circuit",
    pinned: bool = False,
) -> Demotion:
    now = time.time()
    until = None if ttl is None else now + ttl
    return Demotion("default", "highspeed", reason, now, until, by, pinned)


def test_one_record_a_pin_replaces_and_a_restore_ends_its_version(make: Make) -> None:
    async def run() -> None:
        s = await make()
        heard: list[DemotionChanged] = []

        async def listen() -> None:
            async for ev in s.events():
                if isinstance(ev, DemotionChanged):
                    heard.append(ev)

        task = asyncio.create_task(listen())
        await asyncio.sleep(0.3)  # subscribed
        a = await s.demote(_d(by="circuit a"))
        b = await s.demote(_d("other", by="circuit b"))  # a second replica, at once
        assert a == b and a.version >= 1 and a.by == "circuit a"
        pin = await s.demote(_d("a bad deploy", ttl=None, by="alice", pinned=True), replace=True)
        assert pin.version > a.version and pin.pinned and pin.until is None
        assert await s.restore("default", "highspeed", a.version) is None  # not the record now
        assert await s.demotions() == [pin]
        assert await s.restore("default", "highspeed", pin.version) == pin
        assert await s.demotions() == []
        gone = await s.demote(_d(ttl=-1))  # past its until: ignored, and replaced
        assert await s.demotions() == []
        fresh = await s.demote(_d("fresh"))
        assert fresh.version > gone.version and fresh.reason == "fresh"
        await asyncio.sleep(0.5)  # the embedded store's other processes poll; this one is told
        task.cancel()
        versions = [ev.version for ev in heard]
        assert versions == [a.version, pin.version, 0, gone.version, fresh.version]
        await s.close()

    asyncio.run(run())


def test_the_fleets_probes_are_kept_per_version(make: Make) -> None:
    async def run() -> None:
        s = await make()
        d = await s.demote(_d())
        assert [await s.probed(d, f, 3) for f in (True, False, False, True)] == [
            "1",
            "01",
            "001",
            "100",
        ]
        assert await s.probed(replace(d, version=d.version + 5), True, 3) is None
        pin = await s.demote(_d("pinned", pinned=True), replace=True)
        assert await s.probed(pin, False, 3) == "0"  # a new record: its own probes
        assert await s.restore("default", "highspeed") is not None
        assert await s.probed(pin, False, 3) is None
        await s.close()

    asyncio.run(run())


def test_a_record_this_version_cannot_read_is_skipped() -> None:
    assert Demotion.decode(b"3:0101") is None
    assert Demotion.decode(b'{"rule": "r"}') is None
    d = _d()
    assert Demotion.decode(d.encode()) == d
