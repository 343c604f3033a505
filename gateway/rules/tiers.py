"""The tiers of ``routing_rules.yaml``: a named policy target and the pool that serves it
(its engines or hosted model, timeouts, circuit, health probe, stream window, how it
continues another tier's text, its price)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from gateway.rules.base import Strict


class Timeouts(Strict):
    connect: float = Field(default=2.0, gt=0, description="TCP connect, seconds")
    ttft: float = Field(default=10.0, gt=0, description="first token of a stream, seconds")
    total: float = Field(default=120.0, gt=0, description="whole attempt, seconds")
    stall: float = Field(default=10.0, gt=0, description="gap between stream tokens, seconds")
    # after its first token a stream keeps this rate over every rate_window (else the next
    # tier answers or continues it; never on a chain's last tier); 0: off
    min_tokens_per_s: float = Field(default=1.0, ge=0, description="output events a second")
    rate_window: float = Field(default=5.0, gt=0, le=600, description="seconds")


class Circuit(Strict):
    failures: int = Field(default=5, ge=1, description="consecutive failures that open it")
    cooldown: float = Field(default=10.0, gt=0, description="seconds before a half-open probe")


class Health(Strict):
    enabled: bool = True
    interval: float = Field(default=5.0, gt=0, description="seconds between probes of a replica")
    timeout: float = Field(default=2.0, gt=0, description="a probe slower than this fails")
    path: str = Field(default="/health", pattern=r"^/")
    metrics_path: str | None = Field(
        default="/metrics", pattern=r"^/", description="SGLang Prometheus metrics; null: off"
    )


class StreamSettings(Strict):
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


class Price(Strict):
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


class Tier(Strict):
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
    context_window: int | None = Field(
        default=None,
        ge=1,
        description="tokens the engine holds, prompt and completion together; a request "
        "whose estimated prompt plus max_tokens exceeds it is not sent here; unset: what its "
        "engines' GET /v1/models reports (max_model_len), else unknown (always tried)",
    )
    max_output_tokens: int | None = Field(
        default=None,
        ge=1,
        description="the largest max_tokens (max_completion_tokens) this tier is asked for; a "
        "request asking more goes to a tier that allows it, and is a 400 naming the field "
        "where none does; unset: no cap but the context window",
    )
    timeouts: Timeouts = Timeouts()
    circuit: Circuit = Circuit()
    health: Health = Health()
    stream: StreamSettings = StreamSettings()
    continuation: Continuation = Field(
        default="continue_final_message",
        description="how this tier's engine continues an assistant text another tier began",
    )
    continuation_prompt: str | None = Field(
        default=None,
        min_length=1,
        max_length=2000,
        description="where this tier cannot continue an assistant text by prefix "
        "(`continuation: off`, a hosted model without assistant prefill, an engine that "
        "refused one), a user message asking it to go on with the text it is shown; "
        "null: such a tier restarts the answer and the client gets only what it has not seen",
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
        description="bounded-load affinity: a new prompt goes to its home replica unless that "
        "one carries more than (1 + this) x the mean load; a replica holding a prompt's "
        "prefix keeps it up to 2 x (1 + its KiB / 16) times that over the others' mean "
        "(`python -m evals routing` measures it)",
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
