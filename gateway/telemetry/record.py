"""What one request leaves for the metrics and the access log: a :class:`RequestRecord`.

Built once at the end of the request (:meth:`gateway.server.exchange.Exchange.record`),
appended to the recorder's batch, and read off the request's path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class AttemptRecord:
    """One failed attempt: its tier, its reason (``stall``, ``http_503``, ``check_repetition``
    ...: the ``reason`` and ``outcome`` labels), how long it took, the check that failed."""

    tier: str
    reason: str
    seconds: float = 0.0
    check: str | None = None


@dataclass(slots=True, kw_only=True)
class RequestRecord:
    request_id: str
    kind: str  # chat | completions
    status: int
    latency_s: float
    overhead_s: float
    tier: str = "none"
    task: str = "unknown"
    sla: str = "unknown"
    tenant: str | None = None
    stream: bool = False
    rule: str = ""
    ttft_s: float | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    failures: tuple[AttemptRecord, ...] = ()  # the failed attempts, in order
    ok_attempt_s: float | None = None
    error_code: str | None = None
    cost_usd: float | None = None
    arm: str = "none"
    queue_s: float = 0.0  # waited in the gateway's queue for a free engine slot
    cache: str | None = None  # "hit/exact", "miss", "bypass/no-cache"; None: no cache rule
    model: str = ""  # the model name the client sent
    served_model: str = ""  # the model the answering tier's engines were sent (its own name)
    checks_failed: str | None = None  # the check the delivered answer failed (the last tier)


def access_fields(r: RequestRecord) -> dict[str, Any]:
    """The access log's fields of a request (never its prompt or its key)."""
    out: dict[str, Any] = {
        "request_id": r.request_id,
        "status": r.status,
        "kind": r.kind,
        "stream": r.stream,
        "tier": r.tier,
        "task": r.task,
        "sla": r.sla,
        "rule": r.rule,
        "latency_ms": round(r.latency_s * 1000, 3),
        "overhead_ms": round(r.overhead_s * 1000, 3),
        "prompt_tokens": r.prompt_tokens,
        "completion_tokens": r.completion_tokens,
    }
    if r.model:
        out["model"] = r.model[:128]
    if r.served_model:
        out["served_model"] = r.served_model
    if r.tenant:
        out["tenant"] = r.tenant
    if r.arm != "none":
        out["arm"] = r.arm
    if r.ttft_s is not None:
        out["ttft_ms"] = round(r.ttft_s * 1000, 3)
    if r.failures:
        out["fallbacks"] = [f"{f.tier}:{f.reason}" for f in r.failures]
    if r.error_code:
        out["error"] = r.error_code
    if r.cost_usd is not None:
        out["cost_usd"] = round(r.cost_usd, 9)
    if r.queue_s:
        out["queue_ms"] = round(r.queue_s * 1000, 3)
    return out
