"""The client never sees a loop grow: the live phase holds text that extends a periodic
tail until the period breaks (the text is released) or the loop is confirmed (the text is
dropped and the stream continued from before the loop).

A candidate is a tail made of two or more copies of a unit of 8 to 512 characters, where
the copies may differ in their digits only ("4. Restart it.", "5. Restart it."): the
guard keeps its own tail with every digit read as 0. It is looked for every 32 new
characters with one ``rfind`` of the last 8 characters and one comparison, and followed
with one comparison per batch. A candidate is confirmed with the repetition check's own
thresholds: 4 exact copies over 200 characters, or, for a numbered loop (copies that
differ in digits, letters in the unit), 30 copies; a unit without letters must be exact.
Legitimately repetitive text (table rows, list items, "write it 20 times, numbered")
breaks the period or ends, and is released, delayed but whole.
"""

from __future__ import annotations

from gateway.checks.base import TextSource
from gateway.checks.loops import digits_as_zero, numbered_unit

MIN_UNIT = 8
MAX_UNIT = 512
_WINDOW = 2 * MAX_UNIT + MIN_UNIT
CONFIRM_COPIES = 4
NUMBERED_COPIES = 30  # RepetitionSettings.numbered_min_copies
CONFIRM_SPAN = 200
DETECT_EVERY = 32  # characters between looks for a new candidate (a unit is 8 or more)


class LoopGuard:
    __slots__ = ("_tail", "checked", "detected_at", "period", "start")
    ahead = True  # a candidate loop is usually a loop: its continuation may open early

    def __init__(self) -> None:
        self.period = 0  # the candidate's unit length; 0: no candidate
        self.start = 0  # where the periodic run begins, in characters of the text
        self.checked = 0  # characters seen at the last update
        self._tail = ""  # the text's last characters, kept here (not rebuilt per chunk)
        self.detected_at = 0  # characters at the last look for a new candidate

    @property
    def holding(self) -> bool:
        return self.period > 0

    def update(self, state: TextSource) -> bool:
        """Look at the text's new tail; True while it is a candidate loop."""
        if state.chars == self.checked:
            return self.period > 0
        new, self.checked = state.chars - self.checked, state.chars
        t = self._tail + digits_as_zero(state.tail(new)[-new:])
        if len(t) > 2 * _WINDOW:  # trimmed now and then, not per chunk
            t = t[-_WINDOW:]
        self._tail = t
        p = self.period
        if p:  # holding: only the new text needs a look
            m = min(new, len(t) - p)
            if m > 0 and t[-m:] == t[-m - p : -p]:
                return True
            self.period = 0  # the period broke: release
        elif state.chars - self.detected_at < DETECT_EVERY:
            return False
        self.detected_at = state.chars
        return self._detect(t[-_WINDOW:], state)

    def _detect(self, t: str, state: TextSource) -> bool:
        if len(t) < 2 * MIN_UNIT:
            return False
        j = t.rfind(t[-MIN_UNIT:], 0, len(t) - MIN_UNIT)
        p = len(t) - MIN_UNIT - j
        if j < 0 or not MIN_UNIT <= p <= MAX_UNIT or len(t) < 2 * p or t[-p:] != t[-2 * p : -p]:
            return False
        if not (numbered_unit(t[-p:]) or _exact(state, p, 2 * p)):
            return False  # a counter ("word1 word2"), or data that repeats once read as 0
        run = 2 * p
        while run < len(t) and t[-run - 1] == t[-run - 1 + p]:
            run += 1
        self.period, self.start = p, state.chars - run
        return True

    def confirmed(self, state: TextSource) -> bool:
        p, span = self.period, state.chars - self.start
        if p == 0 or span < CONFIRM_SPAN or span < CONFIRM_COPIES * p:
            return False
        return span >= NUMBERED_COPIES * p or _exact(state, p, span)


def _exact(state: TextSource, p: int, span: int) -> bool:
    """Whether the text's last ``span`` characters repeat with period ``p`` as they are."""
    t = state.tail(span)[-span:]
    return t[p:] == t[:-p]
