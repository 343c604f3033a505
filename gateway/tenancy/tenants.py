"""Tenants, their API keys and policies: the value objects, key hashing, precedence.

A policy field left out (None) means "the next level decides": key > tenant > global
rules. :func:`effective_policy` merges the levels and remembers which one set each
field, so ``explain`` can say who decided.

API keys are stored only as HMAC-SHA256 digests under a server secret; the plaintext
is shown once, at creation, and compared in constant time (a digest lookup, then
``hmac.compare_digest`` on the stored digest).
"""

from __future__ import annotations

import hashlib
import hmac
import math
import secrets
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gateway.rules.schema import Rule

KEY_PREFIX = "gk-"


class TokenBudget(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    tokens: int = Field(ge=1, description="prompt + completion tokens, all tiers")
    period: Literal["day", "month"] = "day"


class CostBudget(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    usd: float = Field(gt=0, description="USD of answers at the tiers' prices, all tiers")
    period: Literal["day", "month"] = "day"


class Policy(BaseModel):
    """Per-tenant (or per-key) policy. Every field is optional: None = next level."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    requests_per_minute: int | None = Field(default=None, ge=1)
    tokens_per_minute: int | None = Field(default=None, ge=1)
    max_concurrent_requests: int | None = Field(default=None, ge=1)
    allowed_tiers: tuple[str, ...] | None = None
    forced_tier: str | None = None
    default_sla: str | None = None
    fallback_enabled: bool | None = None
    checks_add: tuple[str, ...] | None = None
    checks_drop: tuple[str, ...] | None = None
    token_budget: TokenBudget | None = None
    cost_budget: CostBudget | None = None
    shadow_rate: float | None = Field(default=None, ge=0, le=1)
    review: bool | None = Field(
        default=None,
        description="false: none of this tenant's requests is kept in the review queue",
    )
    priority_shift: int | None = Field(
        default=None, ge=-2, le=2, description="queue band shift: -1 = one band earlier"
    )
    share_weight: int | None = Field(
        default=None, ge=1, le=100, description="queue fair share: requests per round-robin turn"
    )
    fail_closed: bool | None = Field(
        default=None, description="when the store is unreachable: refuse (503) instead of serve"
    )
    rules: tuple[Rule, ...] | None = Field(
        default=None, description="rules tried before the global ones (same schema)"
    )

    @field_validator("rules")
    @classmethod
    def _not_analysed(cls, v: tuple[Rule, ...] | None) -> tuple[Rule, ...] | None:
        if v and any(r.analysis is not None for r in v):
            raise ValueError(
                "a tenant's rule cannot carry an analysis: a rollout steps the rules' versions"
            )
        return v

    @property
    def has_budget(self) -> bool:
        """A token or USD budget: requests reserve their worst case against it."""
        return self.token_budget is not None or self.cost_budget is not None


POLICY_FIELDS = tuple(Policy.model_fields)


def divided(p: Policy, n: int) -> Policy:
    """``p`` with each limit divided among ``n`` processes (rounded up, at least 1): what
    each process's own limiter enforces when they cannot count together."""

    def part(v: int | None) -> int | None:
        return None if v is None else max(1, math.ceil(v / n))

    update: dict[str, object] = {
        "requests_per_minute": part(p.requests_per_minute),
        "tokens_per_minute": part(p.tokens_per_minute),
        "max_concurrent_requests": part(p.max_concurrent_requests),
    }
    if p.token_budget is not None:
        tokens = part(p.token_budget.tokens)
        update["token_budget"] = p.token_budget.model_copy(update={"tokens": tokens})
    if p.cost_budget is not None:
        update["cost_budget"] = p.cost_budget.model_copy(update={"usd": p.cost_budget.usd / n})
    return p.model_copy(update=update)


class Tenant(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str
    name: str = Field(min_length=1, max_length=200)
    policy: Policy = Policy()
    version: int = 1
    created_at: float = Field(default_factory=time.time)
    updated_at: float = Field(default_factory=time.time)


class ApiKey(BaseModel):
    """A key as stored: never the plaintext, only its digest and a short display prefix."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str
    tenant_id: str
    digest: str
    prefix: str  # first characters of the plaintext, to recognise a key in listings
    name: str = ""
    policy: Policy = Policy()
    created_at: float = Field(default_factory=time.time)


def new_id(kind: str) -> str:
    return f"{kind}_{secrets.token_hex(8)}"


def new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def key_digest(secret: bytes, key: str) -> str:
    return hmac.new(secret, key.encode(), hashlib.sha256).hexdigest()


def digest_matches(stored: str, candidate: str) -> bool:
    return hmac.compare_digest(stored, candidate)


@dataclass(frozen=True, slots=True)
class Effective:
    """The merged policy of one request, with the level that set each field."""

    policy: Policy
    source: dict[str, str] = field(default_factory=dict)  # field -> "key" | "tenant"
    tenant_id: str | None = None
    key_id: str | None = None

    def who(self, name: str) -> str:
        return self.source.get(name, "global")


OPEN = Effective(Policy())  # no tenant: the embedded default, everything from the rules


def effective_policy(tenant: Tenant, key: ApiKey) -> Effective:
    merged: dict[str, Any] = {}
    source: dict[str, str] = {}
    for level, pol in (("tenant", tenant.policy), ("key", key.policy)):
        for name in POLICY_FIELDS:
            v = getattr(pol, name)
            if v is not None:
                merged[name] = v
                source[name] = level
    return Effective(Policy.model_validate(merged), source, tenant.id, key.id)
