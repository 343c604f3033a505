"""The ``review:`` section of ``routing_rules.yaml``: which of the answers the quality gate
caught are kept for people to label (:mod:`gateway.dispatch.review`)."""

from __future__ import annotations

from pydantic import Field, field_validator

from gateway.rules.base import Strict


class ReviewSettings(Strict):
    sample: float = Field(
        default=1.0, ge=0, le=1, description="share of the requests with a failed check kept"
    )
    max_items: int = Field(default=10_000, ge=1, le=1_000_000, description="the oldest go first")
    ttl_days: float = Field(default=7.0, gt=0, le=365, description="none kept longer")
    max_text_chars: int = Field(
        default=8_000, ge=100, le=200_000, description="of each answer and message kept"
    )
    redact: tuple[str, ...] = Field(
        default=("user", "metadata"),
        description="paths in the request body replaced by '[redacted]' before it is kept "
        "(a name, a dotted path, or a path with [*]: messages[*].name); keys are never kept",
    )

    @field_validator("redact")
    @classmethod
    def _paths(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        from gateway.checks.expr import parse_path

        for p in v:
            try:
                parse_path(p)
            except ValueError as e:
                raise ValueError(f"redact path {p!r}: {e}") from None
        return v
