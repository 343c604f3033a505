"""Cheap quality checks run on every upstream answer before it reaches the client: core types.

The gateway answers from the "highspeed" tier first. When one of the checks enabled for a
request fails on that answer, the gateway retries the request on the "standard" tier, and
the failing check's ``CheckResult.reason`` travels in an HTTP header. Each check is a small
object with a ``name`` and a pure ``run(out, req) -> CheckResult`` method: no I/O, no global
mutable state. Checks are built once at start-up by ``gateway.checks.registry.build_checks``
from ``gateway.checks.config.CheckSettings``.

Checks, in ``CHECK_NAMES`` order (module in brackets):

* ``non_empty`` (text): the answer has text or tool calls.
* ``not_truncated`` (text): the answer did not stop on the token limit unless the client set
  one.
* ``repetition`` (repetition): the answer has no degenerate loop (same sentence, word or
  character over and over), the classic failure of small or quantized models. See
  ``repetition.find_loop_start``.
* ``json_valid`` (structured): in JSON mode, the text is raw JSON (a Markdown code fence is
  not accepted).
* ``json_schema`` (structured): the JSON answer matches the client's ``response_format``
  schema.
* ``tool_call_valid`` (structured): every tool call names an offered function and its
  arguments are a JSON object matching that function's parameter schema.
* ``template_leak`` (text): no chat-template control token leaked into the text.
* ``refusal`` (text): the start of the answer is not a canned refusal. Meant to be enabled
  only by routing rules that want it.

Cost: all default checks together take well under 200 microseconds on a 1,000-token answer;
the only expensive step, compiling a JSON schema, happens once per distinct schema.

This module holds what every check shares: the result and input types, the ``Check``
protocol with the :class:`Abilities` a check states (the dispatcher asks a check what it
can do, never its name or type), :class:`BaseCheck` with the protocol's defaults,
``run_checks`` and the helpers that build header-safe failure reasons.

A check's abilities:

* ``partial`` -- its verdict on a prefix of the answer is final (a loop, a leaked token,
  a forbidden phrase stay whatever follows), so it runs on a stream as the text arrives;
  ``scan`` says on what: each batch's new text (``delta``, plus ``overlap`` characters
  before it, before the batch goes out), a tail window every few hundred characters
  (``window``), the first characters once (``head``), or all the text so far (``text``).
  A whole-answer check (``partial`` false) runs when the answer is complete.
* ``good_prefix(text, finish_reason)`` -- where the good text before its failure ends: a
  continuation on the next tier may start there (None: nothing of it is known good).
* ``cost`` -- ``cheap`` (pure, microseconds) or ``remote`` (a webhook, a judge model: its
  time is taken from the request's deadline).
* ``needs_request`` -- it reads the request's facts (a schema, the tools).
* ``opt_in`` -- it runs only where a rule names it (not among a hedge's guard checks).
* ``guard()`` -- a streaming helper that holds text which may be the start of a failure
  until it is confirmed or released (the loop guard of ``repetition``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, ClassVar, Final, Protocol, Self, TypeVar

__all__ = (
    "MAX_REASON_CHARS",
    "Abilities",
    "BaseCheck",
    "BuildContext",
    "Check",
    "CheckContext",
    "CheckResult",
    "Cost",
    "Output",
    "RequestFacts",
    "Scan",
    "StreamGuard",
    "TextSource",
    "fail",
    "is_blank",
    "run_checks",
    "snippet",
)

MAX_REASON_CHARS: Final = 120
"""Reasons go into an HTTP header: ASCII, printable, at most this long."""


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
    other_tools: frozenset[str] = frozenset()
    """Types of the other tools offered (e.g. "custom"): calls of these pass unjudged."""
    last_user: str = ""
    """The text of the last user turn (chat) or the prompt (completions)."""


class Scan(StrEnum):
    """What a partial-text check looks at on a stream (see the module's docstring)."""

    DELTA = "delta"
    WINDOW = "window"
    HEAD = "head"
    TEXT = "text"


class Cost(StrEnum):
    CHEAP = "cheap"
    REMOTE = "remote"


@dataclass(frozen=True, slots=True, kw_only=True)
class Abilities:
    """What a check can do; the dispatcher decides by these, never by a check's name."""

    partial: bool = False
    scan: Scan = Scan.TEXT
    overlap: int = 0
    """``delta``: characters of the text before the new text that a run also sees."""
    whole_from_deltas: bool = False
    """``delta``: passing every delta is passing the whole text (a failure never spans
    more than ``overlap``), so the whole-answer run may be skipped."""
    cost: Cost = Cost.CHEAP
    needs_request: bool = False
    opt_in: bool = False
    hold_stream: bool = False
    """A whole-answer check that protects streams: a stream on a rule with it is held back
    until its verdict (else it runs after the last token and can only report)."""
    report_stream: bool = False
    """A whole-answer check that, on a stream it did not hold, runs after the last token
    and reports a failure (the trailer, the metrics, the review queue)."""
    report_only: bool = False
    """Its verdict is recorded (metrics, review queue), never acted on: it runs after the
    answer went out and delays no one (a judge that scores)."""

    def describe(self) -> str:
        """One line for ``explain`` and the console: ``partial (delta), cheap``."""
        where = f"partial ({self.scan})" if self.partial else "whole answer"
        if self.hold_stream:
            where += ", holds streams"
        return f"{where}, {self.cost}" + (", reads the request" if self.needs_request else "")


@dataclass(frozen=True, slots=True)
class CheckContext:
    """What a check is given beside the answer when it is awaited (``verdict``)."""

    request: Mapping[str, Any]  # the client's body
    rule: str
    until: float  # monotonic: no verdict is awaited past this
    partial: bool = False  # the text so far, not the whole answer


class TextSource(Protocol):
    """A growing text as a stream guard reads it (a stream's state)."""

    @property
    def chars(self) -> int: ...

    def tail(self, n: int) -> str: ...


class StreamGuard(Protocol):
    """Holds a stream's text while it may be the start of a failure (a candidate loop):
    the relay holds the text back while ``update`` is true, fails the attempt once
    ``confirmed``, and a continuation starts before ``start``."""

    start: int
    ahead: bool
    """Holding is a likely failure: worth opening the next tier's continuation early."""

    @property
    def holding(self) -> bool:
        """Whether it holds text now (the last ``update`` was true)."""
        ...

    def update(self, state: TextSource) -> bool: ...

    def confirmed(self, state: TextSource) -> bool: ...


class Check(Protocol):
    """A configured check. ``run`` must not raise on any answer; a ``cheap`` one is pure."""

    name: str

    @property
    def abilities(self) -> Abilities: ...

    def run(self, out: Output, req: RequestFacts) -> CheckResult: ...

    def run_partial(self, text: str, req: RequestFacts) -> CheckResult:
        """The verdict on ``text``, a part of the answer (its window per ``scan``)."""
        ...

    async def verdict(self, out: Output, req: RequestFacts, ctx: CheckContext) -> CheckResult:
        """The verdict, awaited: a ``remote`` check's way (``run`` is the cheap ones')."""
        ...

    def good_prefix(self, text: str, finish_reason: str | None) -> int | None:
        """Where the good text ends in an answer this check failed (None: unknown)."""
        ...

    def guard(self) -> StreamGuard | None:
        """A new guard for one stream, or None."""
        ...


_T = TypeVar("_T")


class BuildContext:
    """What a built-in check is built from: the rules' ``checks:`` settings, and objects
    that the checks of one build share (a parse memo, a cache of compiled schemas)."""

    __slots__ = ("_shared", "settings")

    def __init__(self, settings: Any):
        self.settings = settings  # gateway.checks.config.CheckSettings
        self._shared: dict[str, object] = {}

    def shared(self, key: str, make: type[_T]) -> _T:
        """The one ``make()`` of this build under ``key``."""
        got = self._shared.get(key)
        if not isinstance(got, make):
            got = self._shared[key] = make()
        return got


class BaseCheck:
    """The protocol's defaults: a cheap whole-answer check with no good prefix. A check
    that runs on partial text states it in ``abilities`` (and may override
    ``run_partial``, which by default runs ``run`` on the text with no finish reason)."""

    __slots__ = ()
    name: str = ""
    abilities: Abilities = Abilities()
    catalogue: ClassVar[float | None] = None
    """A built-in's place in the catalogue (None: not a built-in). A class of a module of
    ``gateway/checks/`` that sets it is found by :mod:`gateway.checks.registry`: a new
    built-in is its module and its test, and nothing else names it."""
    passed: ClassVar[CheckResult] = CheckResult(True, "")
    """This check's "ok" result, one per class, so passing allocates nothing."""

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        cls.passed = CheckResult(True, cls.name)

    @classmethod
    def build(cls, ctx: BuildContext) -> Self:
        """A built-in check configured from the rules' settings (by default: no settings)."""
        return cls()

    def run(self, out: Output, req: RequestFacts) -> CheckResult:  # pragma: no cover
        raise NotImplementedError

    def run_partial(self, text: str, req: RequestFacts) -> CheckResult:
        return self.run(Output(text, None, []), req)

    async def verdict(self, out: Output, req: RequestFacts, ctx: CheckContext) -> CheckResult:
        return self.run(out, req)

    def good_prefix(self, text: str, finish_reason: str | None) -> int | None:
        return None

    def guard(self) -> StreamGuard | None:
        return None


def fail(check: str, reason: str) -> CheckResult:
    """A failing result whose reason is safe for an HTTP header (ASCII, printable, short)."""
    if not (reason.isascii() and reason.isprintable()):
        reason = ascii(reason)[1:-1]
    if len(reason) > MAX_REASON_CHARS:
        reason = reason[: MAX_REASON_CHARS - 3] + "..."
    return CheckResult(False, check, reason)


def snippet(value: object, limit: int = 40) -> str:
    """``ascii()`` of a value (quoted, escaped), cut to ``limit`` characters."""
    text = ascii(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def is_blank(text: str) -> bool:
    return not text or text.isspace()


def run_checks(checks: Sequence[Check], out: Output, req: RequestFacts) -> CheckResult | None:
    """Run in order; return the first failing result, or None when all pass."""
    for check in checks:
        result = check.run(out, req)
        if not result.ok:
            return result
    return None
