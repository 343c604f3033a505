"""A check written the way a new built-in is: one class that states its abilities and its
place in the catalogue, nothing else.

Placed in ``gateway/checks/``, the registry would find it by itself; here
``tests/test_check_protocol.py`` reads this module with the registry's own ``discover``,
so the rest of the suite sees the shipped catalogue.
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
    fail,
    snippet,
)

_SHOUT = re.compile(r"[A-Z]{3,}(?: +[A-Z!]{2,}){2,}")  # three capitalised words in a row
OVERLAP = 40  # a shout split across two chunks is still seen


class ShoutingCheck(BaseCheck):
    """Fails when the answer shouts (three or more capitalised words in a row); the text
    before the shout is good. Runs on each new batch of a stream before it goes out."""

    __slots__ = ()
    catalogue = 100
    name = "shouting"
    abilities = Abilities(partial=True, scan=Scan.DELTA, overlap=OVERLAP, opt_in=True)

    def run(self, out: Output, req: RequestFacts) -> CheckResult:
        m = _SHOUT.search(out.text)
        return CheckResult(True, self.name) if m is None else fail(self.name, snippet(m[0]))

    def good_prefix(self, text: str, finish_reason: str | None) -> int | None:
        m = _SHOUT.search(text)
        return None if m is None else m.start()
