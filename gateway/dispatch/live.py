"""The live checks of a stream: incremental checks on a growing text.

:class:`LiveChecks` runs the incremental checks (repetition, template leak) on the tail
of the text every ``every`` new characters, so their cost per chunk is amortised O(1)
whatever the answer's length.
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.checks.base import Check, CheckResult, Output, RequestFacts, fail, run_checks, snippet
from gateway.upstream.sse import StreamState

INCREMENTAL = ("repetition", "template_leak")  # checks that make sense on a partial answer


class LiveChecks:
    """The incremental checks of a route on a growing text, at amortised O(1) per chunk.

    ``template_leak`` looks at every batch's new text (plus a small overlap, so a token
    split across chunks is still seen) before the batch is forwarded: a leaked token
    never reaches the client. ``repetition`` needs a span of text to see a loop, so it
    runs on the tail window each time ``every`` new characters have arrived.
    """

    __slots__ = ("_every", "_facts", "_json", "_last", "_leak", "_periodic", "_seen", "_window")
    _OVERLAP = 32  # longer than any template token

    def __init__(
        self,
        checks: Sequence[Check],
        facts: RequestFacts,
        every: int,
        window: int,
        fresh: bool = True,
    ):
        """``fresh``: the text is an answer's beginning (not another tier's continuation)."""
        self._leak = [c for c in checks if c.name == "template_leak"]
        self._periodic = [c for c in checks if c.name in INCREMENTAL and c.name != "template_leak"]
        self._facts = facts
        self._every = every
        self._window = window
        self._last = 0  # chars at the last periodic run
        self._seen = 0  # chars the per-batch checks have seen
        # JSON mode: the answer's first character says already whether it is JSON at all
        self._json = fresh and facts.json_mode and any(c.name == "json_valid" for c in checks)

    def __bool__(self) -> bool:
        return bool(self._leak or self._periodic or self._json)

    def _json_start(self, state: StreamState) -> CheckResult | None:
        """``json_valid``'s verdict on the first character: JSON begins with { or [ (a
        Markdown fence or a sentence in front is not JSON, however it goes on)."""
        head = state.text()[:256].lstrip()
        if not head:
            return None
        self._json = False  # once
        if head[0] in "{[":
            return None
        return fail("json_valid", f"JSON mode, and the answer begins with {snippet(head, 24)}")

    def maybe_run(self, state: StreamState) -> CheckResult | None:
        if self._json and state.chars:
            bad = self._json_start(state)
            if bad is not None:
                return bad
        if self._leak and state.chars > self._seen:
            new = state.tail(state.chars - self._seen + self._OVERLAP)
            self._seen = state.chars
            bad = run_checks(self._leak, Output(new, None, []), self._facts)
            if bad is not None:
                return bad
        if self._periodic and state.chars - self._last >= self._every:
            return self.run(state)
        return None

    def run(self, state: StreamState) -> CheckResult | None:
        """Everything on the tail window, now (end of the hold-back window)."""
        if state.chars == self._last:
            return None
        self._last = self._seen = state.chars
        out = Output(state.tail(self._window), None, [])
        return run_checks(self._leak + self._periodic, out, self._facts)

    def passed_whole(self, state: StreamState) -> frozenset[str]:
        """Checks whose verdict on the whole text is known to be a pass: the leak check saw
        every character; the periodic ones ran at the final length on a window that held
        all of it (with no finish reason: the repetition check reads "length" as well)."""
        names: set[str] = set()
        if self._leak and self._seen == state.chars:
            names.update(c.name for c in self._leak)
        whole = self._last == state.chars and state.chars <= self._window
        if whole and state.finish_reason != "length":
            names.update(c.name for c in self._periodic)
        return frozenset(names)
