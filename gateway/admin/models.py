"""The admin API's request and response bodies (the OpenAPI document is generated from them).

Request models refuse unknown fields. A route returns an instance of the response model it
declares, and FastAPI sends that instance as JSON: what the document describes is what is
sent. A route whose answer carries a policy leaves out the fields no level sets
(``response_model_exclude_none``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from gateway.tenancy.tenants import ApiKey, Policy, Tenant

# -- requests ------------------------------------------------------------------------------


class TenantIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=200)
    policy: Policy = Policy()


class TenantPatch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str | None = Field(default=None, min_length=1, max_length=200)
    policy: dict[str, Any] | None = Field(
        default=None, description="the policy fields to change; null clears a field"
    )


class KeyIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(default="", max_length=200)
    policy: Policy = Policy()


class Rollback(BaseModel):
    model_config = ConfigDict(extra="forbid")
    version: int = Field(ge=1)


class ExplainIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str = "/v1/chat/completions"
    headers: dict[str, str] = Field(default_factory=dict)
    body: dict[str, Any]
    tenant_id: str | None = Field(default=None, description="decide as this tenant would")
    rules: str | None = Field(
        default=None, description="routing rules (YAML) to decide by instead of the running ones"
    )


class DemotionIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    rule: str = Field(min_length=1, max_length=200, description="a rule's name, or 'default'")
    tier: str = Field(min_length=1, max_length=200)
    reason: str = Field(default="", max_length=200, description="said in x-gateway-route")
    ttl_s: float | None = Field(
        default=None, gt=0, description="seconds until it ends by itself; null: until released"
    )


# -- responses -----------------------------------------------------------------------------


class TenantOut(BaseModel):
    id: str
    name: str
    policy: Policy = Field(description="only the fields the tenant sets")
    version: int
    created_at: float
    updated_at: float


class KeyOut(BaseModel):
    id: str
    tenant_id: str
    name: str
    prefix: str = Field(description="the first characters of the key, to recognise it")
    policy: Policy
    created_at: float


class NewKeyOut(KeyOut):
    key: str = Field(description="the plaintext key: shown this once, never again")
    replaces: str | None = Field(default=None, description="rotate: the key it replaced")


class TenantDetail(TenantOut):
    keys: list[KeyOut]


class TenantList(BaseModel):
    object: Literal["list"] = "list"
    data: list[TenantOut]


class KeyList(BaseModel):
    object: Literal["list"] = "list"
    data: list[KeyOut]


class RecordList(BaseModel):
    """Audit entries, rule versions or shadow comparisons."""

    object: Literal["list"] = "list"
    data: list[dict[str, Any]]


class UsageOut(BaseModel):
    tenant_id: str
    day: str = Field(description="YYYYMMDD, UTC")
    requests: int
    tokens_by_tier: dict[str, int]
    prompt_tokens: int
    completion_tokens: int
    fallbacks_by_reason: dict[str, int]
    cache_hits: int = Field(description="answers from the response cache: zero engine tokens")
    cache_saved_tokens: int = Field(description="the engine tokens those answers had cost")
    cost_usd: float = Field(description="answers at the tiers' prices (rules, LiteLLM's map)")
    cost_usd_by_tier: dict[str, float]


class PoolsOut(BaseModel):
    tiers: dict[str, Any] = Field(description="per tier: availability, circuit, replicas")
    store_degraded: bool


class LiveOut(BaseModel):
    at: float = Field(description="Unix time of the reading")
    pools: dict[str, Any] = Field(description="as GET /admin/pools 'tiers'")
    store_degraded: bool
    window_s: float | None = Field(description="seconds the rates cover; null: first reading")
    over: Literal["window", "start"] = Field(
        description="percentiles over the window or since start"
    )
    tiers: dict[str, Any] = Field(
        description="per tier: requests, errors, rate, error_rate (per second), latency_s and "
        "ttft_s {p50, p95, p99, n}, queue_waiting, shed, fallbacks and fallbacks_window "
        "(by reason), check_failures (by check); over and age_s: the window the rates and "
        "percentiles cover (a tier idle over the last minute keeps its last busy one, "
        "age_s seconds old)"
    )
    cache: dict[str, Any] | None = Field(
        description="the response cache's hits, misses, hit_rate; null: no cache figures"
    )


class DemotionOut(BaseModel):
    rule: str
    tier: str
    reason: str
    since: float = Field(description="Unix time")
    until: float | None = Field(description="Unix time it ends by itself; null: when released")
    by: str = Field(description="'circuit <replica>', or the operator who pinned it")
    pinned: bool = Field(description="an operator's: no probes, never restored by them")
    version: int = Field(description="the store's record; 0: this process only (no store)")
    shared: bool = Field(description="recorded in the store: every replica applies it")
    probes: int = Field(description="probes judged so far by this replica")
    probes_failed: int


class QualityWindowOut(BaseModel):
    rule: str
    tier: str
    answers: int = Field(description="checked answers of the tier on the rule in the window")
    failed: int = Field(description="those that failed a check")
    span_s: float


class DemotionList(BaseModel):
    object: Literal["list"] = "list"
    data: list[DemotionOut] = Field(description="the demotions in force")
    windows: list[QualityWindowOut] = Field(
        description="this replica's windows: each tier's recent answers per rule"
    )
    rules: list[str] = Field(description="the running rules' names ('default' included)")
    tiers: list[str] = Field(description="the running rules' tiers")


class RolloutArmOut(BaseModel):
    tier: str
    weight: float
    requests: int = Field(default=0, description="the arm's requests in the step, fleet-wide")
    fallbacks: int = Field(default=0, description="those where a tier's attempt failed")
    fallback_rate: float | None = None
    check_failures: int = Field(default=0, description="those where an answer failed a check")
    check_failure_rate: float | None = None
    p50_ms: float | None = None
    p99_ms: float | None = None


class RolloutComparisonOut(BaseModel):
    metric: str = Field(description="fallback_rate, check_failure_rate or latency_p99")
    baseline: float | None
    canary: float | None
    ratio: float | None = Field(description="canary / baseline; null when the baseline's is 0")
    limit: float = Field(description="the largest ratio that is not worse")
    p_value: float = Field(description="the one-sided test's: the canary is worse")
    alpha: float = Field(description="the level it is held to at this look")
    worse: bool


class RolloutOut(BaseModel):
    rule: str
    baseline: str
    canary: str
    share: float = Field(description="the canary's share of the rule's traffic, percent")
    steps: list[float]
    next_step: float | None
    analysis: dict[str, Any] = Field(description="the rule's analysis, defaults filled in")
    describe: str
    arms: dict[str, RolloutArmOut]
    comparisons: list[RolloutComparisonOut]
    decision: str = Field(
        description="what the judge decides on these counts now: wait, promote, rollback, "
        "complete, rolled_back, or pending (no replica has judged this step yet)"
    )
    to: float | None = Field(description="the share a promote or rollback sets")
    reason: str
    since: float | None = Field(description="Unix time the step began")
    held_s: float
    looks: int = Field(description="the step's looks taken (a look tests at a level of its own)")
    last_decision: str | None = Field(description="the judging replica's last decision")
    last_reason: str | None
    judged_at: float | None
    history: list[dict[str, Any]] = Field(description="the steps taken (started, promote, ...)")


class RolloutList(BaseModel):
    object: Literal["list"] = "list"
    data: list[RolloutOut] = Field(description="every analysed rule of the running rules")
    lease: dict[str, str | None] = Field(
        description="holder: the process judging the rollouts; this_replica: the one answering"
    )


class ValidateOut(BaseModel):
    valid: bool
    errors: list[str] = Field(description="every problem found, each with its YAML path")
    tiers: list[str] = Field(description="the file's tiers (valid files)")
    rules: list[str] = Field(description="the file's rule names, in order (valid files)")


class RulesOut(BaseModel):
    version: int = Field(description="0: not stored (no store configured)")
    source: str
    yaml: str
    last_error: dict[str, Any] | None = Field(description="the last rejected change")


class RulesVersionOut(BaseModel):
    version: int
    yaml: str


class VersionOut(BaseModel):
    version: int


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None
    code: str | None
    errors: list[str] | None = Field(default=None, description="422: every problem found")


class ErrorOut(BaseModel):
    """The OpenAI-style error envelope every failure is sent in."""

    error: ErrorDetail


# -- answers from the stored objects -----------------------------------------------------------


def tenant_out(t: Tenant) -> TenantOut:
    return TenantOut.model_validate(t, from_attributes=True)


def key_out(k: ApiKey) -> KeyOut:
    """A key as listed: never its digest."""
    return KeyOut.model_validate(k, from_attributes=True)
