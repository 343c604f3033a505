"""The ``language`` check users write: the answer is in the language of the last user turn
(or a fixed one). Detection is CLD2 (``pycld2``: Chrome's compact language detector, 80+
languages, compiled in, no network), on at most ``SAMPLE_CHARS`` of the answer: its start
and its end, code blocks left out.
"""

from __future__ import annotations

from typing import Final

import pycld2  # type: ignore[import-untyped]

from gateway.checks.base import Abilities, BaseCheck, CheckResult, Output, RequestFacts, fail
from gateway.checks.kinds import LanguageSpec

__all__ = ("LanguageCheck", "detect")

SAMPLE_CHARS: Final = 1024
MIN_SHARE: Final = 40  # percent of the text in the expected language that passes it


def _prose(text: str) -> str:
    """The text without fenced code blocks (code reads as no language, or as English)."""
    if "```" not in text:
        return text
    parts = text.split("```")
    return " ".join(parts[0::2])


def _sample(text: str) -> str:
    if len(text) <= SAMPLE_CHARS:
        return text
    half = SAMPLE_CHARS // 2
    return text[:half] + " " + text[-half:]


def detect(text: str) -> dict[str, int]:
    """The languages of ``text``, ISO 639-1 (primary subtag) to percent; {} if unsure."""
    try:
        reliable, _, details = pycld2.detect(_sample(text))
    except (pycld2.error, UnicodeError):  # invalid UTF-8 (lone surrogates): not judged
        return {}
    if not reliable:
        return {}
    out: dict[str, int] = {}
    for _, code, percent, _ in details:
        if code != "un":
            key = code.split("-")[0].lower()
            out[key] = out.get(key, 0) + int(percent)
    return out


class LanguageCheck(BaseCheck):
    __slots__ = ("_min", "_ok", "_want", "abilities", "name")

    def __init__(self, name: str, spec: LanguageSpec):
        self.name = name
        self._want = spec.language.split("-")[0].lower() if spec.language else None
        self._min = spec.min_chars
        self._ok = CheckResult(True, name)
        hold = spec.stream == "hold"
        self.abilities = Abilities(needs_request=True, hold_stream=hold, report_stream=not hold)

    def run(self, out: Output, req: RequestFacts) -> CheckResult:
        text = _prose(out.text).strip()
        if len(text) < self._min:
            return self._ok  # too little to tell
        want = self._want
        if want is None:
            asked = _prose(req.last_user).strip()
            langs = detect(asked) if len(asked) >= self._min else {}
            if not langs:
                return self._ok  # the user's language is not known: nothing to compare
            want = max(langs, key=lambda k: langs[k])
        got = detect(text)
        if not got or got.get(want, 0) >= MIN_SHARE or max(got, key=lambda k: got[k]) == want:
            return self._ok
        top = max(got, key=lambda k: got[k])
        return fail(self.name, f"answer in {top} ({got[top]}%), expected {want}")
