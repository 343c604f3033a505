"""Checks of the answer's text as text: non-empty, not truncated, no template leak, no refusal."""

from __future__ import annotations

import re

from gateway.checks.base import (
    PASS_CACHE,
    CheckResult,
    Output,
    RequestFacts,
    fail,
    is_blank,
    snippet,
)
from gateway.checks.config import RefusalSettings, TemplateLeakSettings

__all__ = ("NonEmptyCheck", "NotTruncatedCheck", "RefusalCheck", "TemplateLeakCheck")


class NonEmptyCheck:
    """Fails when the text is empty or whitespace-only and there are no tool calls."""

    __slots__ = ()
    name: str = "non_empty"

    def run(self, out: Output, req: RequestFacts) -> CheckResult:
        if out.tool_calls or not is_blank(out.text):
            return PASS_CACHE[self.name]
        return fail(self.name, "empty answer (no text, no tool calls)")


class NotTruncatedCheck:
    """Fails when the answer hit the token limit although the client set none."""

    __slots__ = ()
    name: str = "not_truncated"

    def run(self, out: Output, req: RequestFacts) -> CheckResult:
        if out.finish_reason == "length" and not req.max_tokens_set:
            return fail(self.name, "finish_reason=length but the client set no max_tokens")
        return PASS_CACHE[self.name]


class TemplateLeakCheck:
    """Fails when a chat-template control token appears anywhere in the text."""

    __slots__ = ("_first_chars", "_tokens")
    name: str = "template_leak"

    def __init__(self, settings: TemplateLeakSettings) -> None:
        self._tokens = settings.tokens
        # Most prose contains none of the tokens' first characters ("<", "["), and a
        # one-character search is memchr speed, so look for those first.
        self._first_chars = tuple(dict.fromkeys(token[0] for token in settings.tokens))

    def run(self, out: Output, req: RequestFacts) -> CheckResult:
        text = out.text
        for char in self._first_chars:
            if char in text:
                break
        else:
            return PASS_CACHE[self.name]
        for token in self._tokens:  # about 1-2 microseconds per token on 4,500 chars
            if token in text:
                return fail(self.name, f"template token {snippet(token, 60)} in text")
        return PASS_CACHE[self.name]

    def first_at(self, text: str) -> int | None:
        """Where the first template token in ``text`` begins (None: there is none)."""
        found = [i for token in self._tokens if (i := text.find(token)) >= 0]
        return min(found) if found else None


class RefusalCheck:
    """Fails when the first ``scan_chars`` characters match a refusal pattern."""

    __slots__ = ("_regex", "_scan_chars")
    name: str = "refusal"

    def __init__(self, settings: RefusalSettings) -> None:
        self._scan_chars = settings.scan_chars
        combined = "|".join(f"(?:{pattern})" for pattern in settings.patterns)
        # An empty pattern list matches nothing ("(?!)" never matches).
        self._regex = re.compile(combined or "(?!)", re.IGNORECASE)

    def run(self, out: Output, req: RequestFacts) -> CheckResult:
        match = self._regex.search(out.text, 0, self._scan_chars)
        if match is None:
            return PASS_CACHE[self.name]
        return fail(self.name, f"refusal: {snippet(match.group(0), 80)}")
