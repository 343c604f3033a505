"""The ``repetition`` check: a degenerate loop in an answer's text (:mod:`loops` finds
it; :mod:`loopguard` holds a candidate back on a stream)."""

from __future__ import annotations

from gateway.checks.base import (
    Abilities,
    BaseCheck,
    BuildContext,
    CheckResult,
    Output,
    RequestFacts,
    Scan,
    StreamGuard,
    fail,
    snippet,
)
from gateway.checks.config import RepetitionSettings
from gateway.checks.loopguard import LoopGuard
from gateway.checks.loops import find_any_loop, find_loop_start

__all__ = ("RepetitionCheck", "find_loop_start")


class RepetitionCheck(BaseCheck):
    """Fails on a degenerate loop: a sentence, phrase, word or character repeated over and
    over (also without spaces, e.g. CJK), wherever it is in the text. On a stream it runs
    on a tail window every few hundred characters, and its guard holds a candidate loop
    back from the client until the loop is confirmed or breaks; the text before the loop
    is good."""

    __slots__ = ("_settings",)
    catalogue = 30
    name: str = "repetition"
    abilities = Abilities(partial=True, scan=Scan.WINDOW)

    @classmethod
    def build(cls, ctx: BuildContext) -> RepetitionCheck:
        return cls(ctx.settings.repetition)

    def __init__(self, settings: RepetitionSettings) -> None:
        self._settings = settings

    def run(self, out: Output, req: RequestFacts) -> CheckResult:
        text = out.text
        loop = find_any_loop(text, self._settings, out.finish_reason == "length")
        if loop is None:
            return self.passed
        p = loop.period
        copies = (loop.end - loop.start) / p
        unit = snippet(text[loop.start : loop.start + p], 48)
        return fail(
            self.name,
            f"loop: {unit} (period {p}) repeated {copies:.0f}x from char {loop.start}",
        )

    def good_prefix(self, text: str, finish_reason: str | None) -> int | None:
        return find_loop_start(text, self._settings, finish_reason == "length")

    def guard(self) -> StreamGuard | None:
        return LoopGuard()
