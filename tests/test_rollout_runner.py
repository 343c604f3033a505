"""Judged rollouts over a real store, in process: counts that add up across processes in
Redis, SQLite and memory; the lease (one holder, expiry, renewal, giving up); and the
runner with a real :class:`RulesControl`: it promotes a canary that is no worse step by
step, rolls back one that is worse, each step a stored, audited rules version."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.errors import StoreUnavailable
from gateway.rollout.runner import BY, Rollouts, weights_in
from gateway.rollout.view import rollouts_view
from gateway.rules.control import RulesControl
from gateway.rules.schema import Rules, parse_rules
from gateway.store.memory_store import MemoryStore
from gateway.store.redis_store import RedisStore
from gateway.store.sqlite_store import SqliteStore
from gateway.telemetry.record import AttemptRecord, RequestRecord
from tests.conftest import REDIS, rules_for_tests

KINDS = ["memory", "sqlite", "redis"]


def _open(kind: str, tmp: Path, prefix: str) -> tuple[Any, Any]:
    """Two processes' views of one store (Redis, one SQLite file; memory: the same object)."""
    if kind == "memory":
        s = MemoryStore()
        return s, s
    if kind == "sqlite":
        return SqliteStore(str(tmp / "g.db")), SqliteStore(str(tmp / "g.db"))
    return RedisStore(REDIS, prefix), RedisStore(REDIS, prefix)


def _with_stores(kind: str, tmp: Path, prefix: str, body: Callable[[Any, Any], Any]) -> None:
    async def run() -> None:
        a, b = _open(kind, tmp, prefix)
        try:
            await body(a, b)
        finally:
            if isinstance(a, RedisStore):
                await a.delete_prefix()
            if a is not b:
                await b.close()
            await a.close()

    asyncio.run(run())


@pytest.mark.parametrize("kind", KINDS)
def test_counts_add_up_across_processes(kind: str, tmp_path: Path, prefix: str) -> None:
    async def body(a: Any, b: Any) -> None:
        t1 = int(time.time() * 1000)  # a bucket's start, ms
        t2 = t1 + 1000
        await a.count_rollout("r", {(t1, "next|n"): 2, (t1, "next|fb"): 1})
        await b.count_rollout("r", {(t1, "next|n"): 3, (t2, "stable|n"): 5})
        await b.count_rollout("r", {(t2, "next|n"): 1})
        assert await b.rollout_counts("r", 0) == {"next|n": 6, "next|fb": 1, "stable|n": 5}
        assert await a.rollout_counts("r", t2) == {"next|n": 1, "stable|n": 5}
        assert await b.rollout_counts("r", 0) == {"next|n": 1, "stable|n": 5}  # t1's dropped
        await a.put_rollout("r", {"share": 25.0, "history": [{"action": "started"}]})
        assert (await b.rollouts())["r"]["share"] == 25.0

    _with_stores(kind, tmp_path, f"{prefix}counts-{kind}:", body)


@pytest.mark.parametrize("kind", KINDS)
def test_one_process_holds_the_lease_until_it_expires_or_is_given_up(
    kind: str, tmp_path: Path, prefix: str
) -> None:
    async def body(a: Any, b: Any) -> None:
        assert await a.hold_lease("job", "p1", 0.3)
        assert not await b.hold_lease("job", "p2", 0.3)
        assert await a.hold_lease("job", "p1", 0.3)  # renewed by its holder
        assert await b.lease_holder("job") == "p1"
        await asyncio.sleep(0.4)  # p1 died: it renews no more
        assert await b.lease_holder("job") is None
        assert await b.hold_lease("job", "p2", 5)
        assert not await a.hold_lease("job", "p1", 5)
        await a.drop_lease("job", "p1")  # not its lease: nothing happens
        assert await a.lease_holder("job") == "p2"
        await b.drop_lease("job", "p2")
        assert await a.hold_lease("job", "p1", 5)  # given up: taken at once

    _with_stores(kind, tmp_path, f"{prefix}lease-{kind}:", body)


# -- the runner ---------------------------------------------------------------------------


def _text(canary: float = 10, **analysis: Any) -> str:
    data = rules_for_tests()
    data["default"]["split"] = [
        {"tier": "highspeed", "weight": 100 - canary, "name": "stable"},
        {"tier": "standard", "weight": canary, "name": "next"},
    ]
    data["default"]["analysis"] = {
        "baseline": "stable",
        "canary": "next",
        "steps": [10, 50, 100],
        "interval": 1,
        "min_samples": 20,
        **analysis,
    }
    return "# the operator's comment\n" + yaml.safe_dump(data, sort_keys=False)


class Fleet:
    """One process's rules control and rollouts over a store, with a clock of its own."""

    def __init__(self, store: Any, tmp: Path, owner: str, now: list[float]):
        text = _text()
        self.rollouts = Rollouts(parse_rules(text), store, owner, clock=lambda: now[0])

        def apply(r: Rules) -> None:
            self.rollouts.use_rules(r)

        self.control = RulesControl(store, tmp / "rules.yaml", text, apply, None, 0)

    def serve(self, arm: str, n: int, failing: float = 0.0) -> None:
        for i in range(n):
            bad = i < failing * n
            failures = (AttemptRecord("standard", "http_503"),) if bad else ()
            rec = RequestRecord(
                request_id=f"r{i}",
                kind="chat",
                status=200,
                latency_s=0.05,
                overhead_s=0.0,
                rule="default",
                arm=arm,
                failures=failures,
            )
            self.rollouts.observe(rec)


async def _traffic(fleet: Fleet, share: float, canary_failing: float, now: list[float]) -> None:
    """About 200 requests split by ``share``; then a tick 0.5 s later."""
    n = 200
    fleet.serve("next", max(1, round(n * share / 100)), canary_failing)
    fleet.serve("stable", round(n * (100 - share) / 100), 0.0)
    now[0] += 0.5
    await fleet.rollouts.tick(fleet.control)


def test_a_canary_no_worse_is_promoted_step_by_step(tmp_path: Path) -> None:
    asyncio.run(_a_canary_no_worse_is_promoted_step_by_step(tmp_path))


async def _a_canary_no_worse_is_promoted_step_by_step(tmp_path: Path) -> None:
    store, now = MemoryStore(), [float(int(time.time()))]
    f = Fleet(store, tmp_path, "p1", now)
    await f.control.start()
    first = f.control.version
    shares: list[float] = []
    for _ in range(40):
        w = f.rollouts.watching["default"]
        await _traffic(f, w.share, 0.0, now)
        if not shares or shares[-1] != f.rollouts.watching["default"].share:
            shares.append(f.rollouts.watching["default"].share)
    assert shares == [10, 50, 100]
    assert weights_in(f.control.text, "default") == {"stable": 0.0, "next": 100.0}
    assert f.control.text.startswith("# the operator's comment\n")  # the text edited, not redone
    versions = await store.rules_versions()
    assert [v["by"] for v in versions[-2:]] == [BY, BY] and f.control.version == first + 2
    audit = await store.audit_log()
    assert [e["action"] for e in audit[:2]] == ["rollout.promote", "rollout.promote"]
    assert {e["who"] for e in audit[:2]} == {BY}
    view = (await rollouts_view(f.rollouts))["data"][0]
    assert view["decision"] == "complete" and view["share"] == 100
    assert [h["action"] for h in view["history"]] == ["started", "promote", "promote"]


def test_a_worse_canary_is_rolled_back_at_once(tmp_path: Path) -> None:
    asyncio.run(_a_worse_canary_is_rolled_back_at_once(tmp_path))


async def _a_worse_canary_is_rolled_back_at_once(tmp_path: Path) -> None:
    store, now = MemoryStore(), [float(int(time.time()))]
    f = Fleet(store, tmp_path, "p1", now)
    await f.control.start()
    for _ in range(30):
        await _traffic(f, f.rollouts.watching["default"].share, 0.4, now)
        if f.rollouts.watching["default"].share == 0:
            break
    assert weights_in(f.control.text, "default") == {"stable": 100.0, "next": 0.0}
    (entry,) = [e for e in await store.audit_log() if e["action"] == "rollout.rollback"]
    fb = next(c for c in entry["change"]["comparisons"] if c["metric"] == "fallback_rate")
    assert fb["worse"] and fb["p_value"] < fb["alpha"] and fb["canary"] > 0.3
    view = (await rollouts_view(f.rollouts))["data"][0]
    assert view["decision"] == "rolled_back" and view["history"][-1]["action"] == "rollback"


def test_only_the_lease_holder_steps_and_counts_are_the_fleets(tmp_path: Path) -> None:
    asyncio.run(_only_the_lease_holder_steps_and_counts_are_the_fleets(tmp_path))


async def _only_the_lease_holder_steps_and_counts_are_the_fleets(tmp_path: Path) -> None:
    store, now = MemoryStore(), [float(int(time.time()))]
    a, b = Fleet(store, tmp_path, "a", now), Fleet(store, tmp_path, "b", now)
    await a.control.start()
    await b.control.start()
    await a.rollouts.tick(a.control)  # a takes the lease
    for _ in range(8):  # half the traffic each; b counts but never judges
        for f in (a, b):
            f.serve("next", 2)
            f.serve("stable", 18)
        now[0] += 0.25
        await b.rollouts.tick(b.control)
        await a.rollouts.tick(a.control)
    assert a.rollouts.holder and not b.rollouts.holder
    assert weights_in(a.control.text, "default") == {"stable": 50.0, "next": 50.0}
    assert {v["by"] for v in (await store.rules_versions())[1:]} == {BY}
    await a.rollouts.close()  # a leaves: b takes over on its next tick
    await b.rollouts.tick(b.control)
    assert b.rollouts.holder


class _Flaky(MemoryStore):
    """A store whose next count writes fail (a store that is down)."""

    down = 0

    async def count_rollout(self, rule: str, counts: Any) -> None:
        if self.down:
            self.down -= 1
            raise StoreUnavailable("down")
        await super().count_rollout(rule, counts)


def test_counts_the_store_did_not_take_are_written_later(tmp_path: Path) -> None:
    async def run() -> None:
        store, now = _Flaky(), [float(int(time.time()))]
        f = Fleet(store, tmp_path, "p1", now)
        await f.control.start()
        f.serve("next", 5, failing=0.4)
        store.down = 1
        with pytest.raises(StoreUnavailable):
            await f.rollouts.flush()
        f.serve("next", 3)
        await f.rollouts.flush()
        sums = await store.rollout_counts("default", 0)
        assert (sums["next|n"], sums["next|fb"]) == (8, 2)

    asyncio.run(run())
