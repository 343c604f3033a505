"""Cheap quality checks run on every upstream answer before it reaches the client.

The gateway answers from the "highspeed" tier first. When one of the checks enabled for a
request fails on that answer, the gateway retries the request on the "standard" tier, and
the failing check's ``CheckResult.reason`` travels in an HTTP header. Each check is a small
object with a ``name`` and a pure ``run(out, req) -> CheckResult`` method: no I/O, no global
mutable state. Checks are built once at start-up by ``build_checks`` from ``CheckSettings``.

Checks, in ``CHECK_NAMES`` order:

* ``non_empty``: the answer has text or tool calls.
* ``not_truncated``: the answer did not stop on the token limit unless the client set one.
* ``repetition``: the answer has no degenerate loop (same sentence, word or character over and
  over), the classic failure of small or quantized models. See ``find_loop_start``.
* ``json_valid``: in JSON mode, the text is raw JSON (a Markdown code fence is not accepted).
* ``json_schema``: the JSON answer matches the client's ``response_format`` schema.
* ``tool_call_valid``: every tool call names an offered function and its arguments are a JSON
  object matching that function's parameter schema.
* ``template_leak``: no chat-template control token leaked into the text.
* ``refusal``: the start of the answer is not a canned refusal. Meant to be enabled only by
  routing rules that want it.

Cost: all default checks together take well under 200 microseconds on a 1,000-token answer;
the only expensive step, compiling a JSON schema, happens once per distinct schema.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Annotated, Any, Final, Protocol

import fastjsonschema
import orjson
from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = [
    "CHECK_NAMES",
    "DEFAULT_REFUSAL_PATTERNS",
    "DEFAULT_TEMPLATE_TOKENS",
    "MAX_REASON_CHARS",
    "PASS_CACHE",
    "SCHEMA_CACHE_SIZE",
    "Check",
    "CheckResult",
    "CheckSettings",
    "JsonParseMemo",
    "JsonSchemaCheck",
    "JsonValidCheck",
    "NonEmptyCheck",
    "NotTruncatedCheck",
    "Output",
    "RefusalCheck",
    "RefusalSettings",
    "RepetitionCheck",
    "RepetitionSettings",
    "RequestFacts",
    "SchemaValidators",
    "TemplateLeakCheck",
    "TemplateLeakSettings",
    "ToolCallValidCheck",
    "build_checks",
    "find_loop_start",
    "run_checks",
]

CHECK_NAMES: Final[tuple[str, ...]] = (
    "non_empty",
    "not_truncated",
    "repetition",
    "json_valid",
    "json_schema",
    "tool_call_valid",
    "template_leak",
    "refusal",
)

MAX_REASON_CHARS: Final = 120
"""Reasons go into an HTTP header: ASCII, printable, at most this long."""

SCHEMA_CACHE_SIZE: Final = 256
"""Compiled JSON-schema validators kept per ``SchemaValidators`` (least recently used out)."""


# --------------------------------------------------------------------------------------------
# Results and inputs
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CheckResult:
    """Outcome of one check on one answer."""

    ok: bool
    check: str
    """The check's name."""
    reason: str = ""
    """Short reason when not ok: ASCII, printable, <= ``MAX_REASON_CHARS``."""


PASS_CACHE: Final[Mapping[str, CheckResult]] = MappingProxyType(
    {name: CheckResult(True, name) for name in CHECK_NAMES}
)
"""Read-only singleton "ok" result per check name, so passing allocates nothing."""


@dataclass(slots=True)
class Output:
    """What the checks look at: one choice of an upstream answer."""

    text: str
    """Assistant message content (chat) or completion text; "" if None."""
    finish_reason: str | None
    tool_calls: list[dict[str, Any]]
    """OpenAI-shaped: [{"id", "type": "function", "function": {"name", "arguments": str}}]."""


@dataclass(frozen=True, slots=True)
class RequestFacts:
    """What the checks need to know about the client's request."""

    max_tokens_set: bool
    """The client set max_tokens / max_completion_tokens."""
    json_mode: bool
    """response_format type is json_object or json_schema."""
    json_schema: dict[str, Any] | None
    """response_format.json_schema.schema when given."""
    tools: dict[str, dict[str, Any] | None]
    """Function name -> its "parameters" JSON schema (None if absent)."""


class Check(Protocol):
    """A configured check. ``run`` is pure and must not raise on any answer."""

    name: str

    def run(self, out: Output, req: RequestFacts) -> CheckResult: ...


def _fail(check: str, reason: str) -> CheckResult:
    """A failing result whose reason is safe for an HTTP header (ASCII, printable, short)."""
    if not (reason.isascii() and reason.isprintable()):
        reason = ascii(reason)[1:-1]
    if len(reason) > MAX_REASON_CHARS:
        reason = reason[: MAX_REASON_CHARS - 3] + "..."
    return CheckResult(False, check, reason)


def _snippet(value: object, limit: int = 40) -> str:
    """``ascii()`` of a value (quoted, escaped), cut to ``limit`` characters."""
    text = ascii(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _is_blank(text: str) -> bool:
    return not text or text.isspace()


# --------------------------------------------------------------------------------------------
# Settings
# --------------------------------------------------------------------------------------------


class RepetitionSettings(BaseModel):
    """Thresholds of the ``repetition`` check (see ``find_loop_start`` for the algorithm).

    A loop is a stretch of text that is exactly periodic with some period ``p`` (the repeated
    unit, e.g. one sentence) and that covers at least ``max(min_span_chars, min_repeats * p)``
    characters.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    min_span_chars: int = Field(default=200, ge=48)
    """Shortest loop flagged, in characters (~50 tokens). Lower would flag normal text:
    "ha ha ha", an 80-dash Markdown rule, a "|---|---|" table separator. A unit without
    letters (digits, punctuation: "!!!", "0, 0, ") must span twice this, a whitespace-only
    unit four times this (see ``_span_factor``)."""
    min_repeats: int = Field(default=4, ge=2)
    """Copies of the unit needed when the unit is long. A loop that runs to the token limit
    has far more; 3 verbatim consecutive copies of a long line can happen in sample logs or
    test data, 4 almost never does in a normal answer."""
    max_period: int = Field(default=500, ge=1)
    """Longest repeated unit looked for, in characters: a whole paragraph. A loop with a
    longer unit is rare, and at 4 copies it would need 2,000+ characters anyway."""
    probe_stride: int = Field(default=256, ge=16)
    """Distance between probe points. A loop that reaches the end of the text is always
    found; one that stops before the end (the model broke out of it) is found for sure once
    it spans ``max(min_span_chars, min_repeats * p) + probe_stride`` characters."""
    max_probes: int = Field(default=32, ge=1)
    """Cap on probe points (the stride grows on long texts), which bounds the cost."""


DEFAULT_TEMPLATE_TOKENS: Final[tuple[str, ...]] = (
    "<|im_end|>",
    "<|im_start|>",
    "<|eot_id|>",
    "<|end_of_text|>",
    "<|endoftext|>",
    "<end_of_turn>",
    "<start_of_turn>",
    "</s>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "[/INST]",
    "<|assistant|>",
    "<|user|>",
    "<|eom_id|>",
    "<|python_tag|>",
)


class TemplateLeakSettings(BaseModel):
    """Chat-template control tokens that must never show up in an answer's text.

    Matched as exact, case-sensitive substrings. Note that "</s>" is also the HTML closing
    tag of strikethrough, so an answer with such HTML is flagged.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    tokens: tuple[Annotated[str, Field(min_length=1)], ...] = DEFAULT_TEMPLATE_TOKENS


_APOS = "['\u2019]"  # straight or typographic apostrophe
DEFAULT_REFUSAL_PATTERNS: Final[tuple[str, ...]] = (
    # "I can't help with", "I cannot assist", "I'm unable to help", "I won't comply" ...
    # but not "I can't help but notice".
    rf"\bI(?: can{_APOS}?t| cannot| can not| won{_APOS}t| will not| am unable to"
    rf"| am not able to|{_APOS}m unable to|{_APOS}m not able to) (?:help|assist|comply"
    rf"|fulfill?|provide|create|generate|write|do that)(?!\w)(?! but\b)",
    rf"\b(?:I{_APOS}m sorry|Sorry),? (?:but )?I (?:can{_APOS}?t|cannot|won{_APOS}t|am unable"
    rf"|am not able)\b",
    # not "As an AI language model, ...": a disclaimer that usually precedes a real answer
)


class RefusalSettings(BaseModel):
    """Canned-refusal detection.

    ``patterns`` are Python ``re`` regular expressions, searched case-insensitively in the
    first ``scan_chars`` characters of the text (a refusal comes first; a long answer that
    quotes a refusal later is not flagged). A plain phrase works as a pattern as long as
    regex metacharacters such as ``. ? ( ) [ ] *`` in it are escaped.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    patterns: tuple[str, ...] = DEFAULT_REFUSAL_PATTERNS
    scan_chars: int = Field(default=300, ge=1)

    @field_validator("patterns")
    @classmethod
    def _patterns_compile(cls, patterns: tuple[str, ...]) -> tuple[str, ...]:
        for pattern in patterns:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"invalid regex {pattern!r}: {exc}") from exc
        return patterns


class CheckSettings(BaseModel):
    """Configuration of all checks; unknown keys are rejected."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    repetition: RepetitionSettings = Field(default_factory=RepetitionSettings)
    template_leak: TemplateLeakSettings = Field(default_factory=TemplateLeakSettings)
    refusal: RefusalSettings = Field(default_factory=RefusalSettings)


# --------------------------------------------------------------------------------------------
# Simple checks
# --------------------------------------------------------------------------------------------


class NonEmptyCheck:
    """Fails when the text is empty or whitespace-only and there are no tool calls."""

    __slots__ = ()
    name: str = "non_empty"

    def run(self, out: Output, req: RequestFacts) -> CheckResult:
        if out.tool_calls or not _is_blank(out.text):
            return PASS_CACHE[self.name]
        return _fail(self.name, "empty answer (no text, no tool calls)")


class NotTruncatedCheck:
    """Fails when the answer hit the token limit although the client set none."""

    __slots__ = ()
    name: str = "not_truncated"

    def run(self, out: Output, req: RequestFacts) -> CheckResult:
        if out.finish_reason == "length" and not req.max_tokens_set:
            return _fail(self.name, "finish_reason=length but the client set no max_tokens")
        return PASS_CACHE[self.name]


# --------------------------------------------------------------------------------------------
# Repetition
# --------------------------------------------------------------------------------------------

_NEEDLE_CHARS: Final = 24
"""Characters before each probe point whose earlier occurrences give candidate periods.
Long enough that indentation or a common phrase rarely recurs by chance; at most half of
the smallest allowed ``min_span_chars`` so a loop always holds needle plus one period."""
_MAX_CANDIDATES: Final = 4
"""Candidate periods tried per probe point; bounds the cost on code full of repeats."""
_LETTER: Final = re.compile(r"[^\W\d_]")  # any letter, CJK included


def _span_factor(unit: str) -> int:
    """How many times ``min_span_chars`` a loop of this unit must span to count.

    Units with letters: 1. Units of digits and punctuation only: 2, because data and layout
    legitimately repeat verbatim for a while (a printed 10x10 zero matrix is 200-340 chars,
    empty Markdown table rows, "=====" rules), while a model stuck on "!!!!" goes on for
    thousands. Whitespace only: 4, as padded table cells and aligned columns hold runs of a
    few hundred blanks, while a model stuck emitting newlines produces thousands.
    """
    if unit.isspace():
        return 4
    return 1 if _LETTER.search(unit) else 2


@dataclass(frozen=True, slots=True)
class _Loop:
    start: int
    end: int
    period: int


def _extend_back(text: str, start: int, p: int) -> int:
    """Smallest ``u <= start`` with ``text[i] == text[i + p]`` for all ``i`` in [u, start)."""
    good = start
    step = max(p, 16)
    bad = 0
    while good > 0:  # gallop backwards, doubling the step
        bad = max(good - step, 0)
        if text[bad:good] != text[bad + p : good + p]:
            break
        good = bad
        step *= 2
    else:
        return 0
    while good - bad > 1:  # the boundary is in (bad, good]
        mid = (bad + good) // 2
        if text[mid:good] == text[mid + p : good + p]:
            good = mid
        else:
            bad = mid
    return good


def _extend_forward(text: str, end: int, p: int) -> int:
    """Largest ``v >= end`` with ``text[i] == text[i - p]`` for all ``i`` in [end, v)."""
    n = len(text)
    good = end
    step = max(p, 16)
    bad = n
    while good < n:  # gallop forwards
        bad = min(good + step, n)
        if text[good:bad] != text[good - p : bad - p]:
            break
        good = bad
        step *= 2
    else:
        return n
    while bad - good > 1:  # the boundary is in [good, bad)
        mid = (good + bad) // 2
        if text[good:mid] == text[good - p : mid - p]:
            good = mid
        else:
            bad = mid
    return good


def _find_loop(text: str, st: RepetitionSettings) -> _Loop | None:
    """The first (leftmost) loop in ``text``, or None.

    Probe points ``a`` are spaced ``stride`` apart, plus the end of the text (with and
    without trailing whitespace). At each, the ``_NEEDLE_CHARS`` characters before ``a`` are
    searched backwards (``str.rfind``, C speed) within ``max_period``; an earlier occurrence
    at distance ``p`` makes ``p`` a candidate period, tried smallest first. A candidate is a
    loop when ``text[a - span : a]`` is ``p``-periodic, ``span = max(min_span, repeats * p)``,
    which is one slice comparison. The loop is then widened both ways by galloping slice
    comparisons. Normal text costs one short ``rfind`` per probe point.
    """
    n = len(text)
    min_span = st.min_span_chars
    if n < min_span:
        return None
    m = _NEEDLE_CHARS
    max_period = st.max_period
    repeats = st.min_repeats
    stride = max(st.probe_stride, -(-n // st.max_probes))
    # Trailing whitespace would hide a loop from the end probe: probe before it as well.
    end = len(text.rstrip()) if text[-1].isspace() else n
    anchors = list(range(min_span, end, stride))
    if end >= min_span:
        anchors.append(end)
    if end < n:
        anchors.append(n)
    for a in anchors:
        needle = text[a - m : a]
        lo = max(a - m - max_period, 0)
        pos = text.rfind(needle, lo, a - 1)
        tries = 0
        while pos >= 0 and tries < _MAX_CANDIDATES:
            p = a - m - pos
            s = a - max(min_span, repeats * p)
            if s < 0:
                break  # longer periods need even longer spans
            # Cheap look at the far end of the span first, then the whole span at once.
            if text[s : s + m] == text[s + p : s + p + m] and text[s : a - p] == text[s + p : a]:
                loop = _Loop(_extend_back(text, s, p), _extend_forward(text, a, p), p)
                if loop.end - loop.start >= min_span * _span_factor(text[a - p : a]):
                    return loop
            tries += 1
            pos = text.rfind(needle, lo, pos + m - 1)
    return None


def find_loop_start(text: str, settings: RepetitionSettings) -> int | None:
    """Index where the first detected loop begins, or None when there is no loop.

    ``text[:index]`` is the clean part before the loop (generation can continue from it). The
    index is where exact periodicity starts, so it can sit up to one period before the first
    full copy of the repeated unit when the clean text happens to end like the unit does.
    """
    loop = _find_loop(text, settings)
    return None if loop is None else loop.start


class RepetitionCheck:
    """Fails on a degenerate loop: a sentence, phrase, word or character repeated over and
    over (also without spaces, e.g. CJK), wherever it is in the text."""

    __slots__ = ("_settings",)
    name: str = "repetition"

    def __init__(self, settings: RepetitionSettings) -> None:
        self._settings = settings

    def run(self, out: Output, req: RequestFacts) -> CheckResult:
        text = out.text
        loop = _find_loop(text, self._settings)
        if loop is None:
            return PASS_CACHE[self.name]
        p = loop.period
        copies = (loop.end - loop.start) / p
        unit = _snippet(text[loop.start : loop.start + p], 48)
        return _fail(
            self.name,
            f"loop: {unit} (period {p}) repeated {copies:.0f}x from char {loop.start}",
        )


# --------------------------------------------------------------------------------------------
# JSON and tool calls
# --------------------------------------------------------------------------------------------


def _refuse_remote_ref(uri: str) -> Any:
    raise fastjsonschema.JsonSchemaDefinitionException(f"remote $ref not allowed: {uri}")


class _RefuseEveryScheme(Mapping[str, Callable[[str], Any]]):
    """A fastjsonschema ``handlers`` mapping that claims every URI scheme and refuses it.

    fastjsonschema fetches a "$ref" it cannot find in the schema itself with urllib unless a
    handler claims the URI's scheme, and client schemas must never make the gateway do I/O
    (SSRF). Listing schemes is not enough: an unlisted one ("gopher:", "custom:") falls
    through to urllib, and even a "#..." ref goes remote under an "$id" with a fragment.
    """

    __slots__ = ()

    def __getitem__(self, scheme: str) -> Callable[[str], Any]:
        return _refuse_remote_ref

    def __contains__(self, scheme: object) -> bool:
        return True

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


_NO_REMOTE_REFS: Final = _RefuseEveryScheme()


def _has_remote_ref(schema: Any) -> bool:
    """True when any "$ref" in the schema points outside the document (not "#...").

    Such schemas are not compiled at all (cheap early exit); ``_NO_REMOTE_REFS`` is what
    guarantees that compiling never fetches anything.
    """
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            ref = node.get("$ref")
            if ref is not None and not (isinstance(ref, str) and ref.startswith("#")):
                return True
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return False


Validator = Callable[[Any], object]


class SchemaValidators:
    """Bounded cache of compiled JSON-schema validators, keyed by the sorted-keys JSON dump.

    Compiling (fastjsonschema generates and ``exec``s Python code) costs milliseconds, so each
    distinct schema is compiled once; at most ``max_entries`` are kept, least recently used
    out. A schema that cannot be compiled (invalid, unsupported, remote "$ref", not JSON
    serializable) is cached as None and every answer passes against it: a bad schema is the
    client's problem, not the model's, and retrying on another tier would not help.
    """

    __slots__ = ("_max_entries", "_validators")

    def __init__(self, max_entries: int = SCHEMA_CACHE_SIZE) -> None:
        self._max_entries = max(max_entries, 1)
        self._validators: dict[bytes, Validator | None] = {}

    def __len__(self) -> int:
        return len(self._validators)

    def get(self, schema: dict[str, Any]) -> Validator | None:
        """The compiled validator, or None when the schema cannot be compiled."""
        try:
            key = orjson.dumps(schema, option=orjson.OPT_SORT_KEYS)
        except orjson.JSONEncodeError:
            return None
        validators = self._validators
        try:
            validator = validators.pop(key)
        except KeyError:
            validator = self._compile(key)
            if len(validators) >= self._max_entries:
                del validators[next(iter(validators))]
        validators[key] = validator  # (re)insert as most recently used
        return validator

    @staticmethod
    def _compile(key: bytes) -> Validator | None:
        # Compile a fresh copy: fastjsonschema rewrites "$ref"s in the schema it is given.
        schema = orjson.loads(key)
        if not isinstance(schema, dict | bool) or _has_remote_ref(schema):
            return None
        try:
            validator: Validator = fastjsonschema.compile(
                schema, handlers=_NO_REMOTE_REFS, use_default=False, detailed_exceptions=False
            )
        except Exception:  # invalid schema, or a generator bug on an odd one
            return None
        return validator

    def error(self, schema: dict[str, Any], data: Any) -> str | None:
        """Why ``data`` violates ``schema``; None when it conforms or cannot be checked."""
        validator = self.get(schema)
        if validator is None:
            return None
        try:
            validator(data)
        except fastjsonschema.JsonSchemaValueException as exc:
            return exc.message
        except Exception:  # the generated code choked on an odd schema: not the model's fault
            return None
        return None


class JsonParseMemo:
    """The parse of the last text seen, shared by ``json_valid`` and ``json_schema`` so one
    answer is parsed once. Matched by identity (``is``) of the text object; the one entry is
    replaced in a single assignment, so concurrent use only costs an extra parse."""

    __slots__ = ("_last",)

    def __init__(self) -> None:
        self._last: tuple[str | None, Any, str | None] = (None, None, None)

    def parse(self, text: str) -> tuple[Any, str | None]:
        """(value, None) when ``text`` is JSON, else (None, orjson's error message)."""
        last = self._last
        if last[0] is text:
            return last[1], last[2]
        value: Any = None
        error: str | None = None
        try:
            value = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            error = str(exc) or "JSONDecodeError"
        self._last = (text, value, error)
        return value, error


class JsonValidCheck:
    """In JSON mode the text must be raw JSON (any JSON value; a ```json fence fails).

    Passes outside JSON mode, and when the answer is tool calls with no text.
    """

    __slots__ = ("_memo",)
    name: str = "json_valid"

    def __init__(self, memo: JsonParseMemo | None = None) -> None:
        self._memo = JsonParseMemo() if memo is None else memo

    def run(self, out: Output, req: RequestFacts) -> CheckResult:
        if not req.json_mode or (out.tool_calls and _is_blank(out.text)):
            return PASS_CACHE[self.name]
        _, error = self._memo.parse(out.text)
        if error is not None:
            return _fail(self.name, f"not valid JSON: {error}")
        return PASS_CACHE[self.name]


class JsonSchemaCheck:
    """The JSON answer must match ``req.json_schema``.

    Passes when there is no schema, when the text is not JSON (``json_valid``'s job) and when
    the schema cannot be compiled (see ``SchemaValidators``).
    """

    __slots__ = ("_memo", "_validators")
    name: str = "json_schema"

    def __init__(
        self, validators: SchemaValidators | None = None, memo: JsonParseMemo | None = None
    ) -> None:
        self._validators = SchemaValidators() if validators is None else validators
        self._memo = JsonParseMemo() if memo is None else memo

    def run(self, out: Output, req: RequestFacts) -> CheckResult:
        schema = req.json_schema
        if schema is None:
            return PASS_CACHE[self.name]
        data, parse_error = self._memo.parse(out.text)
        if parse_error is not None:
            return PASS_CACHE[self.name]
        error = self._validators.error(schema, data)
        if error is None:
            return PASS_CACHE[self.name]
        return _fail(self.name, f"schema violation: {error}")


class ToolCallValidCheck:
    """Every tool call must be a function call to a function the client offered, with
    arguments that are a JSON object string matching the function's parameter schema.

    A missing "type" is accepted (clients read only "function"); any other type fails.
    Passes when there are no tool calls.
    """

    __slots__ = ("_validators",)
    name: str = "tool_call_valid"

    def __init__(self, validators: SchemaValidators | None = None) -> None:
        self._validators = SchemaValidators() if validators is None else validators

    def run(self, out: Output, req: RequestFacts) -> CheckResult:
        for index, call in enumerate(out.tool_calls):
            error = self._call_error(call, req)
            if error is not None:
                return _fail(self.name, f"tool_calls[{index}]: {error}")
        return PASS_CACHE[self.name]

    def _call_error(self, call: dict[str, Any], req: RequestFacts) -> str | None:
        kind = call.get("type", "function")
        if kind != "function":
            return f"type {_snippet(kind)} is not 'function'"
        function = call.get("function")
        if not isinstance(function, dict):
            return "no function object"
        name = function.get("name")
        if not isinstance(name, str) or name not in req.tools:
            return f"unknown function {_snippet(name)}"
        arguments = function.get("arguments")
        if not isinstance(arguments, str):
            return f"{_snippet(name)} arguments are not a JSON string"
        try:
            args = orjson.loads(arguments)
        except orjson.JSONDecodeError as exc:
            return f"{_snippet(name)} arguments are not valid JSON: {exc}"
        if not isinstance(args, dict):
            return f"{_snippet(name)} arguments are not a JSON object"
        schema = req.tools[name]
        if schema is None:
            return None
        error = self._validators.error(schema, args)
        return None if error is None else f"{_snippet(name)} arguments: {error}"


# --------------------------------------------------------------------------------------------
# Text markers
# --------------------------------------------------------------------------------------------


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
                return _fail(self.name, f"template token {_snippet(token, 60)} in text")
        return PASS_CACHE[self.name]


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
        return _fail(self.name, f"refusal: {_snippet(match.group(0), 80)}")


# --------------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------------


def build_checks(settings: CheckSettings) -> dict[str, Check]:
    """Registry: every check in CHECK_NAMES (in that order), configured once at start-up.

    ``json_schema`` and ``tool_call_valid`` share one compiled-validator cache, and
    ``json_valid`` and ``json_schema`` one parse memo.
    """
    validators = SchemaValidators()
    memo = JsonParseMemo()
    checks: dict[str, Check] = {
        "non_empty": NonEmptyCheck(),
        "not_truncated": NotTruncatedCheck(),
        "repetition": RepetitionCheck(settings.repetition),
        "json_valid": JsonValidCheck(memo),
        "json_schema": JsonSchemaCheck(validators, memo),
        "tool_call_valid": ToolCallValidCheck(validators),
        "template_leak": TemplateLeakCheck(settings.template_leak),
        "refusal": RefusalCheck(settings.refusal),
    }
    return checks


def run_checks(checks: Sequence[Check], out: Output, req: RequestFacts) -> CheckResult | None:
    """Run in order; return the first failing result, or None when all pass."""
    for check in checks:
        result = check.run(out, req)
        if not result.ok:
            return result
    return None
