"""The quality circuit's arithmetic: a sliding window of answers, the latest probes, and
the two verdicts (demote, restore). Pure and clock-free: every call is given ``now``.

* :class:`Window` counts a tier's checked answers on one rule, and those that failed a
  check, over the last ``span`` seconds, in :data:`BUCKETS` buckets (an answer leaves the
  window within ``span / BUCKETS`` of ``span`` seconds after it came): O(1) per answer. It
  also counts the failures in a row (its ``streak``): a tier that fails wholesale fails
  every answer, and that shows long before its share outweighs the good answers the window
  still holds (Envoy's outlier detection has both, consecutive errors and a success rate).
* :class:`Probes` keeps the verdicts of the latest ``size`` probes of a demoted tier.
* :func:`demotes`, :func:`in_a_row` and :func:`restores` are the thresholds, :func:`why` the
  reason that ``x-gateway-route`` and the audit log give.
"""

from __future__ import annotations

import math
from collections import deque

from gateway.rules.quality import QualitySettings

BUCKETS = 20


class Window:
    """Answers and check failures over the last ``span`` seconds (see the module)."""

    __slots__ = ("_buckets", "_width", "answers", "failed", "span", "streak")

    def __init__(self, span: float):
        self.span = span
        self._width = span / BUCKETS
        self._buckets: deque[list[int]] = deque()  # [bucket index, answers, failed], oldest first
        self.answers = 0
        self.failed = 0
        self.streak = 0  # answers in a row, the latest included, that failed a check

    def add(self, now: float, failed: bool) -> None:
        i = math.floor(now / self._width)
        self._drop_before(i)
        if self._buckets and self._buckets[-1][0] == i:
            b = self._buckets[-1]
        else:
            b = [i, 0, 0]
            self._buckets.append(b)
        b[1] += 1
        b[2] += int(failed)
        self.answers += 1
        self.failed += int(failed)
        self.streak = self.streak + 1 if failed else 0

    def counts(self, now: float) -> tuple[int, int]:
        """Answers and failed ones in the window that ends ``now``."""
        self._drop_before(math.floor(now / self._width))
        return self.answers, self.failed

    def _drop_before(self, i: int) -> None:
        while self._buckets and self._buckets[0][0] <= i - BUCKETS:
            _, n, bad = self._buckets.popleft()
            self.answers -= n
            self.failed -= bad

    def clear(self) -> None:
        self._buckets.clear()
        self.answers = self.failed = self.streak = 0


class Probes:
    """The verdicts of the latest ``size`` probes (True: failed)."""

    __slots__ = ("_seen",)

    def __init__(self, size: int):
        self._seen: deque[bool] = deque(maxlen=size)

    @property
    def size(self) -> int:
        return self._seen.maxlen or 0

    def add(self, failed: bool) -> None:
        self._seen.append(failed)

    def counts(self) -> tuple[int, int]:
        """Probes kept and failed ones."""
        return len(self._seen), sum(self._seen)


def demotes(answers: int, failed: int, s: QualitySettings) -> bool:
    """Enough answers in the window, and at least ``demote_at`` of them failed."""
    return answers >= s.min_answers and failed >= s.demote_at * answers


def in_a_row(streak: int, s: QualitySettings) -> bool:
    """The latest ``consecutive`` answers all failed (``consecutive`` 0: never)."""
    return bool(s.consecutive) and streak >= s.consecutive


def restores(probes: int, failed: int, s: QualitySettings) -> bool:
    """The latest ``restore_probes`` probes are in, and at most ``restore_at`` of them failed."""
    return probes >= s.restore_probes and failed <= s.restore_at * probes


def why(answers: int, failed: int, span: float, streak: int = 0) -> str:
    """``92% check failures (23 of 25 answers in 60 s)``, or ``10 check failures in a row
    (12 of 30 answers in 60 s)``: ASCII, for a header."""
    counts = f"{failed} of {answers} answers in {span:g} s"
    if streak:
        return f"{streak} check failures in a row ({counts})"
    share = round(100 * failed / answers) if answers else 0
    return f"{share}% check failures ({counts})"
