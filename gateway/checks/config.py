"""Configuration of the checks: thresholds, token lists and patterns, validated by pydantic."""

from __future__ import annotations

import re
from typing import Annotated, Any, Final

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gateway.checks.kinds import UserCheckSpec

__all__ = (
    "DEFAULT_REFUSAL_PATTERNS",
    "DEFAULT_TEMPLATE_TOKENS",
    "MAX_TOKEN_CHARS",
    "CheckSettings",
    "RefusalSettings",
    "RepetitionSettings",
    "TemplateLeakSettings",
)


class RepetitionSettings(BaseModel):
    """Thresholds of the ``repetition`` check (algorithm: ``repetition.find_loop_start``).

    A loop is a stretch of text that is exactly periodic with some period ``p`` (the repeated
    unit, e.g. one sentence) and that covers at least ``max(min_span_chars, min_repeats * p)``
    characters.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    min_span_chars: int = Field(default=200, ge=48)
    """Shortest loop flagged, in characters (~50 tokens). Lower would flag normal text:
    "ha ha ha", an 80-dash Markdown rule, a "|---|---|" table separator. A unit without
    letters (digits, punctuation: "!!!", "0, 0, ") must span twice this, a whitespace-only
    unit four times this (see ``repetition._span_factor``)."""
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
    numbered_min_copies: int = Field(default=30, ge=2)
    """A numbered loop ("4. X", "5. X", ...: copies that differ only in their digits, with
    letters in the unit) counts from this many copies, or from ``min_repeats`` when the
    answer ran into its token limit. Fewer copies that end by themselves are what a user
    asked for ("write it 20 times, numbered"); a model stuck counting goes to the limit."""


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


_NAME: Final = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}")

MAX_TOKEN_CHARS: Final = 64
"""Longest template token: a stream's new text is checked with this much of the text before
it, so a token split across two chunks is still seen."""


class TemplateLeakSettings(BaseModel):
    """Chat-template control tokens that must never show up in an answer's text.

    Matched as exact, case-sensitive substrings. Note that "</s>" is also the HTML closing
    tag of strikethrough, so an answer with such HTML is flagged.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    tokens: tuple[Annotated[str, Field(min_length=1, max_length=MAX_TOKEN_CHARS)], ...] = (
        DEFAULT_TEMPLATE_TOKENS
    )


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


NAMED: Final = "named"
"""Where the checks users write land in :class:`CheckSettings` (a YAML path leaves it out)."""


class CheckSettings(BaseModel):
    """The rules' ``checks:`` map: the built-ins' settings under their names, and the checks
    users write (an entry with a ``kind``: :mod:`gateway.checks.kinds`) under theirs.
    Unknown keys are rejected."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    repetition: RepetitionSettings = Field(default_factory=RepetitionSettings)
    template_leak: TemplateLeakSettings = Field(default_factory=TemplateLeakSettings)
    refusal: RefusalSettings = Field(default_factory=RefusalSettings)
    named: dict[str, UserCheckSpec] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _split(cls, data: Any) -> Any:
        """``name: {kind: ...}`` entries are checks users write; the rest are settings."""
        if not isinstance(data, dict):
            return data
        dumped = data.get(NAMED) or {}  # a dump read back (model_dump, then validate)
        if not isinstance(dumped, dict):
            raise ValueError(f"{NAMED!r} is reserved: name the check otherwise")
        named = {k: v for k, v in data.items() if isinstance(v, dict) and "kind" in v}
        taken = [k for k in named if k in cls.model_fields]
        if taken:
            raise ValueError(f"{taken[0]!r} is a built-in check's settings, not a new check")
        bad = [k for k in named if not _NAME.fullmatch(str(k))]
        if bad:
            raise ValueError(f"check name {bad[0]!r}: letters, digits, _ and - only")
        named = {**dumped, **named}
        rest = {k: v for k, v in data.items() if k not in named and k != NAMED}
        return {**rest, NAMED: named} if named else rest
