"""One client request's record, filled in as it becomes known: what the response headers,
the telemetry record and the span say about it."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import trace

from gateway.cache.lookup import Lookup
from gateway.dispatch.outcome import Trail, describe_fallback
from gateway.headers import (
    H_BACKOFF,
    H_CHECKS_FAILED,
    H_CONTINUED,
    H_COST,
    H_FALLBACK,
    H_FINISH,
    H_HEDGE,
    H_OVERHEAD,
    H_QUEUE,
    H_ROUTE,
    H_TIER,
)
from gateway.routing.classify import quote
from gateway.routing.router import RouteDecision
from gateway.telemetry.record import AttemptRecord, RequestRecord
from gateway.telemetry.recorder import (
    A_SLA,
    A_STATUS,
    A_TASK,
    A_TENANT,
    A_TIER,
    S_IN_TOKENS,
    S_OPERATION,
    S_OUT_TOKENS,
    S_REQ_MODEL,
)
from gateway.tenancy.limits import Admission
from gateway.tenancy.tenants import Effective


@dataclass(slots=True)
class Exchange:
    rid: str
    kind: str
    t0: float = field(default_factory=time.perf_counter)
    d: RouteDecision | None = None
    eff: Effective | None = None
    trail: Trail | None = None
    status: int = 200
    error: str | None = None
    stream: bool = False
    tier: str = "none"
    usage: dict[str, Any] | None = None
    first_byte: float | None = None
    waited_at_first_byte: float = 0.0  # a stream's overhead ends at its first byte
    admission: Admission | None = None
    slot: str | None = None  # the admission's in-flight member (released at the end)
    cost: float | None = None  # USD, at the answering tier's price (None: it has none)
    cache: Lookup | None = None  # the response cache's part (None: the route keeps none)
    models: Mapping[str, str] = field(default_factory=dict)  # tier -> the model it is sent

    def headers(self) -> dict[str, str]:
        """x-gateway-route, -tier, -fallback, -overhead-ms, -backoff-ms, -checks-failed."""
        if self.d is None:
            return {}
        h = {H_ROUTE: self.d.route_header}
        if self.cache is not None:
            h.update(self.cache.headers())
        t = self.trail
        if t is None:
            return h
        h[H_TIER] = self.tier
        served = self.models.get(self.tier)
        if self.d.cls.alias is not None and served:  # a name the rules do not know: who answered
            h[H_ROUTE] += f"; served by {quote(served[:64])}"
        fb = describe_fallback(t.failures, self.tier)
        if fb:
            h[H_FALLBACK] = fb
        h[H_OVERHEAD] = f"{max(self._overhead(time.perf_counter()), 0.0) * 1000:.3f}"
        if t.backoff_s:
            h[H_BACKOFF] = f"{t.backoff_s * 1000:.1f}"
        if t.queue_s:
            h[H_QUEUE] = f"{t.queue_s * 1000:.1f}"
        if t.hedge:
            h[H_HEDGE] = t.hedge
        if t.checks_failed:
            h[H_CHECKS_FAILED] = t.checks_failed
        if t.continued:
            h[H_CONTINUED] = t.continued
        if t.finish:
            h[H_FINISH] = t.finish
        if self.cost is not None:
            h[H_COST] = usd(self.cost)
        return h

    def _waited(self) -> float:
        t = self.trail
        return (t.upstream_s + t.backoff_s + t.queue_s) if t is not None else 0.0

    def mark_first_byte(self) -> None:
        """The stream's head went out: what it waited so far is final for its overhead
        (a continuation later waits on an engine too, after the first byte)."""
        self.first_byte = time.perf_counter()
        self.waited_at_first_byte = self._waited()

    def _overhead(self, until: float) -> float:
        if self.stream and self.first_byte is not None and until >= self.first_byte:
            return self.first_byte - self.t0 - self.waited_at_first_byte
        return until - self.t0 - self._waited()

    def record(self) -> RequestRecord:
        now = time.perf_counter()
        d, t = self.d, self.trail
        # a stream's live phase is the engine's pace: its overhead ends at the first byte
        end = self.first_byte if self.stream and self.first_byte is not None else now
        u = self.usage or {}
        fails = t.failures if t else []
        return RequestRecord(
            request_id=self.rid,
            kind=self.kind,
            status=self.status,
            latency_s=now - self.t0,
            overhead_s=self._overhead(end),
            tier=self.tier,
            task=d.cls.task if d else "unknown",
            sla=d.cls.sla if d else "unknown",
            tenant=self.eff.tenant_id if self.eff else None,
            stream=self.stream,
            rule=d.rule if d else "",
            ttft_s=(self.first_byte - self.t0) if self.first_byte is not None else None,
            prompt_tokens=int(u.get("prompt_tokens") or 0),
            completion_tokens=int(u.get("completion_tokens") or 0),
            failures=tuple(AttemptRecord(f.tier, f.reason, f.seconds, f.check) for f in fails),
            ok_attempt_s=t.ok_attempt_s if t else None,
            error_code=self.error,
            cost_usd=self.cost,
            arm=(d.arm or "none") if d else "none",
            queue_s=t.queue_s if t else 0.0,
            cache=self.cache.result if self.cache is not None else None,
            model=d.cls.model if d else "",
            served_model=self.models.get(self.tier, ""),
            checks_failed=t.checks_failed if t else None,
        )

    def annotate(self, span: trace.Span) -> None:
        attrs: dict[str, Any] = {S_OPERATION: self.kind, A_TIER: self.tier, A_STATUS: self.status}
        if self.d is not None:
            attrs[S_REQ_MODEL] = self.d.cls.model
            attrs[A_TASK] = self.d.cls.task
            attrs[A_SLA] = self.d.cls.sla
            attrs["gateway.rule"] = self.d.rule
            if self.d.arm is not None:
                attrs["gateway.arm"] = self.d.arm
        if self.eff is not None and self.eff.tenant_id:
            attrs[A_TENANT] = self.eff.tenant_id
        if self.trail is not None and self.trail.failures:
            attrs["gateway.fallback_reason"] = self.trail.failures[0].reason
        if self.trail is not None and self.trail.backoff_s:
            attrs["gateway.backoff_ms"] = self.trail.backoff_s * 1000
        if self.trail is not None and self.trail.hedge:
            attrs["gateway.hedge"] = self.trail.hedge
        if self.usage:
            attrs[S_IN_TOKENS] = int(self.usage.get("prompt_tokens") or 0)
            attrs[S_OUT_TOKENS] = int(self.usage.get("completion_tokens") or 0)
        span.set_attributes(attrs)


def usd(cost: float) -> str:
    """A cost as the headers and the stream comment write it: plain decimal, 9 places."""
    return f"{cost:.9f}"
