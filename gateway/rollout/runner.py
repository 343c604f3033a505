"""Judged rollouts in one gateway process: it counts its analysed rules' arms, and while it
holds the fleet's lease, judges each rollout and takes its steps.

**Counting is every replica's, judging is one's.** Every process counts the requests of an
analysed rule's baseline and canary that it served (:meth:`Rollouts.observe`, O(1), no
store call on the request's path) and adds them to the store every tick, where the fleet's
counts add up (:mod:`gateway.rollout.counts`). One process holds the ``rollouts`` lease
(:mod:`gateway.store.leases`, renewed every tick, :data:`LEASE_S` long): it reads each
rule's counts since its step began, judges them (:func:`~gateway.rollout.judge.judge`) and,
to promote or roll back, writes the rule's new weights as a new rules version through the
same gate as an admin upload (:meth:`~gateway.rules.control.RulesControl.amend`:
validated, stored, announced to every replica) and the audit log (``who: analysis``). A
holder that dies stops renewing, and another process takes the lease within
:data:`LEASE_S`.

A step begins when the judging process first sees the rule's current weights (its record,
``since``); requests counted in earlier buckets are not the step's. The rollout's record
(step, since, last decision, the steps taken) is kept in the store for every replica's
``GET /admin/rollouts``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import yaml

from gateway.errors import StoreUnavailable
from gateway.rollout.counts import Tally, arm_stats, bucket_of, bucket_width
from gateway.rollout.judge import ArmStats, Verdict, judge
from gateway.rollout.weights import StepRefused, set_weights
from gateway.rules.analysis import Analysis
from gateway.rules.control import RulesControl
from gateway.rules.schema import Route, Rules, RulesError
from gateway.store.base import AuditStore, LeaseStore, RolloutStore
from gateway.telemetry.record import RequestRecord

log = logging.getLogger("gateway.rollout")
LEASE = "rollouts"
LEASE_S = 10.0  # a holder that stops renewing loses the lease within this
IDLE_S = 1.0  # how often a process with no analysed rule looks again
HISTORY_MAX = 20  # steps kept in a rollout's record
BY = "analysis"  # the audit log's and the rules versions' "who"


class Shared(RolloutStore, LeaseStore, AuditStore, Protocol):
    """What rollouts need of the store: the counts and records, the lease, the audit log."""


@dataclass(frozen=True, slots=True)
class Watched:
    """An analysed rule of the running rules: its analysis, and its arms' weights and tiers."""

    rule: str
    analysis: Analysis
    weights: dict[str, float]
    tiers: dict[str, str]

    @property
    def share(self) -> float:
        """The canary's share of the rule's traffic, in percent."""
        a = self.analysis
        total = self.weights[a.baseline] + self.weights[a.canary]
        return 100.0 * self.weights[a.canary] / total if total > 0 else 0.0

    def stepped(self, share: float) -> dict[str, float]:
        a = self.analysis
        return {a.baseline: round(100.0 - share, 6), a.canary: round(share, 6)}


def watched(rules: Rules) -> dict[str, Watched]:
    """The running rules' analysed rules, by name (``default`` included)."""
    routes: list[tuple[str, Route]] = [(r.name, r) for r in rules.rules]
    routes.append(("default", rules.default))
    return {
        name: Watched(
            name,
            r.analysis,
            {a.label: a.weight for a in r.split},
            {a.label: a.tier for a in r.split},
        )
        for name, r in routes
        if r.analysis is not None and r.split
    }


class Rollouts:
    def __init__(
        self,
        rules: Rules,
        store: Shared | None,
        owner: str,
        clock: Callable[[], float] = time.time,
    ):
        self._store = store
        self.owner = owner
        self._clock = clock
        self._tally = Tally()
        self._refused: set[tuple[str, tuple[tuple[str, float], ...]]] = set()
        self.holder = False
        self.use_rules(rules)

    def use_rules(self, rules: Rules) -> None:
        self._watched = watched(rules)

    @property
    def watching(self) -> dict[str, Watched]:
        return self._watched

    @property
    def store(self) -> Shared | None:
        return self._store

    def now(self) -> float:
        return self._clock()

    # -- the request path ---------------------------------------------------------------------
    def observe(self, rec: RequestRecord) -> None:
        """Count a finished request of an analysed rule's baseline or canary."""
        w = self._watched.get(rec.rule)
        if w is None or rec.arm not in (w.analysis.baseline, w.analysis.canary):
            return
        self._tally.add(rec.rule, rec.arm, bucket_of(self._clock(), bucket_width(w.analysis)), rec)

    # -- the loop -----------------------------------------------------------------------------
    def tick_s(self) -> float:
        """Seconds between ticks: a tenth of the shortest step interval (0.1 s to 2 s)."""
        if not self._watched:
            return IDLE_S
        shortest = min(w.analysis.interval for w in self._watched.values())
        return min(2.0, max(0.1, shortest / 10))

    async def run(self, control: RulesControl) -> None:
        """Tick until cancelled (the gateway spawns it once its rules are running)."""
        while True:
            try:
                await self.tick(control)
            except StoreUnavailable as e:
                log.debug("rollouts: store unavailable (%s); trying again next tick", e)
            except Exception:
                log.exception("rollouts: a tick failed")
            await asyncio.sleep(self.tick_s())

    async def tick(self, control: RulesControl) -> None:
        """Write this process's counts; with the lease, judge every analysed rule."""
        if self._store is None:
            return
        await self.flush()
        if not self._watched:
            await self._let_go()
            return
        self.holder = await self._store.hold_lease(LEASE, self.owner, LEASE_S)
        if not self.holder:
            return
        records = await self._store.rollouts()
        for w in list(self._watched.values()):
            await self._judge(w, records.get(w.rule), control)

    async def flush(self) -> None:
        """Add this process's counts to the store's; those it does not take are kept for
        the next tick."""
        assert self._store is not None
        pending = list(self._tally.take().items())
        for i, (rule, counts) in enumerate(pending):
            try:
                await self._store.count_rollout(rule, counts)
            except StoreUnavailable:
                for later, left in pending[i:]:
                    self._tally.put_back(later, left)
                raise

    async def _let_go(self) -> None:
        if self.holder and self._store is not None:
            self.holder = False
            await self._store.drop_lease(LEASE, self.owner)

    async def close(self) -> None:
        """Write what is counted and give the lease up (another process takes it at once)."""
        if self._store is None:
            return
        with contextlib.suppress(StoreUnavailable):
            await self.flush()
        with contextlib.suppress(StoreUnavailable):
            await self._let_go()

    # -- judging ------------------------------------------------------------------------------
    def _step_record(self, w: Watched, rec: dict[str, Any] | None, now: float) -> dict[str, Any]:
        """The rollout's record for the weights now running: a new step when they are not
        the record's (the judge's own step, an upload, a rollback, a first look)."""
        if rec is not None and same_weights(rec.get("weights"), w.weights):
            return rec
        history = list((rec or {}).get("history", []))
        history.append({"at": now, "action": "started", "share": w.share})
        return {
            "rule": w.rule,
            "weights": w.weights,
            "share": w.share,
            "since": now,
            "looks": 0,
            "decision": "",
            "history": history[-HISTORY_MAX:],
        }

    async def stats(self, w: Watched, since: float) -> tuple[ArmStats, ArmStats]:
        assert self._store is not None
        arms = arm_stats(await self._store.rollout_counts(w.rule, int(since * 1000)))
        a = w.analysis
        return arms.get(a.baseline, ArmStats()), arms.get(a.canary, ArmStats())

    async def _judge(self, w: Watched, rec: dict[str, Any] | None, control: RulesControl) -> None:
        assert self._store is not None
        now = self._clock()
        fresh = self._step_record(w, rec, now)
        base, can = await self.stats(w, fresh["since"])
        v = judge(w.analysis, w.share, base, can, now - fresh["since"], fresh.get("looks", 0))
        version = None
        if v.action in ("promote", "rollback"):
            version = await self._step(w, v, control)
        if version is not None and v.to is not None:  # the next step begins now
            done = {"at": now, "action": v.action, "share": v.to, "version": version}
            fresh = {
                **fresh,
                "weights": w.stepped(v.to),
                "share": v.to,
                "since": now,
                "looks": 0,
                "history": [*fresh["history"], {**done, "reason": v.reason}][-HISTORY_MAX:],
            }
        elif fresh is rec and (fresh.get("decision"), fresh.get("looks", 0)) == (
            v.action,
            v.looks,
        ):
            return  # nothing new to say
        else:
            fresh = {**fresh, "looks": v.looks}
        doc = {**fresh, "decision": v.action, "reason": v.reason, "at": now, "by": self.owner}
        await self._store.put_rollout(w.rule, doc)

    async def _step(self, w: Watched, v: Verdict, control: RulesControl) -> int | None:
        """The verdict's new weights as a new rules version, audited; None when the rules
        changed meanwhile or cannot be stepped (said once in the log)."""
        assert self._store is not None and v.to is not None
        weights = w.stepped(v.to)
        key = (w.rule, tuple(sorted(w.weights.items())))
        if key in self._refused:
            return None

        def edit(text: str) -> str | None:
            if not same_weights(weights_in(text, w.rule), w.weights):
                return None  # changed since it was judged: judged afresh next tick
            return set_weights(text, w.rule, weights)

        source = f"rollout of rule {w.rule}: {v.action} {w.share:g} -> {v.to:g} %"
        try:
            version = await control.amend(edit, source, BY)
        except (StepRefused, RulesError) as e:
            self._refused.add(key)
            log.error("rollouts: rule %s cannot be stepped: %s", w.rule, e)
            return None
        if version is None:
            return None
        log.warning("rollouts: %s (version %d): %s", source, version, v.reason)
        entry = {
            "at": self._clock(),
            "who": BY,
            "action": f"rollout.{v.action}",
            "target": f"version {version}",
            "change": {
                "rule": w.rule,
                "weights": weights,
                "was": w.weights,
                "reason": v.reason,
                "comparisons": [c.summary() for c in v.comparisons],
            },
            "from": self.owner,
        }
        with contextlib.suppress(StoreUnavailable):
            await self._store.audit(entry)
        return version


def same_weights(a: Any, b: dict[str, float]) -> bool:
    if not isinstance(a, dict) or set(a) != set(b):
        return False
    return all(isinstance(a[k], int | float) and abs(float(a[k]) - b[k]) < 1e-6 for k in b)


def weights_in(text: str, rule: str) -> dict[str, float] | None:
    """The split weights of ``rule`` in a rules text, by arm label (None: no such split)."""
    try:
        data: Any = yaml.safe_load(text)
        route = (
            data["default"]
            if rule == "default"
            else next(r for r in data["rules"] if r.get("name") == rule)
        )
        return {(a.get("name") or a["tier"]): float(a["weight"]) for a in route["split"]}
    except (yaml.YAMLError, KeyError, TypeError, StopIteration, ValueError, AttributeError):
        return None
