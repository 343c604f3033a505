"""An llm-gateway check plugin: the answer is never rude.

The class implements the gateway's check protocol by subclassing ``BaseCheck`` (which
gives the defaults) and states what it can do in ``abilities``: it runs on partial text
(each new piece of a stream, before it goes out), so a rude answer is stopped mid-stream,
``good_prefix`` tells the gateway where the good text before the rude word ends, so the
next tier continues from there, and ``guard`` holds back a stream's tail that could be the
beginning of a rude phrase ("dumb " before "question"), so no part of it reaches the
client: the client receives one clean answer.
"""

from __future__ import annotations

import re

from gateway.checks.base import (
    Abilities,
    BaseCheck,
    CheckResult,
    Output,
    RequestFacts,
    Scan,
    StreamGuard,
    fail,
)
from gateway.checks.declarative import PhraseGuard

RUDE = ("stupid", "idiot", "shut up", "dumb question")
STRICT = ("whatever", "obviously")


class Polite(BaseCheck):
    """Fails on rude words; ``strict`` adds dismissive ones."""

    __slots__ = ("_ok", "_prefixes", "_words", "name")
    abilities = Abilities(partial=True, scan=Scan.DELTA, overlap=32, whole_from_deltas=True)

    def __init__(self, strict: bool = False, words: list[str] | None = None) -> None:
        self.name = "polite"
        listed = [*RUDE, *(STRICT if strict else ()), *(words or ())]
        if any(len(w) > 32 for w in listed):
            raise ValueError("a word longer than 32 characters")  # the overlap above
        alts = "|".join(re.escape(w) for w in listed)
        self._words = re.compile(rf"\b(?:{alts})\b", re.IGNORECASE)
        self._ok = CheckResult(True, self.name)
        self._prefixes = frozenset(w.lower()[:i] for w in listed for i in range(1, len(w)))

    def run(self, out: Output, req: RequestFacts) -> CheckResult:
        m = self._words.search(out.text)
        return self._ok if m is None else fail(self.name, f"rude: {m.group(0)!r}")

    def good_prefix(self, text: str, finish_reason: str | None) -> int | None:
        m = self._words.search(text)
        return None if m is None else m.start()

    def guard(self) -> StreamGuard | None:
        return PhraseGuard(self._prefixes, case_sensitive=False)
