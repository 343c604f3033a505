"""The schema of ``routing_rules.yaml`` and its loader.

Parsing is strict: unknown keys are errors, cross references (tiers named by rules,
tasks named by the classifier, checks named by rules) are checked, and every problem
is reported with its YAML path, all at once. A file that fails never yields a
:class:`Rules`, so a bad file can never half-replace a good one.

Over 400 lines because it holds the one pydantic schema of the rules file, whose models
reference each other and are validated together.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from gateway.checks.base import CHECK_NAMES
from gateway.checks.config import CheckSettings
from gateway.rules.cache import CacheRule


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Timeouts(_Strict):
    connect: float = Field(default=2.0, gt=0, description="TCP connect, seconds")
    ttft: float = Field(default=10.0, gt=0, description="first token of a stream, seconds")
    total: float = Field(default=120.0, gt=0, description="whole attempt, seconds")
    stall: float = Field(default=10.0, gt=0, description="gap between stream tokens, seconds")
    # after its first token a stream keeps this rate over every rate_window (else the next
    # tier answers or continues it; never on a chain's last tier); 0: off
    min_tokens_per_s: float = Field(default=1.0, ge=0, description="output events a second")
    rate_window: float = Field(default=5.0, gt=0, le=600, description="seconds")


class Circuit(_Strict):
    failures: int = Field(default=5, ge=1, description="consecutive failures that open it")
    cooldown: float = Field(default=10.0, gt=0, description="seconds before a half-open probe")


class Health(_Strict):
    enabled: bool = True
    interval: float = Field(default=5.0, gt=0, description="seconds between probes of a replica")
    timeout: float = Field(default=2.0, gt=0, description="a probe slower than this fails")
    path: str = Field(default="/health", pattern=r"^/")
    metrics_path: str | None = Field(
        default="/metrics", pattern=r"^/", description="SGLang Prometheus metrics; null: off"
    )


class StreamSettings(_Strict):
    hold_back_tokens: int = Field(
        default=0, ge=0, description="tokens held back while early checks run; 0: off"
    )
    hold_back_ms: float = Field(
        default=0.0, ge=0, description="...or at most this long after the first token; 0: no cap"
    )
    check_every_chars: int = Field(default=256, ge=16, description="live checks cadence")
    check_window_chars: int = Field(default=4096, ge=256, description="tail the checks look at")


Continuation = Literal["continue_final_message", "continue_final_message_no_gen", "prefill", "off"]
Provider = Literal["openai", "litellm"]


class Price(_Strict):
    """A self-hosted tier's price, USD per 1M tokens (e.g. its GPU-hour cost / throughput)."""

    input_per_1m: float = Field(ge=0)
    output_per_1m: float = Field(ge=0)


def _hosted_defaults(data: dict[str, Any]) -> dict[str, Any]:
    """A ``provider: litellm`` tier: its model from ``litellm_params``, no endpoints to
    probe, continuation by assistant prefill (LiteLLM says per model whether it works)."""
    params = data.get("litellm_params")
    if not isinstance(params, dict) or not isinstance(params.get("model"), str):
        raise ValueError("a litellm tier needs litellm_params with a model (as in LiteLLM)")
    data = {**data}
    data.setdefault("model", params["model"])
    data.setdefault("endpoints", ["litellm:" + params["model"]])
    data.setdefault("health", {"enabled": False})
    data.setdefault("continuation", "prefill")
    if data["continuation"] not in ("prefill", "off"):
        raise ValueError("a litellm tier continues by 'prefill' or not at all ('off')")
    return data


class Tier(_Strict):
    provider: Provider = Field(
        default="openai",
        description="openai: OpenAI-compatible engines at `endpoints`; litellm: a hosted "
        "model called through LiteLLM with `litellm_params`",
    )
    litellm_params: dict[str, Any] | None = Field(
        default=None,
        description="as in a LiteLLM config (model, api_base, api_key: os.environ/NAME ...)",
    )
    price: Price | None = Field(
        default=None, description="USD per 1M tokens; litellm tiers: LiteLLM's price map"
    )
    model: str | None = Field(
        default=None,
        min_length=1,
        description="model name sent to the engines; unset: the first one their "
        "GET /v1/models lists (re-checked by the health probe)",
    )
    endpoints: tuple[str, ...] = Field(min_length=1)
    timeouts: Timeouts = Timeouts()
    circuit: Circuit = Circuit()
    health: Health = Health()
    stream: StreamSettings = StreamSettings()
    continuation: Continuation = Field(
        default="continue_final_message",
        description="how this tier's engine continues an assistant text another tier began",
    )
    request_defaults: dict[str, Any] = Field(
        default_factory=dict,
        description="request fields this tier sets when the client did not (e.g. sampling)",
    )
    upstream_stream: bool = Field(
        default=True,
        description="ask this tier's engines for a stream even when the client did not, so "
        "first-token, stall and loop checks act during generation",
    )
    embeddings: bool = Field(
        default=False, description="this tier's engines serve POST /v1/embeddings"
    )
    responses_api: bool = Field(
        default=False,
        description="this tier's engines serve POST /v1/responses (SGLang, vLLM): Responses "
        "API requests are passed through; otherwise they are translated to chat completions",
    )
    max_connections: int = Field(default=1000, ge=1, description="per replica")
    max_answer_bytes: int = Field(
        default=64 << 20, ge=1024, description="a larger engine answer is an upstream failure"
    )
    max_event_bytes: int = Field(
        default=8 << 20, ge=1024, description="a larger SSE event is an upstream failure"
    )
    max_concurrency: int | None = Field(
        default=None,
        ge=1,
        description="requests the gateway may have in flight on one replica; beyond, they "
        "wait in the gateway by priority and tenant fair share (unset: unlimited)",
    )
    max_queue: int | None = Field(
        default=None, ge=0, description="waiters per pool before shedding (unset: unbounded)"
    )
    affinity_slack: float = Field(
        default=1.0,
        ge=0,
        description="bounded-load affinity: a prompt prefix keeps its replica unless that one "
        "carries more than (1 + this) x the mean load (`python -m evals sched` measures it)",
    )
    keepalive: float = Field(
        default=4.0,
        gt=0,
        description="idle keep-alive seconds; below the engine's own (uvicorn and "
        "llama.cpp close idle connections after 5 s), so we never reuse one it closed",
    )

    @model_validator(mode="before")
    @classmethod
    def _provider(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("provider") == "litellm":
            return _hosted_defaults(data)
        if isinstance(data, dict) and data.get("litellm_params") is not None:
            raise ValueError("litellm_params needs provider: litellm")
        return data

    @model_validator(mode="after")
    def _http(self) -> Tier:
        if self.provider == "litellm":
            return self
        for url in self.endpoints:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"endpoint {url!r} is not an http(s) URL")
        return self


class SlaClass(_Strict):
    deadline: float = Field(gt=0, description="whole request, all attempts, seconds")
    ttft_budget: float = Field(gt=0, description="first token of a stream, seconds")


class TaskClass(_Strict):
    default_sla: str


class CodeCues(_Strict):
    task: str = "code"
    fences: tuple[str, ...] = ("```",)
    fim_markers: tuple[str, ...] = ()
    keywords: tuple[str, ...] = ()
    min_keyword_hits: int = Field(default=2, ge=1)


class SummarizationCues(_Strict):
    task: str = "summarization"
    verbs: tuple[str, ...] = ()
    min_prompt_tokens: int = Field(default=300, ge=0)


class ReasoningCues(_Strict):
    task: str = "reasoning"
    cues: tuple[str, ...] = ()


class ModelSettings(_Strict):
    """The learned classifier, asked when no header, shape or cue decided."""

    enabled: bool = True
    path: str | None = Field(
        default=None,
        description="weights (JSON) written by `python -m evals classify --train`; "
        "null: the model shipped in the package",
    )
    min_confidence: float = Field(
        default=0.5, ge=0, le=1, description="a top class below this probability is uncertain"
    )
    uncertain_task: str | None = Field(
        default=None, description="the task of an uncertain request; null: default_task"
    )

    @field_validator("path")
    @classmethod
    def _readable(cls, v: str | None) -> str | None:
        if v is not None and not Path(v).is_file():
            raise ValueError(f"no model file at {v!r}")
        return v


class Classify(_Strict):
    tools_task: str = "agent"
    json_task: str = "extraction"
    default_task: str = "chat"
    code: CodeCues = CodeCues()
    summarization: SummarizationCues = SummarizationCues()
    reasoning: ReasoningCues = ReasoningCues()
    model: ModelSettings = ModelSettings()
    scan_chars: int = Field(
        default=4096, ge=64, description="cue search looks at this many chars of the last turn"
    )


class When(_Strict):
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


class Arm(_Strict):
    """One arm of a canary split: a share of the rule's traffic sent to ``tier`` first."""

    tier: str
    weight: float = Field(gt=0, description="relative share of the rule's traffic")
    name: str | None = Field(
        default=None, min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$"
    )

    @property
    def label(self) -> str:
        """The arm's name in x-gateway-route, explain and the metrics (default: its tier)."""
        return self.name or self.tier


class Route(_Strict):
    tier: str
    split: tuple[Arm, ...] = Field(
        default=(),
        description="canary: share the traffic by weight between arms (tiers), sticky per "
        "x-session-id header, else the body's user, else the API key, else the prompt; "
        "the chosen arm's tier replaces ``tier`` (the fallbacks stay)",
    )
    sla: str | None = Field(
        default=None,
        description="SLA class of the requests this rule takes, unless a header or the "
        "tenant's policy named one (e.g. long generations as batch)",
    )
    fallback: tuple[str, ...] = ()
    checks: tuple[str, ...] = ()
    cache: CacheRule | None = None  # keep answers that passed (gateway.rules.cache)
    hold_back: bool = Field(
        default=False,
        description="hold back the first tokens of every stream of this rule (it is on by "
        "itself for tool calls, a client's JSON schema and n > 1)",
    )
    hedge_after: float | Literal["auto"] | None = Field(
        default=None,
        description="start the next tier beside the first when it has no token after this "
        "many seconds, or 'auto' (3x the first tier's observed p90 time to first token, "
        "0.02-2 s); the first good answer wins; null: no hedging",
    )

    @field_validator("hedge_after")
    @classmethod
    def _positive_hedge(cls, v: float | str | None) -> float | str | None:
        if isinstance(v, float | int) and v <= 0:
            raise ValueError("hedge_after must be > 0 seconds, 'auto' or null")
        return v

    on_last_failure: Literal["deliver", "error"] = Field(
        default="deliver",
        description="the last tier's answer failed a check: deliver it (with "
        "x-gateway-checks-failed) or answer with an error",
    )


class Rule(Route):
    name: str = Field(min_length=1)
    when: When = When()


class Dispatch(_Strict):
    backoff_initial: float = Field(default=0.02, ge=0, description="s before retrying a tier")
    backoff_max: float = Field(default=0.5, ge=0, description="s: the longest wait before a retry")
    backoff_jitter: float = Field(default=0.02, ge=0)
    same_tier_retries: int = Field(
        default=1, ge=0, le=3, description="retries of a tier after a reset, 500, 502, 503, 429"
    )
    hedge_share: float = Field(
        default=0.1, ge=0, le=1, description="hedges may add at most this share of requests"
    )
    hedge_burst: float = Field(default=10.0, ge=1, description="hedges saved up for a burst")
    bridge: bool = Field(default=True, description="hand a hedge won by the next tier back")
    reserve_floor: float = Field(
        default=2.0, ge=0, description="seconds of the deadline always kept for the next tier"
    )


def _auto_only() -> dict[str, str | None]:
    return {"auto": None}


class Rules(_Strict):
    version: int = 1
    tiers: dict[str, Tier] = Field(min_length=1)
    aliases: dict[str, str | None] = Field(default_factory=_auto_only)
    sla_classes: dict[str, SlaClass] = Field(min_length=1)
    default_sla: str
    tasks: dict[str, TaskClass] = Field(min_length=1)
    classify: Classify = Classify()
    rules: tuple[Rule, ...] = ()
    default: Route
    checks: CheckSettings = CheckSettings()
    dispatch: Dispatch = Dispatch()

    def with_endpoints(self, overrides: dict[str, tuple[str, ...]]) -> Rules:
        """A copy whose tiers use ``overrides`` (tier name -> URLs) as endpoints."""
        tiers = dict(self.tiers)
        for name, urls in overrides.items():
            if name in tiers:
                tiers[name] = tiers[name].model_copy(update={"endpoints": urls})
        return self.model_copy(update={"tiers": tiers})

    def with_models(self, models: dict[str, str]) -> Rules:
        """A copy whose tiers send ``models`` (tier name -> model name) to their engines."""
        if not models:
            return self
        tiers = dict(self.tiers)
        for name, model in models.items():
            if name in tiers:
                tiers[name] = tiers[name].model_copy(update={"model": model})
        return self.model_copy(update={"tiers": tiers})


class RulesError(Exception):
    """A rules file that cannot be used; ``errors`` holds one "path: message" per problem."""

    def __init__(self, source: str, errors: list[str]):
        self.source = source
        self.errors = errors
        super().__init__(f"{source}: {len(errors)} error(s):\n  " + "\n  ".join(errors))


def _loc(loc: Iterable[int | str]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "<root>"


def _split_errors(path: str, rt: Route, r: Rules) -> list[str]:
    errs: list[str] = []
    labels: set[str] = set()
    for i, arm in enumerate(rt.split):
        if arm.tier not in r.tiers:
            errs.append(
                f"{path}.split[{i}].tier: unknown tier {arm.tier!r} (tiers: {', '.join(r.tiers)})"
            )
        if arm.label in labels:
            errs.append(f"{path}.split[{i}]: duplicate arm {arm.label!r} (name the arms)")
        labels.add(arm.label)
    return errs


def cross_check(r: Rules) -> list[str]:
    errs: list[str] = []

    def tier(path: str, name: str) -> None:
        if name not in r.tiers:
            errs.append(f"{path}: unknown tier {name!r} (tiers: {', '.join(r.tiers)})")

    def task(path: str, name: str) -> None:
        if name not in r.tasks:
            errs.append(f"{path}: unknown task {name!r} (tasks: {', '.join(r.tasks)})")

    def sla(path: str, name: str) -> None:
        if name not in r.sla_classes:
            errs.append(f"{path}: unknown SLA class {name!r} (classes: {', '.join(r.sla_classes)})")

    def route(path: str, rt: Route) -> None:
        tier(f"{path}.tier", rt.tier)
        errs.extend(_split_errors(path, rt, r))
        if rt.sla is not None:
            sla(f"{path}.sla", rt.sla)
        for i, t in enumerate(rt.fallback):
            tier(f"{path}.fallback[{i}]", t)
        for i, c in enumerate(rt.checks):
            if c not in CHECK_NAMES:
                errs.append(f"{path}.checks[{i}]: unknown check {c!r} ({', '.join(CHECK_NAMES)})")

    for alias, t in r.aliases.items():
        if t is not None:
            tier(f"aliases.{alias}", t)
    sla("default_sla", r.default_sla)
    for name, tc in r.tasks.items():
        sla(f"tasks.{name}.default_sla", tc.default_sla)
    c = r.classify
    for path, name in (
        ("classify.tools_task", c.tools_task),
        ("classify.json_task", c.json_task),
        ("classify.default_task", c.default_task),
        ("classify.code.task", c.code.task),
        ("classify.summarization.task", c.summarization.task),
        ("classify.reasoning.task", c.reasoning.task),
        ("classify.model.uncertain_task", c.model.uncertain_task or c.default_task),
    ):
        task(path, name)
    names: set[str] = set()
    for i, rule in enumerate(r.rules):
        path = f"rules[{i}]"
        if rule.name in names:
            errs.append(f"{path}.name: duplicate rule name {rule.name!r}")
        names.add(rule.name)
        route(path, rule)
        w = rule.when
        for j, t in enumerate(w.task or ()):
            task(f"{path}.when.task[{j}]", t)
        for j, s in enumerate(w.sla or ()):
            sla(f"{path}.when.sla[{j}]", s)
        for j, t in enumerate(w.tier_hint or ()):
            tier(f"{path}.when.tier_hint[{j}]", t)
    route("default", r.default)
    return errs


def parse_rules(text: str, source: str = "<rules>") -> Rules:
    """Parse and validate YAML text; raise :class:`RulesError` listing every problem."""
    try:
        data: Any = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise RulesError(source, [f"YAML syntax: {e}".replace("\n", " ")]) from None
    except RecursionError:
        raise RulesError(source, ["YAML nested too deep"]) from None
    if not isinstance(data, dict):
        raise RulesError(source, ["<root>: expected a mapping at the top level"])
    try:
        rules = Rules.model_validate(data)
    except RecursionError:
        raise RulesError(source, ["<root>: nested too deep"]) from None
    except ValidationError as e:
        msgs = [f"{_loc(err['loc'])}: {err['msg']}" for err in e.errors()]
        raise RulesError(source, msgs) from None
    errs = cross_check(rules)
    if errs:
        raise RulesError(source, errs)
    return rules


def load_rules(path: Path) -> Rules:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise RulesError(str(path), [f"cannot read: {e.strerror}"]) from None
    return parse_rules(text, str(path))
