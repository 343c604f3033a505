"""The quality circuit's pure parts and one process's circuit, without servers: the window
arithmetic, the verdicts, the router's skips, the rules' settings, and a circuit (on a
fake clock) deciding, sharing through a store, probing and restoring.

The circuit through real gateway processes: tests/test_quality_circuit.py.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.quality.circuit import QualityCircuit
from gateway.quality.window import BUCKETS, Probes, Window, demotes, in_a_row, restores, why
from gateway.request.model import parse_chat
from gateway.routing.classify import Classifier
from gateway.routing.router import Demoted, Router
from gateway.rules.quality import QualitySettings
from gateway.rules.schema import RulesError, load_rules, parse_rules
from gateway.store.demotions import Demotion
from gateway.store.memory_store import MemoryStore
from gateway.telemetry.record import AttemptRecord, RequestRecord

ROOT = Path(__file__).resolve().parent.parent
RULES = load_rules(ROOT / "routing_rules.yaml")
SMALL = QualitySettings(min_answers=4, demote_at=0.5, restore_probes=3, restore_at=0.34)


# -- the window ------------------------------------------------------------------------------------
def test_a_window_counts_what_came_within_its_span() -> None:
    w = Window(10.0)
    for t in range(10):  # one a second, every other one failed
        w.add(100.0 + t, failed=t % 2 == 0)
    assert w.counts(109.9) == (10, 5)
    # a bucket is span / BUCKETS wide: an answer leaves the window within one bucket of span
    width = 10.0 / BUCKETS
    assert w.counts(110.0 + width) == (9, 4)  # the one at 100 s left
    assert w.counts(114.0 + width) == (5, 2)
    assert w.counts(120.0) == (0, 0)
    w.add(120.0, True)
    assert w.counts(120.0) == (1, 1)
    w.clear()
    assert w.counts(120.0) == (0, 0)


def test_a_window_adds_to_its_newest_bucket() -> None:
    w = Window(1.0)
    for _ in range(1000):
        w.add(5.0, False)
    assert w.counts(5.0) == (1000, 0)
    assert len(w._buckets) == 1  # O(buckets) memory, whatever the rate


def test_probes_keep_the_latest() -> None:
    p = Probes(3)
    for failed in (True, True, False, False):
        p.add(failed)
    assert p.counts() == (3, 1)
    p.add(False)
    assert p.counts() == (3, 0)


@pytest.mark.parametrize(
    ("answers", "failed", "expected"),
    [(3, 3, False), (4, 1, False), (4, 2, True), (10, 5, True), (10, 4, False), (20, 20, True)],
)
def test_demotes(answers: int, failed: int, expected: bool) -> None:
    assert demotes(answers, failed, SMALL) is expected


@pytest.mark.parametrize(
    ("probes", "failed", "expected"),
    [(2, 0, False), (3, 0, True), (3, 1, True), (3, 2, False)],
)
def test_restores(probes: int, failed: int, expected: bool) -> None:
    assert restores(probes, failed, SMALL) is expected


def test_why_is_short_ascii() -> None:
    assert why(25, 23, 60.0) == "92% check failures (23 of 25 answers in 60 s)"
    assert why(0, 0, 1.5) == "0% check failures (0 of 0 answers in 1.5 s)"
    assert why(90, 10, 60.0, streak=10) == "10 check failures in a row (10 of 90 answers in 60 s)"


def test_a_streak_counts_failures_in_a_row() -> None:
    w = Window(60.0)
    for failed in (True, True, False, True, True, True):
        w.add(1.0, failed)
    assert (w.streak, in_a_row(w.streak, SMALL)) == (3, False)
    w.add(1.0, True)
    assert w.streak == 4 and in_a_row(4, QualitySettings(consecutive=4))
    assert not in_a_row(100, QualitySettings(consecutive=0))  # off


def test_a_wholesale_failure_demotes_before_its_share_outweighs_a_healthy_window() -> None:
    """A minute of good answers, then every answer fails: the share needs as many failures
    as the window holds good answers (30 s at a steady rate); ``consecutive`` acts at once."""
    s = QualitySettings()  # the shipped defaults: 60 s, 20 answers, 50 %, 10 in a row
    w, t = Window(s.window_s), 0.0
    for _ in range(600):  # 10 answers a second, all good
        t += 0.1
        w.add(t, False)
    failures = 0
    while True:
        t += 0.1
        w.add(t, True)
        failures += 1
        n, bad = w.counts(t)
        if demotes(n, bad, s) or in_a_row(w.streak, s):
            break
    assert failures == s.consecutive  # one second, not thirty
    assert bad == 10 and n > 550  # the share alone: far from 50 %


# -- the rules' settings -----------------------------------------------------------------------
def _rules(**change: Any) -> str:
    data: dict[str, Any] = yaml.safe_load((ROOT / "routing_rules.yaml").read_text())
    data.update(change)
    return yaml.safe_dump(data)


def test_a_rule_changes_only_the_fields_it_names() -> None:
    data: dict[str, Any] = yaml.safe_load(_rules(quality={"window_s": 30, "probe_share": 0.1}))
    data["rules"][0]["quality"] = {"min_answers": 5}
    r = parse_rules(yaml.safe_dump(data))
    mine = r.quality_of(r.rules[0])
    assert (mine.window_s, mine.probe_share, mine.min_answers) == (30, 0.1, 5)
    assert r.quality_of(r.rules[1]) == r.quality
    assert RULES.quality == QualitySettings()  # the defaults: 20 answers, 60 s, 50 %


def test_settings_that_would_flap_are_refused() -> None:
    with pytest.raises(RulesError) as e:
        parse_rules(_rules(quality={"demote_at": 0.1, "restore_at": 0.2}))
    assert "quality: restore_at (0.2) must be below demote_at (0.1)" in e.value.errors
    with pytest.raises(RulesError) as e:
        parse_rules(_rules(quality={"probe_share": 2, "surprise": 1}))
    assert {x.split(":")[0] for x in e.value.errors} == {"quality.probe_share", "quality.surprise"}


# -- the router ------------------------------------------------------------------------------------
def _decide(
    demoted: dict[tuple[str, str], Demotion], draw: float = 0.99, pin: str | None = None
) -> tuple[tuple[str, ...], tuple[str, ...], str]:
    headers = {"x-gateway-tier": pin} if pin else {}
    body = json.dumps({"model": "auto", "messages": [{"role": "user", "content": "Hi there"}]})
    c = Classifier(RULES).classify(parse_chat(body.encode()), headers)
    d = Router(RULES).decide(c, {}, demoted=Demoted(demoted, draw))
    return d.tiers, d.demoted, d.route_header


BAD = Demotion("default", "highspeed", "92% check failures (23 of 25 answers in 60 s)", 1.0)


def test_a_demoted_tier_is_skipped_and_said() -> None:
    tiers, out, header = _decide({BAD.key: BAD})
    assert (tiers, out) == (("standard",), ("highspeed",))
    assert "demoted highspeed: 92% check failures (23 of 25 answers in 60 s)" in header
    # another rule's demotion is not this one's
    tiers, out, _ = _decide({("code", "highspeed"): BAD})
    assert (tiers, out) == (("highspeed", "standard"), ())


def test_a_probe_tries_the_demoted_tier_first() -> None:
    share = RULES.quality.probe_share
    tiers, out, header = _decide({BAD.key: BAD}, draw=share / 2)
    assert (tiers, out) == (("highspeed", "standard"), ())
    assert "probe highspeed (demoted: 92% check failures" in header
    pinned = Demotion("default", "highspeed", "a bad deploy", 1.0, pinned=True)
    tiers, _, _ = _decide({pinned.key: pinned}, draw=0.0)  # a pin is never probed
    assert tiers == ("standard",)


def test_a_tier_the_client_pins_or_the_last_one_is_kept() -> None:
    tiers, out, header = _decide({BAD.key: BAD}, pin="highspeed")
    assert (tiers, out) == (("highspeed", "standard"), ())
    assert "demoted highspeed kept: pinned" in header
    both = {BAD.key: BAD, ("default", "standard"): Demotion("default", "standard", "x", 1.0)}
    tiers, out, header = _decide(both)
    assert (tiers, out) == (("standard",), ("highspeed",))
    assert "demoted standard kept: the last tier (x)" in header


# -- one process's circuit -----------------------------------------------------------------------
class Clock:
    """Now, moved on by hand (the store judges a record's until by the real clock)."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def _rec(failed: bool, tier: str = "highspeed", rule: str = "default") -> RequestRecord:
    """One answered request: the fast tier failed a check (the standard tier answered), or
    the fast tier answered."""
    if failed:
        fails = (AttemptRecord(tier, "check_repetition", 0.1, "repetition"),)
        return RequestRecord(
            request_id="r", kind="chat", status=200, latency_s=1, overhead_s=0, tier="standard",
            rule=rule, failures=fails,
        )  # fmt: skip
    return RequestRecord(
        request_id="r", kind="chat", status=200, latency_s=1, overhead_s=0, tier=tier, rule=rule
    )


class Fleet:
    """Circuits on one store, each hearing the store's events as a replica does."""

    def __init__(self, n: int, clock: Clock) -> None:
        self.store = MemoryStore()
        self.tasks: list[asyncio.Task[Any]] = []
        rules = RULES.model_copy(update={"quality": SMALL})
        self.circuits = [
            QualityCircuit(rules, self.store, f"r{i}", self._spawn, clock) for i in range(n)
        ]
        for c in self.circuits:
            self.tasks.append(asyncio.get_running_loop().create_task(self._listen(c)))

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> object:
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.append(task)
        return task

    async def _listen(self, c: QualityCircuit) -> None:
        async for ev in self.store.events():
            c.on_event(ev)

    async def settle(self) -> None:
        for _ in range(5):
            await asyncio.sleep(0)

    def close(self) -> None:
        for t in self.tasks:
            t.cancel()


def test_one_replica_demotes_for_all_then_a_probe_restores() -> None:
    asyncio.run(_one_replica_demotes_for_all_then_a_probe_restores())


async def _one_replica_demotes_for_all_then_a_probe_restores() -> None:
    clock = Clock()
    fleet = Fleet(2, clock)
    a, b = fleet.circuits
    await fleet.settle()
    for _ in range(3):
        a.observe(_rec(failed=True))
    assert not a.demoted()  # 3 answers: under min_answers
    a.observe(_rec(failed=False))  # 3 of 4 failed: demoted
    assert set(a.demoted()) == {("default", "highspeed")}
    await fleet.settle()
    for c in (a, b):  # the store's record, on both
        (d,) = c.demoted().values()
        assert d.version == 1 and d.by == "circuit r0" and d.reason.startswith("75% check")
    log = await fleet.store.audit_log()
    assert [e["action"] for e in log] == ["quality.demote"]
    # the fleet's probes: two pass (one on each replica), one fails -> within restore_at
    # (1 of 3), whichever replica saw which; restored everywhere
    for c, failed in ((b, False), (a, True)):
        c.observe(_rec(failed=failed))
        await fleet.settle()
    assert a.state()["demoted"][0]["probes"] == 2 and b.demoted()  # as the store told a
    a.observe(_rec(failed=False))
    await fleet.settle()
    assert not a.demoted() and not b.demoted() and await fleet.store.demotions() == []
    assert [e["action"] for e in await fleet.store.audit_log()] == [
        "quality.restore",
        "quality.demote",
    ]
    # judged afresh: a's old window is gone
    a.observe(_rec(failed=True))
    fast = [w for w in a.state()["windows"] if w["tier"] == "highspeed"]
    assert fast == [
        {"rule": "default", "tier": "highspeed", "answers": 1, "failed": 1, "span_s": 60.0}
    ]
    fleet.close()


def test_a_demotion_ends_by_itself_and_a_pin_is_not_probed() -> None:
    asyncio.run(_a_demotion_ends_by_itself_and_a_pin_is_not_probed())


async def _a_demotion_ends_by_itself_and_a_pin_is_not_probed() -> None:
    clock = Clock()
    fleet = Fleet(1, clock)
    (a,) = fleet.circuits
    for _ in range(4):
        a.observe(_rec(failed=True))
    await fleet.settle()
    assert a.demoted()
    clock.now += SMALL.max_demotion_s
    assert not a.demoted()  # its until passed
    pin = await a.pin("default", "highspeed", "a bad deploy", "alice", None)
    for _ in range(10):
        a.observe(_rec(failed=False))
    assert a.demoted()[pin.key].pinned  # probes do not end a pin
    assert "gateway_tier_demoted" in a.prometheus().decode()
    assert await a.release("default", "highspeed") is not None
    await fleet.settle()
    assert not a.demoted()
    text = a.prometheus().decode()
    assert 'gateway_tier_demoted{tier="highspeed",rule="default"} 0' in text
    fleet.close()


def test_without_a_store_the_demotion_is_this_process_s() -> None:
    clock = Clock()
    spawned: list[Any] = []
    rules = RULES.model_copy(update={"quality": SMALL})
    a = QualityCircuit(rules, None, "r0", spawned.append, clock)
    for _ in range(4):
        a.observe(_rec(failed=True))
    (d,) = a.demoted().values()
    assert d.version == 0 and not spawned
    assert a.state()["demoted"][0]["shared"] is False
    # cache hits, errors, tiers the rules lack and a rule turned off are not counted
    off = rules.model_copy(update={"quality": QualitySettings(enabled=False)})
    b = QualityCircuit(off, None, "r1", spawned.append, clock)
    for _ in range(10):
        b.observe(_rec(failed=True))
    assert not b.demoted() and not b.state()["windows"]
