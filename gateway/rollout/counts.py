"""What each arm of an analysed rule served, counted in this process and summed in the store.

A finished request of an analysed rule's baseline or canary (:func:`outcome`) adds to this
process's :class:`Tally`, an O(1) step with no store call on the request's path. The tally
is written to the store every tick (:meth:`~gateway.store.base.RolloutStore.count_rollout`),
where every replica's counts add up, in time buckets (:func:`bucket_width`): the replica
that judges reads the fleet's requests since its step began (:func:`arm_stats`).

A count is a field ``(bucket start in ms, "<arm>|<metric>")``: ``n`` requests, ``fb`` fell
back, ``cf`` failed a check, ``l<i>`` latencies in histogram bin ``i``
(:func:`~gateway.rollout.stats.latency_bin`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping

from gateway.rollout.judge import ArmStats
from gateway.rollout.stats import BINS, latency_bin
from gateway.rules.analysis import Analysis
from gateway.telemetry.record import RequestRecord

Field = tuple[int, str]  # (bucket start, ms; "<arm>|<metric>")
MAX_PENDING = 20_000  # fields kept while the store does not take them (then the oldest go)


def bucket_width(a: Analysis) -> float:
    """Seconds per count bucket: a tenth of the step's interval (0.1 s to 60 s)."""
    return min(60.0, max(0.1, a.interval / 10))


def outcome(rec: RequestRecord) -> tuple[bool, bool] | None:
    """(fell back, failed a check) of a finished request, or None when it says nothing of
    its arm: a cache hit, or a 4xx (the client's request, its key, its limits)."""
    if rec.cache is not None and rec.cache.startswith("hit"):
        return None
    if 400 <= rec.status < 500:
        return None
    fell_back = bool(rec.failures) or rec.status >= 500
    checked = any(f.check is not None for f in rec.failures) or rec.checks_failed is not None
    return fell_back, checked


class Tally:
    """This process's counts not yet in the store, by rule."""

    def __init__(self) -> None:
        self._pending: dict[str, Counter[Field]] = {}

    def add(self, rule: str, arm: str, bucket_ms: int, rec: RequestRecord) -> None:
        seen = outcome(rec)
        if seen is None:
            return
        fell_back, checked = seen
        c = self._pending.get(rule)
        if c is None:
            c = self._pending[rule] = Counter()
        c[(bucket_ms, f"{arm}|n")] += 1
        if fell_back:
            c[(bucket_ms, f"{arm}|fb")] += 1
        if checked:
            c[(bucket_ms, f"{arm}|cf")] += 1
        c[(bucket_ms, f"{arm}|l{latency_bin(rec.latency_s)}")] += 1

    def take(self) -> dict[str, Counter[Field]]:
        """The counts so far (this tally starts empty again)."""
        out, self._pending = self._pending, {}
        return out

    def put_back(self, rule: str, counts: Counter[Field]) -> None:
        """Counts the store did not take, for the next write (the oldest beyond
        :data:`MAX_PENDING` fields are dropped)."""
        c = self._pending.setdefault(rule, Counter())
        c.update(counts)
        if len(c) > MAX_PENDING:
            for f in sorted(c)[: len(c) - MAX_PENDING]:
                del c[f]


def bucket_of(now: float, width: float) -> int:
    """The start, in ms, of the bucket ``now`` falls in."""
    return int(math.floor(now / width) * width * 1000)


def arm_stats(sums: Mapping[str, int]) -> dict[str, ArmStats]:
    """Each arm's requests from its counts summed over the step's buckets (name: ``<arm>|
    <metric>``, :meth:`~gateway.store.base.RolloutStore.rollout_counts`)."""
    raw: dict[str, dict[str, int]] = {}
    lat: dict[str, list[int]] = {}
    for name, n in sums.items():
        arm, _, metric = name.rpartition("|")
        if metric.startswith("l") and metric[1:].isdigit():
            i = min(BINS - 1, int(metric[1:]))
            lat.setdefault(arm, [0] * BINS)[i] += n
        else:
            d = raw.setdefault(arm, {})
            d[metric] = d.get(metric, 0) + n
    return {
        arm: ArmStats(
            requests=raw.get(arm, {}).get("n", 0),
            fallbacks=raw.get(arm, {}).get("fb", 0),
            check_failures=raw.get(arm, {}).get("cf", 0),
            latency=tuple(lat.get(arm, ())),
        )
        for arm in {*raw, *lat}
    }
