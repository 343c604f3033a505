"""The client never sees a loop grow: the live phase holds text that extends a periodic
tail until the period breaks (the text is released) or the loop is confirmed (the text is
dropped and the stream continued from before the loop).

A candidate is a tail made of two or more exact copies of a unit of 8 to 512 characters
(the repetition check's notion of a loop; numbered loops, "4. X 5. X", are not covered:
normalising digits flagged counting and numbered word lists). It is looked for every 32
new characters with one ``rfind`` of the last 8 characters and one comparison, on a tail
the guard keeps itself, and followed with one comparison per batch: about 1.6 us per
chunk. A candidate is confirmed with the repetition check's own thresholds (4 copies, 200
characters); legitimately repetitive text (table rows, list items) breaks the period and
is released, delayed but whole.
"""

from __future__ import annotations

from gateway.upstream.sse import StreamState

MIN_UNIT = 8
MAX_UNIT = 512
_WINDOW = 2 * MAX_UNIT + MIN_UNIT
CONFIRM_COPIES = 4
CONFIRM_SPAN = 200
DETECT_EVERY = 32  # characters between looks for a new candidate (a unit is 8 or more)


class LoopGuard:
    __slots__ = ("_tail", "checked", "detected_at", "period", "start")

    def __init__(self) -> None:
        self.period = 0  # the candidate's unit length; 0: no candidate
        self.start = 0  # where the periodic run begins, in characters of the text
        self.checked = 0  # characters seen at the last update
        self._tail = ""  # the text's last characters, kept here (not rebuilt per chunk)
        self.detected_at = 0  # characters at the last look for a new candidate

    def update(self, state: StreamState) -> bool:
        """Look at the text's new tail; True while it is a candidate loop."""
        if state.chars == self.checked:
            return self.period > 0
        new, self.checked = state.chars - self.checked, state.chars
        t = self._tail + state.tail(new)[-new:]
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
        return self._detect(t[-_WINDOW:], state.chars)

    def _detect(self, t: str, chars: int) -> bool:
        if len(t) < 2 * MIN_UNIT:
            return False
        j = t.rfind(t[-MIN_UNIT:], 0, len(t) - MIN_UNIT)
        p = len(t) - MIN_UNIT - j
        if j < 0 or not MIN_UNIT <= p <= MAX_UNIT or len(t) < 2 * p or t[-p:] != t[-2 * p : -p]:
            return False
        run = 2 * p
        while run < len(t) and t[-run - 1] == t[-run - 1 + p]:
            run += 1
        self.period, self.start = p, chars - run
        return True

    def confirmed(self, state: StreamState) -> bool:
        span = state.chars - self.start
        return self.period > 0 and span >= CONFIRM_SPAN and span >= CONFIRM_COPIES * self.period
