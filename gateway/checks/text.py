"""Checks of the answer's text as text: non-empty, not truncated, no template leak, no refusal."""

from __future__ import annotations

import re

from gateway.checks.base import (
    Abilities,
    BaseCheck,
    BuildContext,
    CheckResult,
    Output,
    RequestFacts,
    Scan,
    fail,
    is_blank,
    snippet,
)
from gateway.checks.config import MAX_TOKEN_CHARS, RefusalSettings, TemplateLeakSettings

__all__ = ("NonEmptyCheck", "NotTruncatedCheck", "RefusalCheck", "TemplateLeakCheck")


class NonEmptyCheck(BaseCheck):
    """Fails when the text is empty or whitespace-only and there are no tool calls."""

    __slots__ = ()
    catalogue = 10
    name: str = "non_empty"

    def run(self, out: Output, req: RequestFacts) -> CheckResult:
        if out.tool_calls or not is_blank(out.text):
            return self.passed
        return fail(self.name, "empty answer (no text, no tool calls)")


class NotTruncatedCheck(BaseCheck):
    """Fails when the answer hit the token limit although the client set none."""

    __slots__ = ()
    catalogue = 20
    name: str = "not_truncated"
    abilities = Abilities(needs_request=True)

    def run(self, out: Output, req: RequestFacts) -> CheckResult:
        if out.finish_reason == "length" and not req.max_tokens_set:
            return fail(self.name, "finish_reason=length but the client set no max_tokens")
        return self.passed


class TemplateLeakCheck(BaseCheck):
    """Fails when a chat-template control token appears anywhere in the text: on a stream,
    in each batch's new text before it goes out (a token may span two batches: the overlap
    is the longest token's length); the text before the first token is good."""

    __slots__ = ("_first_chars", "_tokens")
    catalogue = 70
    name: str = "template_leak"
    abilities = Abilities(
        partial=True, scan=Scan.DELTA, overlap=MAX_TOKEN_CHARS - 1, whole_from_deltas=True
    )

    @classmethod
    def build(cls, ctx: BuildContext) -> TemplateLeakCheck:
        return cls(ctx.settings.template_leak)

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
            return self.passed
        for token in self._tokens:  # about 1-2 microseconds per token on 4,500 chars
            if token in text:
                return fail(self.name, f"template token {snippet(token, 60)} in text")
        return self.passed

    def first_at(self, text: str) -> int | None:
        """Where the first template token in ``text`` begins (None: there is none)."""
        found = [i for token in self._tokens if (i := text.find(token)) >= 0]
        return min(found) if found else None

    def good_prefix(self, text: str, finish_reason: str | None) -> int | None:
        return self.first_at(text)


class RefusalCheck(BaseCheck):
    """Fails when the first ``scan_chars`` characters match a refusal pattern."""

    __slots__ = ("_regex", "_scan_chars")
    catalogue = 80
    name: str = "refusal"
    abilities = Abilities(opt_in=True)

    @classmethod
    def build(cls, ctx: BuildContext) -> RefusalCheck:
        return cls(ctx.settings.refusal)

    def __init__(self, settings: RefusalSettings) -> None:
        self._scan_chars = settings.scan_chars
        combined = "|".join(f"(?:{pattern})" for pattern in settings.patterns)
        # An empty pattern list matches nothing ("(?!)" never matches).
        self._regex = re.compile(combined or "(?!)", re.IGNORECASE)

    def run(self, out: Output, req: RequestFacts) -> CheckResult:
        match = self._regex.search(out.text, 0, self._scan_chars)
        if match is None:
            return self.passed
        return fail(self.name, f"refusal: {snippet(match.group(0), 80)}")
