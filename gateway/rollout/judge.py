"""The step logic of a judged rollout: two arms' counts in, a verdict out. Pure.

:func:`compare` sets the canary beside the baseline on each metric the analysis names
(:meth:`~gateway.rules.analysis.Analysis.compared`); a metric is *worse* when the canary
is past its ratio to the baseline and the one-sided test says so at ``alpha / k`` (``k``
metrics compared: Bonferroni). :func:`judge` decides what to do with the canary's share:

============  ==================================================================
rolled_back   its share is 0 (rolled back, or not started): nothing to judge
complete      its share is 100: promoted, nothing left to judge
wait          an arm has fewer than ``min_samples`` requests in the step, or the canary
              is no worse but the step has not lasted ``interval`` seconds
rollback      worse on some metric: its share goes to 0 at once
promote       no worse, enough requests, the step held long enough: the next step
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
    alpha: float  # the level it is held to (the analysis's alpha / metrics compared)
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


def _num(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.4g}"


def _exceeds(canary: float | None, base: float | None, limit: float) -> bool:
    return canary is not None and base is not None and canary > limit * base


def compare(a: Analysis, base: ArmStats, can: ArmStats) -> tuple[Comparison, ...]:
    """The canary beside the baseline on every metric the analysis compares."""
    metrics = a.compared()
    alpha = a.alpha / max(1, len(metrics))
    test = RATE_TESTS[a.test]
    out = []
    for m in metrics:
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
        out.append(Comparison(m, b, c, limit, p, alpha, p < alpha and _exceeds(c, b, limit)))
    return tuple(out)


def judge(a: Analysis, share: float, base: ArmStats, can: ArmStats, held_s: float) -> Verdict:
    """What to do with a canary at ``share`` percent whose step has lasted ``held_s``
    seconds, given both arms' requests in the step (see the module)."""
    if share <= 0:
        return Verdict("rolled_back", share, None, "the canary has no share")
    if share >= 100:
        return Verdict("complete", share, None, "the canary carries the rule")
    comps = compare(a, base, can)
    n = min(base.requests, can.requests)
    if n < a.min_samples:
        why = (
            f"{can.requests} canary and {base.requests} baseline requests in the step, "
            f"{a.min_samples} an arm before it is judged"
        )
        return Verdict("wait", share, None, why, comps)
    worse = [c for c in comps if c.worse]
    if worse:
        why = "worse: " + "; ".join(c.describe() for c in worse)
        return Verdict("rollback", share, 0.0, why, comps)
    if held_s < a.interval:
        why = f"no worse so far; the step is held {a.interval:g} s ({held_s:.0f} s)"
        return Verdict("wait", share, None, why, comps)
    nxt = a.next_step(share)
    assert nxt is not None  # share < 100 and the last step is 100
    why = f"no worse over {can.requests} canary and {base.requests} baseline requests"
    return Verdict("promote", share, nxt, why, comps)
