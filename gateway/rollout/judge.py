"""The step logic of a judged rollout: two arms' counts in, a verdict out. Pure.

:func:`compare` sets the canary beside the baseline on each metric the analysis names
(:meth:`~gateway.rules.analysis.Analysis.compared`); a metric is *worse* when the canary
is past its ratio to the baseline and the one-sided test says so at the look's level.

**Looks.** The judging replica sees the counts grow every tick; testing each time at
``alpha`` would roll back a healthy canary far more often than that (85 of 1,000 simulated
healthy steps tested at ``alpha / 3`` after every 20 canary requests from 100 to 400). So
a step is judged at *looks*, when both arms have ``min_samples * 2**k`` requests (k = 0,
1, 2 ...), look ``k`` at level ``alpha / 2**(k + 1)`` shared by the metrics compared
(Bonferroni): the looks' levels sum to ``alpha``, so a step rolls a canary as good as its
baseline back with a chance of at most ``alpha``, however long it runs. Between looks a
canary that seems worse is not promoted (it waits for its next look). :func:`judge`
decides what to do with the canary's share:

============  ==================================================================
rolled_back   its share is 0 (rolled back, or not started): nothing to judge
complete      its share is 100: promoted, nothing left to judge
wait          an arm has fewer than ``min_samples`` requests in the step; or the canary
              seems worse between looks; or it is no worse but the step has not lasted
              ``interval`` seconds
rollback      worse on some metric at a look: its share goes to 0 at once
promote       no worse, the step held ``interval`` seconds: the next step
============  ==================================================================
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from gateway.rollout.stats import RATE_TESTS, mann_whitney, quantile
from gateway.rules.analysis import Analysis

Action = Literal["wait", "promote", "rollback", "complete", "rolled_back"]


@dataclass(frozen=True, slots=True)
class ArmStats:
    """One arm's requests in the step: how many, how many fell back (a tier's attempt
    failed: an error, a timeout or a check), how many failed a check, and their latencies
    as a histogram (:data:`~gateway.rollout.stats.BIN_EDGES`)."""

    requests: int = 0
    fallbacks: int = 0
    check_failures: int = 0
    latency: tuple[int, ...] = field(default=())

    def rate(self, events: int) -> float | None:
        return events / self.requests if self.requests else None

    def percentile(self, q: float) -> float | None:
        return quantile(self.latency, q) if self.latency else None

    def summary(self) -> dict[str, Any]:
        """The arm as ``GET /admin/rollouts`` shows it (latencies in ms)."""
        p50, p99 = self.percentile(0.5), self.percentile(0.99)
        return {
            "requests": self.requests,
            "fallbacks": self.fallbacks,
            "fallback_rate": self.rate(self.fallbacks),
            "check_failures": self.check_failures,
            "check_failure_rate": self.rate(self.check_failures),
            "p50_ms": None if p50 is None else round(p50 * 1000, 2),
            "p99_ms": None if p99 is None else round(p99 * 1000, 2),
        }


@dataclass(frozen=True, slots=True)
class Comparison:
    """The canary beside the baseline on one metric."""

    metric: str  # fallback_rate | check_failure_rate | latency_p99
    baseline: float | None
    canary: float | None
    limit: float  # the largest ratio canary / baseline that is not worse
    p_value: float  # the one-sided test's
    alpha: float  # the level it is held to at this look (:func:`look_level`)
    worse: bool

    @property
    def ratio(self) -> float | None:
        """canary / baseline (None when the baseline's value is 0 or unknown)."""
        if self.baseline is None or self.canary is None or self.baseline <= 0:
            return None
        return self.canary / self.baseline

    def describe(self) -> str:
        """``fallback_rate 0.150 vs 0.050 (x3.00, limit x1.5; p=0.0002 < 0.0167)``."""
        ratio = "n/a" if self.ratio is None else f"x{self.ratio:.2f}"
        sign = "<" if self.p_value < self.alpha else ">="
        return (
            f"{self.metric} {_num(self.canary)} vs {_num(self.baseline)} ({ratio}, limit "
            f"x{self.limit:g}; p={self.p_value:.2g} {sign} {self.alpha:.2g})"
        )

    def summary(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "baseline": self.baseline,
            "canary": self.canary,
            "ratio": self.ratio,
            "limit": self.limit,
            "p_value": self.p_value,
            "alpha": self.alpha,
            "worse": self.worse,
        }


@dataclass(frozen=True, slots=True)
class Verdict:
    action: Action
    share: float  # the canary's share now, in percent
    to: float | None  # the share the action sets (promote, rollback)
    reason: str
    comparisons: tuple[Comparison, ...] = ()
    looks: int = 0  # the step's looks taken, this one included


def _num(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.4g}"


def _exceeds(canary: float | None, base: float | None, limit: float) -> bool:
    return canary is not None and base is not None and canary > limit * base


def look_level(a: Analysis, look: int) -> float:
    """The level each metric is tested at in look ``look`` (from 0) of a step."""
    return float(a.alpha / 2 ** (look + 1) / max(1, len(a.compared())))


def look_at(a: Analysis, look: int) -> int:
    """Requests each arm has when look ``look`` (from 0) of a step is due."""
    return int(a.min_samples * 2 ** min(look, 40))


def compare(a: Analysis, base: ArmStats, can: ArmStats, level: float) -> tuple[Comparison, ...]:
    """The canary beside the baseline on every metric the analysis compares, each test held
    to ``level``."""
    test = RATE_TESTS[a.test]
    out = []
    for m in a.compared():
        if m == "latency_p99":
            limit = a.max_p99_ratio or 1.0
            b, c = base.percentile(0.99), can.percentile(0.99)
            both = b is not None and c is not None
            p = mann_whitney(base.latency, can.latency) if both else 1.0
        else:
            fallbacks = m == "fallback_rate"
            limit = (a.max_fallback_ratio if fallbacks else a.max_check_failure_ratio) or 1.0
            xb = base.fallbacks if fallbacks else base.check_failures
            xc = can.fallbacks if fallbacks else can.check_failures
            b, c = base.rate(xb), can.rate(xc)
            p = test(xb, base.requests, xc, can.requests)
        out.append(Comparison(m, b, c, limit, p, level, p < level and _exceeds(c, b, limit)))
    return tuple(out)


def judge(
    a: Analysis, share: float, base: ArmStats, can: ArmStats, held_s: float, looks: int = 0
) -> Verdict:
    """What to do with a canary at ``share`` percent whose step has lasted ``held_s``
    seconds and taken ``looks`` looks, given both arms' requests in the step (see the
    module)."""
    if share <= 0:
        return Verdict("rolled_back", share, None, "the canary has no share", (), looks)
    if share >= 100:
        return Verdict("complete", share, None, "the canary carries the rule", (), looks)
    n = min(base.requests, can.requests)
    due = n >= look_at(a, looks)
    comps = compare(a, base, can, look_level(a, looks))
    counted = f"{can.requests} canary and {base.requests} baseline requests"
    if n < a.min_samples:
        why = f"{counted} in the step, {a.min_samples} an arm before it is judged"
        return Verdict("wait", share, None, why, comps, looks)
    worse = [c for c in comps if c.worse]
    if due:
        looks += 1
        if worse:
            why = f"worse at look {looks}: " + "; ".join(c.describe() for c in worse)
            return Verdict("rollback", share, 0.0, why, comps, looks)
    elif worse:
        why = f"seems worse; judged at look {looks + 1}, at {look_at(a, looks)} requests an arm"
        return Verdict("wait", share, None, why, comps, looks)
    if held_s < a.interval:
        why = f"no worse at look {looks}; the step is held {a.interval:g} s ({held_s:.0f} s)"
        return Verdict("wait", share, None, why, comps, looks)
    nxt = a.next_step(share)
    assert nxt is not None  # share < 100 and the last step is 100
    return Verdict("promote", share, nxt, f"no worse over {counted}", comps, looks)
