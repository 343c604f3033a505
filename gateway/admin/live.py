"""Live numbers from the gateway's own metrics, per tier: ``GET /admin/live``.

The source is what ``/metrics`` exposes (every worker's, merged): request and error
counters, the latency and time-to-first-token histograms, fallbacks by reason, check
failures by check, the queue gauges, and the response cache's hit and miss counters when
the gateway has them. :func:`read_totals` sums them over the labels the console does not
show (task, SLA, tenant, arm, worker ...). A :class:`LiveWindow` remembers recent
readings, so rates and percentiles are over the last minute rather than since start-up;
with no earlier reading (the first poll) they are since start-up and say so. A tier with no
request in the last minute keeps the figures of its last minute that had some, and says
how long ago that ended, rather than going blank.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from gateway.telemetry.recorder import (
    A_CHECK,
    A_REASON,
    A_TIER,
    M_CHECK_FAILURES,
    M_ERRORS,
    M_FALLBACKS,
    M_LATENCY,
    M_REQUESTS,
    M_TTFT,
)

Key = tuple[str, ...]
QUANTILES = (0.5, 0.95, 0.99)

# sample name -> (figure, the labels kept); everything else is summed over
_SUMS: MappingProxyType[str, tuple[str, tuple[str, ...]]] = MappingProxyType(
    {
        f"{M_REQUESTS}_total": ("requests", (A_TIER,)),
        f"{M_ERRORS}_total": ("errors", (A_TIER,)),
        f"{M_FALLBACKS}_total": ("fallbacks", (A_TIER, A_REASON)),
        f"{M_CHECK_FAILURES}_total": ("checks", (A_TIER, A_CHECK)),
        "gateway_shed_total": ("shed", (A_TIER,)),
        "gateway_queue_waiting": ("queue_waiting", (A_TIER,)),
        # the response cache's lookups, where the gateway has a cache (absent otherwise)
        "gateway_cache_hits_total": ("cache_hits", ()),
        "gateway_cache_misses_total": ("cache_misses", ()),
    }
)
_HISTOGRAMS = MappingProxyType({f"{M_LATENCY}_bucket": "latency", f"{M_TTFT}_bucket": "ttft"})
_GAUGES = frozenset({"queue_waiting"})  # a level, not a count: never differenced


@dataclass(frozen=True, slots=True)
class Totals:
    """Cumulative figures at one reading."""

    sums: dict[str, dict[Key, float]] = field(default_factory=dict)
    """figure -> kept label values -> value"""
    buckets: dict[str, dict[str, dict[float, float]]] = field(default_factory=dict)
    """histogram -> tier -> upper bound -> cumulative count"""

    def total(self, figure: str, key: Key = ()) -> float:
        return self.sums.get(figure, {}).get(key, 0.0)


def read_totals(text: str) -> Totals:
    """The figures of a Prometheus text exposition, summed over the labels not kept."""
    out = Totals()
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name in _SUMS:
                figure, kept = _SUMS[s.name]
                key = tuple(s.labels.get(k, "") for k in kept)
                row = out.sums.setdefault(figure, {})
                row[key] = row.get(key, 0.0) + s.value
            elif s.name in _HISTOGRAMS:
                tier = out.buckets.setdefault(_HISTOGRAMS[s.name], {}).setdefault(
                    s.labels.get(A_TIER, ""), {}
                )
                le = float(s.labels.get("le", "+Inf"))
                tier[le] = tier.get(le, 0.0) + s.value
    return out


def _less(now: float, then: float) -> float:
    return now - then if now >= then else now  # a counter that went down was reset


def since(cur: Totals, old: Totals) -> Totals:
    """What happened between two readings (gauges keep their current level)."""
    sums = {
        fig: {k: v if fig in _GAUGES else _less(v, old.total(fig, k)) for k, v in row.items()}
        for fig, row in cur.sums.items()
    }
    buckets = {
        h: {
            tier: {
                le: _less(n, old.buckets.get(h, {}).get(tier, {}).get(le, 0.0))
                for le, n in b.items()
            }
            for tier, b in tiers.items()
        }
        for h, tiers in cur.buckets.items()
    }
    return Totals(sums, buckets)


def quantile(q: float, buckets: Mapping[float, float]) -> float | None:
    """The q-quantile of a histogram (upper bound -> cumulative count), interpolated
    linearly inside its bucket as Prometheus' ``histogram_quantile`` does; None when empty.
    A rank in the +Inf bucket answers the largest finite bound."""
    edges = sorted(buckets.items())
    if not edges or edges[-1][1] <= 0:
        return None
    rank = q * edges[-1][1]
    lower, below = 0.0, 0.0
    for le, n in edges:
        if n >= rank and n > below:
            if math.isinf(le):
                return lower
            return lower + (le - lower) * (rank - below) / (n - below)
        lower, below = (lower if math.isinf(le) else le), n
    return lower


def percentiles(buckets: Mapping[float, float] | None) -> dict[str, float | None]:
    b = buckets or {}
    return {f"p{round(q * 100)}": quantile(q, b) for q in QUANTILES} | {
        "n": max(b.values(), default=0.0)
    }


def _by(totals: Totals, figure: str, tier: str) -> dict[str, float]:
    """A two-label figure of one tier (fallbacks by reason, check failures by check)."""
    return {k[1]: v for k, v in totals.sums.get(figure, {}).items() if k[0] == tier and v}


def tier_names(totals: Totals, first: Iterable[str]) -> list[str]:
    """The tiers to show: ``first`` (the configured ones), then any others the metrics name."""
    names = list(first)
    for row in totals.sums.values():
        names += [k[0] for k in row if k and k[0] not in names]
    return names


@dataclass(frozen=True, slots=True)
class Busy:
    """A tier's last window with requests: how long ago it ended, how long it was, and
    what happened in it."""

    age_s: float
    window_s: float
    recent: Totals


@dataclass(frozen=True, slots=True)
class Reading:
    """A reading and, when there is one, what changed over the window before it."""

    now: Totals
    recent: Totals | None
    window_s: float | None
    busy: Mapping[str, Busy] = field(default_factory=dict)  # per tier, its last busy window


def _ago(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.0f} min" if s < 7200 else f"{s / 3600:.0f} h"


def tier_summary(r: Reading, tier: str) -> dict[str, Any]:
    """A tier's figures: counts since start-up; rates and percentiles over the window, or,
    when the tier had no request in it, over its last window that had some (and ``over``
    says how old that is): figures that stay meaningful after traffic stops."""
    cur, rec, window_s, age = r.now, r.recent, r.window_s, 0.0
    last = r.busy.get(tier)
    if last is not None and (rec is None or not rec.total("requests", (tier,))):
        rec, window_s, age = last.recent, last.window_s, last.age_s
    span = rec if rec is not None else cur  # percentiles over the window, else since start

    def rate(fig: str) -> float | None:
        if rec is None or not window_s:
            return None
        return rec.total(fig, (tier,)) / window_s

    if rec is None or not window_s:
        over = "since start-up"
    elif age < 1:
        over = f"the last {window_s:.0f} s"
    else:
        over = f"{window_s:.0f} s that ended {_ago(age)} ago (none since)"
    return {
        "requests": cur.total("requests", (tier,)),
        "errors": cur.total("errors", (tier,)),
        "rate": rate("requests"),
        "error_rate": rate("errors"),
        "latency_s": percentiles(span.buckets.get("latency", {}).get(tier)),
        "ttft_s": percentiles(span.buckets.get("ttft", {}).get(tier)),
        "queue_waiting": cur.total("queue_waiting", (tier,)),
        "shed": cur.total("shed", (tier,)),
        "fallbacks": _by(cur, "fallbacks", tier),
        "fallbacks_window": _by(rec, "fallbacks", tier) if rec is not None else None,
        "check_failures": _by(cur, "checks", tier),
        "over": over,
        "age_s": age if rec is not None else None,
    }


def cache_summary(r: Reading) -> dict[str, Any] | None:
    """The response cache's hit rate, or None where the gateway exposes no cache figures."""
    if "cache_hits" not in r.now.sums and "cache_misses" not in r.now.sums:
        return None

    def ratio(t: Totals) -> float | None:
        hits, misses = t.total("cache_hits"), t.total("cache_misses")
        return hits / (hits + misses) if hits + misses else None

    return {
        "hits": r.now.total("cache_hits"),
        "misses": r.now.total("cache_misses"),
        "hit_rate": ratio(r.now),
        "hit_rate_window": ratio(r.recent) if r.recent is not None else None,
    }


def summary(r: Reading, tiers: Iterable[str]) -> dict[str, Any]:
    return {
        "window_s": r.window_s,
        "over": "window" if r.recent is not None else "start",
        "tiers": {t: tier_summary(r, t) for t in tier_names(r.now, tiers)},
        "cache": cache_summary(r),
    }


class LiveWindow:
    """Recent readings (per admin process): rates and percentiles over ``span_s``."""

    def __init__(self, span_s: float = 60.0, min_s: float = 1.0) -> None:
        self.span_s = span_s
        self.min_s = min_s  # closer readings than this make noisy rates: not compared
        self._readings: deque[tuple[float, Totals]] = deque(maxlen=512)
        self._busy: dict[str, tuple[float, float, Totals]] = {}  # tier -> (when, span, recent)

    def read(self, now: float, totals: Totals) -> Reading:
        """Remember this reading; compare it with the oldest one within the span, and
        remember each tier's last window with requests."""
        q = self._readings
        while q and now - q[0][0] > self.span_s:
            q.popleft()
        base = q[0] if q and now - q[0][0] >= self.min_s else None
        q.append((now, totals))
        recent = since(totals, base[1]) if base is not None else None
        window_s = now - base[0] if base is not None else None
        if recent is not None and window_s:
            for (tier,), n in recent.sums.get("requests", {}).items():
                if n > 0:
                    self._busy[tier] = (now, window_s, recent)
        busy = {t: Busy(now - at, w, rec) for t, (at, w, rec) in self._busy.items()}
        return Reading(totals, recent, window_s, busy)
