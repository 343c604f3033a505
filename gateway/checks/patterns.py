"""Users' regular expressions, compiled with RE2: linear time in the text, so a pattern
someone wrote cannot backtrack for seconds (no backreferences, no lookaround)."""

from __future__ import annotations

from typing import Any, Final

import re2  # type: ignore[import-untyped]

__all__ = ("RE2_MAX_MEM", "compile_re2")

RE2_MAX_MEM: Final = 8 << 20


def compile_re2(pattern: str, ignore_case: bool = False) -> Any:
    """``pattern`` compiled with RE2 (linear time); ``ValueError`` when RE2 refuses it."""
    opts = re2.Options()
    opts.max_mem = RE2_MAX_MEM
    opts.log_errors = False  # the error is the caller's to report, not stderr's
    opts.case_sensitive = not ignore_case
    try:
        return re2.compile(pattern, opts)
    except Exception as e:  # re2.error, and whatever its wrapper raises on bad input
        why = e.args[0] if e.args else e
        if isinstance(why, bytes):  # re2.error carries RE2's message as bytes
            why = why.decode("utf-8", "replace")
        raise ValueError(f"pattern {pattern[:60]!r} is not RE2: {why}") from None
