"""The rules of ``routing_rules.yaml``: when a rule matches (:class:`When`), where it sends
a request (:class:`Route`: tier, canary split, fallback chain) and how that request is
guarded.

Guards are defaults, not lines a rule can forget: every rule with a tier to fall back on
runs :data:`GUARDS` (loops, template leaks, empty, truncated, malformed JSON or tool calls)
besides its own ``checks``, unless it drops one (``checks_drop``), and hedges a slow first
token (``hedge_after: auto``) unless it opts out (``hedge_after: off``).
"""

from __future__ import annotations

from typing import Any, Final, Literal

from pydantic import Field, field_validator

from gateway.checks.registry import BUILTINS
from gateway.rules.analysis import Analysis
from gateway.rules.base import Strict
from gateway.rules.cache import CacheRule
from gateway.rules.quality import QualitySettings

GUARDS: Final[tuple[str, ...]] = tuple(
    name for name, cls in BUILTINS.items() if not cls.abilities.opt_in
)
"""The checks every rule with a fallback runs unless it drops them: each says an answer is
broken whatever was asked (``refusal`` is a policy, only where a rule names it)."""


class When(Strict):
    task: tuple[str, ...] | None = None
    sla: tuple[str, ...] | None = None
    model: tuple[str, ...] | None = None
    tier_hint: tuple[str, ...] | None = None
    headers: dict[str, str] | None = None
    has_tools: bool | None = None
    stream: bool | None = None
    min_prompt_tokens: int | None = Field(default=None, ge=0)
    max_prompt_tokens: int | None = Field(default=None, ge=0)
    min_max_tokens: int | None = Field(
        default=None, ge=1, description="the client's max_tokens is at least this (unset: no match)"
    )
    max_max_tokens: int | None = Field(
        default=None, ge=1, description="the client's max_tokens is at most this (unset: no match)"
    )


class Arm(Strict):
    """One arm of a canary split: a share of the rule's traffic sent to ``tier`` first."""

    tier: str
    weight: float = Field(
        ge=0, description="relative share of the rule's traffic (0: none, e.g. rolled back)"
    )
    name: str | None = Field(
        default=None, min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$"
    )

    @property
    def label(self) -> str:
        """The arm's name in x-gateway-route, explain and the metrics (default: its tier)."""
        return self.name or self.tier


class Route(Strict):
    tier: str
    split: tuple[Arm, ...] = Field(
        default=(),
        description="canary: share the traffic by weight between arms (tiers), sticky per "
        "x-session-id header, else the body's user, else the API key, else the prompt; "
        "the chosen arm's tier replaces ``tier`` (the fallbacks stay)",
    )
    analysis: Analysis | None = Field(
        default=None,
        description="judge the split's canary against its baseline and step its share "
        "(gateway.rules.analysis)",
    )
    sla: str | None = Field(
        default=None,
        description="SLA class of the requests this rule takes, unless a header or the "
        "tenant's policy named one (e.g. long generations as batch)",
    )
    fallback: tuple[str, ...] = ()
    checks: tuple[str, ...] = Field(
        default=(),
        description="checks of this rule's answers; a rule with a fallback also runs the "
        "guards (GUARDS) unless it drops them with checks_drop",
    )
    checks_drop: tuple[str, ...] = Field(
        default=(), description="guards this rule does without (e.g. [repetition])"
    )
    cache: CacheRule | None = None  # keep answers that passed (gateway.rules.cache)
    quality: QualitySettings | None = Field(
        default=None,
        description="this rule's quality circuit: the fields it names change the top-level "
        "quality section's for this rule",
    )
    hold_back: bool = Field(
        default=False,
        description="hold back the first tokens of every stream of this rule (it is on by "
        "itself for tool calls, a client's JSON schema and n > 1)",
    )
    hedge_after: float | Literal["auto"] | None = Field(
        default="auto",
        description="start the next tier beside the first when it has no token after this "
        "many seconds, or 'auto' (the default: 3x the first tier's observed p90 time to "
        "first token, 0.02-2 s); the first good answer wins; null, false or 'off': no hedging",
    )

    @field_validator("hedge_after", mode="before")
    @classmethod
    def _hedge_setting(cls, v: Any) -> Any:
        if v is False or v == "off":  # YAML reads a bare `off` as false
            return None
        if v is True:
            raise ValueError("hedge_after is seconds, 'auto' or off (null/false)")
        if isinstance(v, float | int) and v <= 0:
            raise ValueError("hedge_after must be > 0 seconds, 'auto' or off (null/false)")
        return v

    on_last_failure: Literal["deliver", "error"] = Field(
        default="deliver",
        description="the last tier's answer failed a check: deliver it (with "
        "x-gateway-checks-failed) or answer with an error",
    )

    def chained(self) -> bool:
        """Whether a request of this rule has a tier to fall back on (some arm or its tier
        has a fallback tier other than itself)."""
        firsts = {a.tier for a in self.split} or {self.tier}
        return any(t not in firsts or len(firsts) > 1 for t in self.fallback)

    def guarded_checks(self, chained: bool) -> tuple[str, ...]:
        """The checks a request of this rule runs: the rule's own, and where it has a tier
        to fall back on, the guards it did not drop (a guard that does not apply to a
        request passes at once: ``json_valid`` outside JSON mode, ...)."""
        if not chained:
            return self.checks
        extra = tuple(g for g in GUARDS if g not in self.checks and g not in self.checks_drop)
        return (*self.checks, *extra) if extra else self.checks


class Rule(Route):
    name: str = Field(min_length=1)
    when: When = When()
