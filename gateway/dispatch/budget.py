"""Time budgets: an attempt may use what is left of the deadline minus a reserve that lets
every later tier answer.

A later tier's reserve is the larger of a configured floor and the tier's observed
latency for this kind of request (time to first token for streams, the whole answer
otherwise): the 90th percentile of its last successful attempts. So a hung fast tier is
given up in time for the standard tier to answer, whatever the fast tier's own timeouts.
"""

from __future__ import annotations

from collections import deque
from typing import Literal

MIN_ATTEMPT_S = 0.05  # no point starting an attempt with less time than this left

Kind = Literal["ttft", "stream", "answer"]
"""What a sample times: the first token of any attempt; a streamed attempt (first token and
hold-back); a whole non-streamed answer."""


class LatencyBook:
    """Recent successful times per (tier, kind), and their 90th percentile."""

    __slots__ = ("_added", "_p90", "_samples", "_size")

    def __init__(self, size: int = 64):
        self._size = size
        self._samples: dict[tuple[str, Kind], deque[float]] = {}
        self._p90: dict[tuple[str, Kind], float] = {}
        self._added: dict[tuple[str, Kind], int] = {}

    def add(self, tier: str, kind: Kind, seconds: float) -> None:
        key = (tier, kind)
        q = self._samples.get(key)
        if q is None:
            q = self._samples[key] = deque(maxlen=self._size)
        q.append(seconds)
        n = self._added[key] = self._added.get(key, 0) + 1
        if n <= 8 or n % 8 == 0:  # re-sort now and then, not per request
            ordered = sorted(q)
            self._p90[key] = ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))]

    def p90(self, tier: str, kind: Kind) -> float | None:
        return self._p90.get((tier, kind))


def reserve(book: LatencyBook, later: tuple[str, ...], kind: Kind, floor: float) -> float:
    """Seconds to keep for the tiers after this one (the first of them, at least)."""
    if not later:
        return 0.0
    seen = book.p90(later[0], kind)
    return max(floor, 2.0 * seen) if seen is not None else floor
