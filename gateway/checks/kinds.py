"""The checks users write: one model per ``kind`` under the rules' ``checks:`` map.

::

    checks:
      no_competitor: {kind: contains, must_not_contain: ["Acme Corp", "acme.com"]}
      ticket_id:     {kind: regex, must_match: "TCK-[0-9]{6}"}
      reply_lang:    {kind: language}                       # the last user turn's
      totals:        {kind: json_assert, assert: ["total == sum(items[*].price)"]}
      short:         {kind: length, max_tokens: 300}
      house_rules:   {kind: webhook, url: "http://checks.internal/verify", timeout: 0.5}
      polite:        {kind: python, object: "mypkg.checks:Polite", options: {strict: true}}
      grader:        {kind: judge, tier: standard, rubric: "...", sample: 0.1, mode: score}

Each is validated strictly when the rules load (unknown keys, a pattern RE2 refuses, an
expression that does not parse, a plugin that cannot be imported are errors with their
YAML path); a rule names the check like a built-in. ``stream`` says what a whole-answer
check does on a stream: ``hold`` (the default) holds the stream back until its verdict, so
a failed answer is never shown; ``report`` streams at once and reports a failure in the
stream's trailer, the metrics and the review queue.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = (
    "ContainsSpec",
    "JsonAssertSpec",
    "JudgeSpec",
    "LanguageSpec",
    "LengthSpec",
    "PythonSpec",
    "RegexSpec",
    "UserCheckSpec",
    "WebhookSpec",
)

OnStream = Literal["hold", "report"]


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    stream: OnStream = Field(
        default="hold",
        description="a whole-answer check on a stream: hold it back until the verdict "
        "(the bad answer is never shown) or report a failure after the last token",
    )

    def problems(self, name: str, tiers: Collection[str]) -> list[str]:
        """What is wrong with this check in rules with these ``tiers`` ("path: message")."""
        return []


class RegexSpec(_Spec):
    """RE2 patterns (linear time: a user's pattern cannot backtrack) on the answer's text,
    or on the string at ``path`` of a JSON answer."""

    kind: Literal["regex"]
    must_match: str | None = None
    must_not_match: str | None = None
    path: str | None = Field(default=None, description="a JSON path: items[0].id")
    ignore_case: bool = False
    max_match_chars: int = Field(
        default=256,
        ge=1,
        le=65536,
        description="a stream's new text is searched with this "
        "much of the text before it (a longer must_not_match match may be seen late)",
    )

    @model_validator(mode="after")
    def _patterns(self) -> RegexSpec:
        if self.must_match is None and self.must_not_match is None:
            raise ValueError("give must_match, must_not_match or both")
        from gateway.checks.patterns import compile_re2

        for p in (self.must_match, self.must_not_match):
            if p is not None:
                compile_re2(p, self.ignore_case)
        if self.path is not None:
            from gateway.checks.expr import parse_path

            parse_path(self.path)
        return self


class ContainsSpec(_Spec):
    """Words or phrases, matched after Unicode NFKC normalisation and (unless
    ``case_sensitive``) case folding, on word boundaries."""

    kind: Literal["contains"]
    must_contain: tuple[Annotated[str, Field(min_length=1, max_length=200)], ...] = ()
    must_not_contain: tuple[Annotated[str, Field(min_length=1, max_length=200)], ...] = ()
    case_sensitive: bool = False
    any: bool = Field(default=False, description="must_contain: one of them is enough")

    @model_validator(mode="after")
    def _lists(self) -> ContainsSpec:
        if not (self.must_contain or self.must_not_contain):
            raise ValueError("give must_contain, must_not_contain or both")
        return self


class LengthSpec(_Spec):
    """Bounds in characters, or in tokens estimated at 4 characters a token."""

    kind: Literal["length"]
    min_chars: int | None = Field(default=None, ge=0)
    max_chars: int | None = Field(default=None, ge=1)
    min_tokens: int | None = Field(default=None, ge=0)
    max_tokens: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _bounds(self) -> LengthSpec:
        if all(
            v is None for v in (self.min_chars, self.max_chars, self.min_tokens, self.max_tokens)
        ):
            raise ValueError("give min_chars, max_chars, min_tokens or max_tokens")
        return self


class LanguageSpec(_Spec):
    """The answer is in ``language`` (an ISO 639-1 code) or, unset, in the language of
    the last user turn (CLD2, no network)."""

    kind: Literal["language"]
    language: str | None = Field(default=None, pattern=r"^[a-z]{2,3}(-[A-Za-z]{2,4})?$")
    min_chars: int = Field(
        default=24,
        ge=1,
        description="shorter texts (the answer or the user's turn) are "
        "not judged: too little to tell",
    )


class JsonAssertSpec(_Spec):
    """Assertions over a JSON answer in a small expression language that cannot run code
    (:mod:`gateway.checks.expr`): paths, comparisons, ``and``/``or``/``not``, arithmetic,
    ``exists``, ``len``, ``sum``, ``min``, ``max``, ``abs``, ``round``."""

    kind: Literal["json_assert"]
    asserts: tuple[Annotated[str, Field(min_length=1, max_length=1000)], ...] = Field(
        alias="assert", min_length=1
    )
    tolerance: float = Field(default=1e-9, ge=0, description="for == between numbers")

    @field_validator("asserts")
    @classmethod
    def _parse(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        from gateway.checks.expr import parse

        for i, text in enumerate(v):
            try:
                parse(text)
            except ValueError as e:
                raise ValueError(f"assert[{i}]: {e}") from None
        return v


class PythonSpec(_Spec):
    """A check class from an installed package: ``object: "pkg.mod:Class"``, or a name in
    the ``llm_gateway.checks`` entry-point group; built as ``Class(**options)``."""

    kind: Literal["python"]
    object: str | None = Field(default=None, pattern=r"^[\w.]+:[\w.]+$")
    entry_point: str | None = None
    options: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _one(self) -> PythonSpec:
        if (self.object is None) == (self.entry_point is None):
            raise ValueError("give object or entry_point (one of them)")
        return self

    def problems(self, name: str, tiers: Collection[str]) -> list[str]:
        """It imports and builds: the user's code runs at validation, not on a request."""
        from gateway.checks.plugin import load_plugin

        try:
            load_plugin(name, self)
        except ValueError as e:
            return [f"checks.{name}: {e}"]
        return []


class CircuitSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    failures: int = Field(default=5, ge=1, description="consecutive errors that open it")
    cooldown: float = Field(default=10.0, gt=0, description="seconds open, then one probe")


class WebhookSpec(_Spec):
    """POST ``{"text", "partial", "request", "rule", "check"}`` to ``url``, which answers
    ``{"pass": bool, "reason": str}``."""

    kind: Literal["webhook"]
    url: str = Field(pattern=r"^https?://[^\s/]+(/\S*)?$")
    timeout: float = Field(default=0.5, gt=0, le=30)
    on_error: Literal["pass", "fail"] = "pass"
    headers: dict[str, str] = Field(default_factory=dict)
    max_concurrency: int = Field(default=64, ge=1, le=10_000)
    circuit: CircuitSpec = CircuitSpec()


class JudgeSpec(_Spec):
    """Ask a tier of the rules to grade the answer against ``rubric``: it answers PASS or
    FAIL and a reason. ``gate`` holds the answer for the verdict; ``score`` records it
    (metrics, review queue) without delaying the client."""

    kind: Literal["judge"]
    tier: str
    rubric: str = Field(min_length=1, max_length=8000)
    sample: float = Field(default=1.0, ge=0, le=1)
    mode: Literal["gate", "score"] = "score"
    timeout: float = Field(default=5.0, gt=0, le=120)
    on_error: Literal["pass", "fail"] = "pass"
    max_tokens: int = Field(default=64, ge=8, le=4096)
    max_concurrency: int = Field(default=16, ge=1, le=10_000)
    circuit: CircuitSpec = CircuitSpec()

    def problems(self, name: str, tiers: Collection[str]) -> list[str]:
        if self.tier in tiers:
            return []
        return [f"checks.{name}.tier: unknown tier {self.tier!r} ({', '.join(tiers)})"]


UserCheckSpec = Annotated[
    RegexSpec
    | ContainsSpec
    | LengthSpec
    | LanguageSpec
    | JsonAssertSpec
    | PythonSpec
    | WebhookSpec
    | JudgeSpec,
    Field(discriminator="kind"),
]
KINDS = ("regex", "contains", "length", "language", "json_assert", "python", "webhook", "judge")
