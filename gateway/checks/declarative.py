"""The declarative checks users write: ``regex``, ``contains``, ``length``, ``json_assert``.

Each is built from its spec (:mod:`gateway.checks.kinds`) under the name the rules gave
it, and states what it can do: a must-not rule (a forbidden pattern or phrase, a maximum
length) holds on any prefix of the answer, so it runs on a stream as the text arrives and
its good prefix is the text before the failure; a must rule (a pattern, a phrase, a
minimum, an assertion on JSON) needs the whole answer.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any, Final

import orjson

from gateway.checks.base import (
    Abilities,
    BaseCheck,
    CheckResult,
    Output,
    RequestFacts,
    Scan,
    StreamGuard,
    TextSource,
    fail,
    snippet,
)
from gateway.checks.expr import Path, evaluate, parse, parse_path, read_path
from gateway.checks.kinds import ContainsSpec, JsonAssertSpec, LengthSpec, RegexSpec
from gateway.checks.patterns import compile_re2

__all__ = ("ContainsCheck", "JsonAssertCheck", "LengthCheck", "RegexCheck", "compile_re2")

CHARS_PER_TOKEN: Final = 4


class _Named(BaseCheck):
    """A check users write: its name is the rules' key for it."""

    __slots__ = ("_ok", "abilities", "name")

    def __init__(self, name: str, abilities: Abilities):
        self.name = name
        self.abilities = abilities
        self._ok = CheckResult(True, name)


def _holds(spec: Any, partial: bool) -> bool:
    """A whole-answer check on a stream: held back to its verdict (``stream: hold``)..."""
    return not partial and spec.stream == "hold"


def _reports(spec: Any, partial: bool) -> bool:
    """...or run after the last token, reporting (``stream: report``)."""
    return not partial and spec.stream == "report"


def _json_text(out: Output, path: Path | None) -> str | None:
    """The text a pattern looks at: the answer, or the string at ``path`` of its JSON."""
    if path is None:
        return out.text
    try:
        value = read_path(orjson.loads(out.text), path)
    except orjson.JSONDecodeError:
        return None
    if value is None or isinstance(value, str):
        return value
    return orjson.dumps(value).decode()


class RegexCheck(_Named):
    __slots__ = ("_must", "_must_not", "_path", "_spec")

    def __init__(self, name: str, spec: RegexSpec):
        self._spec = spec
        self._must = compile_re2(spec.must_match, spec.ignore_case) if spec.must_match else None
        self._must_not = (
            compile_re2(spec.must_not_match, spec.ignore_case) if spec.must_not_match else None
        )
        self._path = parse_path(spec.path) if spec.path else None
        partial = self._must is None and self._path is None
        super().__init__(
            name,
            Abilities(
                partial=partial,
                scan=Scan.DELTA,
                overlap=spec.max_match_chars,
                whole_from_deltas=False,
                hold_stream=_holds(spec, partial),
                report_stream=_reports(spec, partial),
            ),
        )

    def run(self, out: Output, req: RequestFacts) -> CheckResult:
        text = _json_text(out, self._path)
        if text is None:
            return fail(self.name, f"no string at {self._spec.path}")
        if self._must_not is not None:
            m = self._must_not.search(text)
            if m is not None:
                return fail(self.name, f"matches must_not_match: {snippet(m.group(0))}")
        if self._must is not None and self._must.search(text) is None:
            return fail(self.name, f"does not match {snippet(self._spec.must_match)}")
        return self._ok

    def good_prefix(self, text: str, finish_reason: str | None) -> int | None:
        if self._must_not is None or self._path is not None:
            return None
        m = self._must_not.search(text)
        return int(m.start()) if m is not None else None


def _fold(text: str, case_sensitive: bool) -> str:
    """NFKC, then case folding: full-width, upper and lower case letters read alike."""
    if text.isascii():
        return text if case_sensitive else text.lower()
    text = unicodedata.normalize("NFKC", text)
    return text if case_sensitive else text.casefold()


def _wordy(c: str) -> bool:
    return c.isalnum() or c == "_"


class _Phrases:
    """Phrases on word boundaries: RE2 finds the candidates (one linear pass, no
    lookaround, which would keep Python's ``re`` from scanning fast), then the characters
    around a candidate are looked at."""

    __slots__ = ("_rx",)

    def __init__(self, words: tuple[str, ...], case_sensitive: bool):
        longest_first = sorted(words, key=len, reverse=True)
        alts = "|".join(re.escape(_fold(w, case_sensitive)) for w in longest_first)
        self._rx = compile_re2(f"(?:{alts})")

    def search(self, text: str) -> Any:
        """The first match on word boundaries (a match object), or None."""
        pos, n = 0, len(text)
        while (m := self._rx.search(text, pos)) is not None:
            s, e = m.start(), m.end()
            if (s == 0 or not _wordy(text[s - 1])) and (e == n or not _wordy(text[e])):
                return m
            pos = s + 1
        return None


def _phrases(words: tuple[str, ...], case_sensitive: bool) -> _Phrases:
    return _Phrases(words, case_sensitive)


class ContainsCheck(_Named):
    """Phrases on word boundaries, after NFKC and case folding. On a stream, a tail that
    could begin a forbidden phrase is held back (:class:`PhraseGuard`) until it does or
    it does not, so no part of the phrase reaches the client."""

    __slots__ = ("_cs", "_forbid", "_need", "_prefixes", "_spec")

    def __init__(self, name: str, spec: ContainsSpec):
        self._spec, self._cs = spec, spec.case_sensitive
        self._forbid = _phrases(spec.must_not_contain, self._cs) if spec.must_not_contain else None
        self._need = [(w, _phrases((w,), self._cs)) for w in spec.must_contain]
        folded = [_fold(w, self._cs) for w in spec.must_not_contain]
        self._prefixes = frozenset(f[:i] for f in folded for i in range(1, len(f)))
        longest = max((len(f) for f in folded), default=1)
        partial = not spec.must_contain
        super().__init__(
            name,
            Abilities(
                partial=partial,
                scan=Scan.DELTA,
                overlap=4 * longest,  # folding may make a phrase longer ("ß" -> "ss")
                whole_from_deltas=True,
                hold_stream=_holds(spec, partial),
                report_stream=_reports(spec, partial),
            ),
        )

    def run(self, out: Output, req: RequestFacts) -> CheckResult:
        text = _fold(out.text, self._cs)
        if self._forbid is not None:
            m = self._forbid.search(text)
            if m is not None:
                return fail(self.name, f"contains {snippet(m.group(0))}")
        missing = [w for w, rx in self._need if rx.search(text) is None]
        if missing and (not self._spec.any or len(missing) == len(self._need)):
            return fail(self.name, f"does not contain {snippet(missing[0])}")
        return self._ok

    def good_prefix(self, text: str, finish_reason: str | None) -> int | None:
        if self._forbid is None:
            return None
        folded = _fold(text, self._cs)
        m = self._forbid.search(folded)
        if m is None:
            return None
        if len(folded) == len(text):
            return int(m.start())
        lo, hi = 0, len(text)  # the folded text is longer or shorter: find the match's start
        while lo < hi:  # the longest prefix that folds to no more than the text before it
            mid = (lo + hi + 1) // 2
            if len(_fold(text[:mid], self._cs)) <= m.start():
                lo = mid
            else:
                hi = mid - 1
        return lo

    def guard(self) -> StreamGuard | None:
        return PhraseGuard(self._prefixes, self._cs) if self._prefixes else None


class PhraseGuard:
    """Holds a stream's tail while it could be the beginning of a forbidden phrase."""

    __slots__ = ("_cs", "_longest", "_prefixes", "holding", "start")
    ahead = False  # a phrase's beginning is not a likely failure: no continuation ahead

    def __init__(self, prefixes: frozenset[str], case_sensitive: bool):
        self._prefixes, self._cs = prefixes, case_sensitive
        self._longest = max(map(len, prefixes))
        self.holding = False
        self.start = 0

    def update(self, state: TextSource) -> bool:
        tail = state.tail(self._longest + 1)[-(self._longest + 1) :]
        folded = _fold(tail, self._cs)
        for s in range(max(len(folded) - self._longest, 0), len(folded)):
            if (s == 0 or not folded[s - 1].isalnum()) and folded[s:] in self._prefixes:
                self.holding, self.start = True, state.chars - _unfolded(tail, s, folded, self._cs)
                return True
        self.holding = False
        return False

    def confirmed(self, state: TextSource) -> bool:
        return False  # the check itself fails when the phrase is complete


def _unfolded(tail: str, s: int, folded: str, case_sensitive: bool) -> int:
    """How many of ``tail``'s last characters fold to ``folded[s:]`` (at least: where
    folding changed the length, a held phrase starts no later than it does)."""
    n = len(folded) - s
    if len(folded) == len(tail):
        return n
    return next(
        (m for m in range(1, len(tail)) if len(_fold(tail[-m:], case_sensitive)) >= n),
        len(tail),
    )


class LengthCheck(_Named):
    __slots__ = ("_max", "_min")

    def __init__(self, name: str, spec: LengthSpec):
        limits = [v for v in (spec.max_chars, _chars(spec.max_tokens)) if v is not None]
        self._max = min(limits) if limits else None
        lows = [v for v in (spec.min_chars, _chars(spec.min_tokens)) if v is not None]
        self._min = max(lows) if lows else None
        partial = self._min is None
        super().__init__(
            name,
            Abilities(
                partial=partial,
                scan=Scan.TEXT,
                hold_stream=_holds(spec, partial),
                report_stream=_reports(spec, partial),
            ),
        )

    def run(self, out: Output, req: RequestFacts) -> CheckResult:
        n = len(out.text)
        if self._max is not None and n > self._max:
            return fail(self.name, f"{n} characters, over {self._max}")
        if self._min is not None and n < self._min and not out.tool_calls:
            return fail(self.name, f"{n} characters, under {self._min}")
        return self._ok

    def run_partial(self, text: str, req: RequestFacts) -> CheckResult:
        if self._max is not None and len(text) > self._max:
            return fail(self.name, f"over {self._max} characters")
        return self._ok

    def good_prefix(self, text: str, finish_reason: str | None) -> int | None:
        return None  # a cut answer is not a good beginning of a shorter one


def _chars(tokens: int | None) -> int | None:
    return None if tokens is None else tokens * CHARS_PER_TOKEN


class JsonAssertCheck(_Named):
    __slots__ = ("_exprs", "_spec")

    def __init__(self, name: str, spec: JsonAssertSpec):
        self._spec = spec
        self._exprs = [(text, parse(text)) for text in spec.asserts]
        whole = Abilities(hold_stream=_holds(spec, False), report_stream=_reports(spec, False))
        super().__init__(name, whole)

    def run(self, out: Output, req: RequestFacts) -> CheckResult:
        if out.tool_calls and not out.text.strip():
            return self._ok  # tool calls: the tool-call checks' business
        try:
            doc = orjson.loads(out.text)
        except orjson.JSONDecodeError:
            return fail(self.name, "the answer is not JSON")
        for text, e in self._exprs:
            if not evaluate(e, doc, self._spec.tolerance):
                return fail(self.name, f"assert fails: {snippet(text, 80)}")
        return self._ok
