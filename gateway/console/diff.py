"""Two versions of the rules side by side: :mod:`difflib`'s HTML table, changed lines
with three lines of context, and the count of lines added and removed."""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from markupsafe import Markup, escape


@dataclass(frozen=True, slots=True)
class Diff:
    table: Markup
    added: int
    removed: int

    @property
    def same(self) -> bool:
        return not (self.added or self.removed)


def rules_diff(old: str, new: str, old_name: str, new_name: str) -> Diff:
    a, b = old.splitlines(), new.splitlines()
    html = difflib.HtmlDiff(tabsize=2, wrapcolumn=80).make_table(
        a, b, str(escape(old_name)), str(escape(new_name)), context=True, numlines=3
    )  # difflib escapes the lines' text (&, <, >); the names are escaped here
    added = removed = 0
    for line in difflib.unified_diff(a, b, lineterm="", n=0):
        if line.startswith("+") and not line.startswith("+++"):
            added += 1
        elif line.startswith("-") and not line.startswith("---"):
            removed += 1
    return Diff(Markup(html), added, removed)
