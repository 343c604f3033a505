"""The live checks of a stream: the partial-text checks of a route on a growing text.

:class:`LiveChecks` asks each check what it can do (:class:`~gateway.checks.base.Abilities`)
and runs the partial-text ones where they said: each batch's new text before it goes out
(``delta``), all the text so far (``text``), the first characters once (``head``), or a
tail window every ``every`` new characters (``window``), so a window check's cost per chunk
is amortised O(1) whatever the answer's length. Whole-answer checks wait for the end.
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.checks.base import Check, CheckResult, RequestFacts, Scan
from gateway.upstream.sse import StreamState

HEAD_CHARS = 256  # what a ``head`` check sees: the answer's first characters


def _run(checks: Sequence[Check], text: str, facts: RequestFacts) -> CheckResult | None:
    for c in checks:
        result = c.run_partial(text, facts)
        if not result.ok:
            return result
    return None


class LiveChecks:
    """The partial-text checks of a route on a growing text.

    ``delta`` checks look at every batch's new text (plus the overlap they declared, so a
    match split across chunks is still seen) before the batch is forwarded: what they
    catch never reaches the client. ``window`` checks need a span of text (a loop), so
    they run on the tail window each time ``every`` new characters have arrived.
    """

    __slots__ = (
        "_delta",
        "_every",
        "_facts",
        "_head",
        "_last",
        "_overlap",
        "_periodic",
        "_seen",
        "_text",
        "_text_at",
        "_whole_delta",
        "_window",
    )

    def __init__(
        self,
        checks: Sequence[Check],
        facts: RequestFacts,
        every: int,
        window: int,
        fresh: bool = True,
    ):
        """``fresh``: the text is an answer's beginning (not another tier's continuation)."""
        partial = [c for c in checks if c.abilities.partial]
        by = {s: [c for c in partial if c.abilities.scan is s] for s in Scan}
        self._delta = by[Scan.DELTA]
        self._periodic = by[Scan.WINDOW]
        self._text = by[Scan.TEXT]
        self._head = by[Scan.HEAD] if fresh else []  # a continuation's head is not the answer's
        self._overlap = max((c.abilities.overlap for c in self._delta), default=0)
        # delta checks whose passes on every delta are a pass on the whole text
        self._whole_delta = [c for c in self._delta if c.abilities.whole_from_deltas]
        self._facts = facts
        self._every = every
        self._window = window
        self._last = 0  # chars at the last periodic run
        self._seen = 0  # chars the per-batch checks have seen
        self._text_at = -1  # chars at the last run of the text checks

    def __bool__(self) -> bool:
        return bool(self._delta or self._periodic or self._head or self._text)

    def _head_run(self, state: StreamState) -> CheckResult | None:
        """The head checks, once, when the answer's first visible characters are here."""
        head = state.text()[:HEAD_CHARS]
        if not head.strip():
            return None
        checks, self._head = self._head, []
        return _run(checks, head, self._facts)

    def maybe_run(self, state: StreamState) -> CheckResult | None:
        if self._head and state.chars:
            bad = self._head_run(state)
            if bad is not None:
                return bad
        if self._delta and state.chars > self._seen:
            new = state.tail(state.chars - self._seen + self._overlap)
            self._seen = state.chars
            bad = _run(self._delta, new, self._facts)
            if bad is not None:
                return bad
        if self._text and state.chars != self._text_at:
            self._text_at = state.chars
            bad = _run(self._text, state.text(), self._facts)
            if bad is not None:
                return bad
        if self._periodic and state.chars - self._last >= self._every:
            return self.run(state)
        return None

    def run(self, state: StreamState) -> CheckResult | None:
        """Everything on the tail window (the text checks on the text), now: the end of the
        hold-back window."""
        if state.chars == self._last:
            return None
        self._last = self._seen = state.chars
        tail = state.tail(self._window)
        bad = _run(self._delta, tail, self._facts) or _run(self._periodic, tail, self._facts)
        if bad is None and self._text and state.chars != self._text_at:
            self._text_at = state.chars
            bad = _run(self._text, state.text(), self._facts)
        return bad

    def passed_whole(self, state: StreamState) -> frozenset[int]:
        """The ``id`` of each check whose verdict on the whole text is known to be a pass:
        a delta check whose deltas decide the whole text saw every character; the window ones ran at
        the final length on a window that held all of it (with no finish reason: the
        whole-answer run reads "length" as well)."""
        done: set[int] = set()
        if self._seen == state.chars:
            done.update(map(id, self._whole_delta))
        whole = self._last == state.chars and state.chars <= self._window
        if whole and state.finish_reason != "length":
            done.update(map(id, self._periodic))
        return frozenset(done)
