"""A canary split's ``analysis:``: how a rollout is judged and stepped (:mod:`gateway.rollout`).

A rule (or ``default``) that splits its traffic between two arms may say which arm is the
``baseline`` and which the ``canary``, the canary's shares to go through (``steps``, in
percent of the rule's traffic, the last one 100) and when the canary counts as worse::

    split:
      - {tier: highspeed, weight: 95, name: stable}
      - {tier: highspeed-next, weight: 5, name: next}
    analysis:
      baseline: stable
      canary: next
      steps: [5, 25, 50, 100]
      interval: 60              # seconds each step is held at least before the next one
      min_samples: 200          # requests of each arm in the step before it is judged
      max_fallback_ratio: 1.5   # worse: its fallback rate above 1.5x the baseline's ...
      max_check_failure_ratio: 1.5
      max_p99_ratio: 1.3        # ... its p99 latency above 1.3x (null: not compared)
      test: two-proportion-z    # or fisher-exact (small samples)
      alpha: 0.05               # ... and the difference significant at this level

Both conditions make a metric worse: the canary is past the ratio *and* the one-sided test
says so at ``alpha`` (shared by the metrics compared: Bonferroni). The rates are compared
with ``test``; latency with a one-sided Mann-Whitney U test on the arms' latency
histograms, and the p99 ratio. A canary worse on any metric is rolled back at once (its
weight 0); one that is no worse once the step has lasted ``interval`` and both arms have
``min_samples`` requests in it goes to the next step. Each step is a new rules version.
"""

from __future__ import annotations

import itertools
from typing import Literal

from pydantic import Field, field_validator

from gateway.rules.base import Strict

TESTS = ("two-proportion-z", "fisher-exact")


class Analysis(Strict):
    """How a split rule's canary is judged and stepped (see the module)."""

    baseline: str = Field(min_length=1, description="the arm the canary is compared with")
    canary: str = Field(min_length=1, description="the arm whose share the steps raise")
    steps: tuple[float, ...] = Field(
        min_length=1,
        description="the canary's shares of the rule's traffic, in percent, increasing; the "
        "last one is 100 (promoted)",
    )
    interval: float = Field(
        default=60.0, gt=0, le=86400, description="seconds each step is held at least"
    )
    min_samples: int = Field(
        default=200, ge=10, description="requests of each arm in the step before it is judged"
    )
    max_fallback_ratio: float | None = Field(
        default=1.5, ge=1, description="worse past this times the baseline's fallback rate"
    )
    max_check_failure_ratio: float | None = Field(
        default=1.5, ge=1, description="worse past this times the baseline's check-failure rate"
    )
    max_p99_ratio: float | None = Field(
        default=1.3, ge=1, description="worse past this times the baseline's p99 latency"
    )
    test: Literal["two-proportion-z", "fisher-exact"] = Field(
        default="two-proportion-z",
        description="how the rates are compared, one-sided: a pooled two-proportion z-test, "
        "or Fisher's exact test (small samples)",
    )
    alpha: float = Field(
        default=0.05,
        gt=0,
        le=0.2,
        description="significance level, shared by the metrics compared (Bonferroni)",
    )

    @field_validator("steps")
    @classmethod
    def _steps(cls, v: tuple[float, ...]) -> tuple[float, ...]:
        if any(not 0 < s <= 100 for s in v):
            raise ValueError("every step is a share in percent, above 0 and at most 100")
        if any(b <= a for a, b in itertools.pairwise(v)):
            raise ValueError("the steps must increase")
        if v[-1] != 100:
            raise ValueError("the last step must be 100 (the canary carries the rule)")
        return v

    def compared(self) -> tuple[str, ...]:
        """The metrics judged: ``fallback_rate``, ``check_failure_rate``, ``latency_p99``."""
        limits = (
            ("fallback_rate", self.max_fallback_ratio),
            ("check_failure_rate", self.max_check_failure_ratio),
            ("latency_p99", self.max_p99_ratio),
        )
        return tuple(name for name, limit in limits if limit is not None)

    def next_step(self, share: float) -> float | None:
        """The step after a canary share of ``share`` percent (None: at 100 already)."""
        return next((s for s in self.steps if s > share + 1e-9), None)

    def describe(self) -> str:
        """One line: ``stable vs next: 5 -> 25 -> 50 -> 100 %, every 60 s ...``."""
        steps = " -> ".join(f"{s:g}" for s in self.steps)
        limits = ", ".join(
            f"{m} x{lim:g}"
            for m, lim in (
                ("fallbacks", self.max_fallback_ratio),
                ("check failures", self.max_check_failure_ratio),
                ("p99", self.max_p99_ratio),
            )
            if lim is not None
        )
        return (
            f"{self.canary} vs {self.baseline}: {steps} %, each held {self.interval:g} s and "
            f"{self.min_samples} requests an arm; rolled back past {limits or 'nothing'} "
            f"({self.test}, alpha {self.alpha:g})"
        )


def analysis_errors(path: str, labels: tuple[str, ...], a: Analysis | None) -> list[str]:
    """What makes a rule's analysis unusable with its split's arms (``labels``)."""
    if a is None:
        return []
    if not labels:
        return [f"{path}.analysis: needs a split of two arms (baseline and canary)"]
    errs = []
    if len(labels) != 2:
        errs.append(f"{path}.split: an analysed split has two arms, not {len(labels)}")
    for field in ("baseline", "canary"):
        arm = getattr(a, field)
        if arm not in labels:
            errs.append(f"{path}.analysis.{field}: no arm {arm!r} (arms: {', '.join(labels)})")
    if a.baseline == a.canary:
        errs.append(f"{path}.analysis.canary: the canary is the baseline ({a.canary!r})")
    return errs
