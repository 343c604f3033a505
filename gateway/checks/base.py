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
protocol, ``run_checks`` and the helpers that build header-safe failure reasons.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final, Protocol

__all__ = (
    "CHECK_NAMES",
    "MAX_REASON_CHARS",
    "PASS_CACHE",
    "Check",
    "CheckResult",
    "Output",
    "RequestFacts",
    "fail",
    "is_blank",
    "run_checks",
    "snippet",
)

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
    other_tools: frozenset[str] = frozenset()
    """Types of the other tools offered (e.g. "custom"): calls of these pass unjudged."""


class Check(Protocol):
    """A configured check. ``run`` is pure and must not raise on any answer."""

    name: str

    def run(self, out: Output, req: RequestFacts) -> CheckResult: ...


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
