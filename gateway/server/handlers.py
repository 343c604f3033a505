"""The client-facing HTTP layer: OpenAI wire format in and out, SSE, the error envelope.

Thin on purpose: parse -> classify -> route -> dispatch, then write the answer with
the headers that explain it. Every error leaves through :func:`error_response`.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from typing import Any

import orjson
from aiohttp import web
from opentelemetry import trace
from prometheus_client import CONTENT_TYPE_LATEST

from gateway.core.request import ClientRequest, parse_chat, parse_completion
from gateway.core.router import RouteDecision
from gateway.dispatch.attempts import Failure, Outcome
from gateway.dispatch.relay import StreamRelay
from gateway.errors import (
    GatewayError,
    MethodNotAllowed,
    NotFound,
    PayloadTooLarge,
    RateLimited,
    error_body,
)
from gateway.headers import H_FALLBACK, H_OVERHEAD, H_REQUEST_ID, H_ROUTE, H_TIER
from gateway.ops.shadow import answer_text
from gateway.ops.telemetry import (
    A_SLA,
    A_STATUS,
    A_TASK,
    A_TENANT,
    A_TIER,
    S_IN_TOKENS,
    S_OPERATION,
    S_OUT_TOKENS,
    S_REQ_MODEL,
    RequestRecord,
)
from gateway.server.app import GATEWAY, Gateway
from gateway.tenancy.access import rate_headers
from gateway.tenancy.limits import Admission
from gateway.tenancy.tenants import Effective
from gateway.upstream.pools import AttemptError

_JSON = "application/json"
_KNOWN = {
    "/v1/chat/completions": "POST",
    "/v1/completions": "POST",
    "/v1/models": "GET",
    "/healthz": "GET",
    "/readyz": "GET",
    "/metrics": "GET",
}


def _request_id(request: web.Request) -> str:
    rid = request.headers.get(H_REQUEST_ID)
    if rid and len(rid) <= 128 and rid.isascii():
        return rid
    return "req_" + os.urandom(12).hex()


def error_response(
    err: GatewayError, rid: str, extra: dict[str, str] | None = None
) -> web.Response:
    headers = {H_REQUEST_ID: rid, **(extra or {})}
    return web.Response(
        status=err.status, body=error_body(err), content_type=_JSON, headers=headers
    )


def _explain(d: RouteDecision, out: Outcome | None, t0: float) -> dict[str, str]:
    h = {H_ROUTE: d.route_header}
    if out is not None:
        h[H_TIER] = out.tier
        fb = out.fallback
        if fb:
            h[H_FALLBACK] = fb
        overhead = (time.perf_counter() - t0 - out.upstream_s) * 1000
        h[H_OVERHEAD] = f"{max(overhead, 0.0):.3f}"
    return h


async def _read(request: web.Request, gw: Gateway) -> bytes:
    limit = gw.settings.max_body_bytes
    if request.content_length is not None and request.content_length > limit:
        raise PayloadTooLarge(
            f"The request body is {request.content_length} bytes; the limit is {limit} bytes."
        )
    try:
        return await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise PayloadTooLarge(f"The request body is over the limit of {limit} bytes.") from None


class _Trace:
    """What one request's telemetry record needs, filled in as it becomes known."""

    __slots__ = (
        "d",
        "eff",
        "error",
        "failures",
        "first_byte",
        "out",
        "status",
        "stream",
        "tier",
        "usage",
    )

    def __init__(self) -> None:
        self.d: RouteDecision | None = None
        self.eff: Effective | None = None
        self.out: Outcome | None = None
        self.status = 200
        self.error: str | None = None
        self.stream = False
        self.tier = "none"
        self.usage: dict[str, Any] | None = None
        self.first_byte: float | None = None
        self.failures: list[Failure] | None = None  # the relay's, when it added to them

    def record(self, rid: str, kind: str, t0: float) -> RequestRecord:
        now = time.perf_counter()
        out, d = self.out, self.d
        upstream = out.upstream_s if out else 0.0
        if self.stream and self.first_byte is not None:
            overhead = self.first_byte - t0 - upstream  # the live phase is the engine's pace
        else:
            overhead = now - t0 - upstream
        u = self.usage or {}
        return RequestRecord(
            rid,
            kind,
            self.status,
            now - t0,
            overhead,
            self.tier,
            d.cls.task if d else "unknown",
            d.cls.sla if d else "unknown",
            self.eff.tenant_id if self.eff else None,
            self.stream,
            d.rule if d else "",
            (self.first_byte - t0) if self.first_byte is not None else None,
            int(u.get("prompt_tokens") or 0),
            int(u.get("completion_tokens") or 0),
            [(f.tier, f.kind, f.seconds) for f in self.failures or (out.failures if out else [])],
            out.ok_attempt_s if out else None,
            self.error,
        )


async def _handle(
    request: web.Request, parse: Callable[[bytes], ClientRequest], kind: str
) -> web.StreamResponse:
    t0 = time.perf_counter()
    gw = request.app[GATEWAY]
    rid = _request_id(request)
    tr = _Trace()
    with gw.telemetry.span(kind, {"gateway.request_id": rid}, trace.SpanKind.SERVER) as span:
        try:
            return await _serve(request, gw, parse, rid, t0, tr)
        finally:
            gw.telemetry.record(tr.record(rid, kind, t0))
            if gw.telemetry.tracing:
                _span_attributes(span, tr, kind)


def _span_attributes(span: trace.Span, tr: _Trace, kind: str) -> None:
    attrs: dict[str, Any] = {S_OPERATION: kind, A_TIER: tr.tier, A_STATUS: tr.status}
    if tr.d is not None:
        attrs.update(
            {
                S_REQ_MODEL: tr.d.cls.model,
                A_TASK: tr.d.cls.task,
                A_SLA: tr.d.cls.sla,
                "gateway.rule": tr.d.rule,
            }
        )
    if tr.eff is not None and tr.eff.tenant_id:
        attrs[A_TENANT] = tr.eff.tenant_id
    failures = tr.failures or (tr.out.failures if tr.out else [])
    if failures:
        attrs["gateway.fallback_reason"] = failures[0].kind
    if tr.usage:
        attrs[S_IN_TOKENS] = int(tr.usage.get("prompt_tokens") or 0)
        attrs[S_OUT_TOKENS] = int(tr.usage.get("completion_tokens") or 0)
    span.set_attributes(attrs)


async def _serve(
    request: web.Request,
    gw: Gateway,
    parse: Callable[[bytes], ClientRequest],
    rid: str,
    t0: float,
    tr: _Trace,
) -> web.StreamResponse:
    admitted = False
    try:
        eff = tr.eff = await gw.access.authenticate(request.headers.get("Authorization"))
        req = parse(await _read(request, gw))
        cls = gw.classifier.classify(req, request.headers)
        d = tr.d = gw.router.decide(cls, gw.pools.health(), eff)
        adm = await gw.access.admit(eff, rid)
        admitted = True
        deadline_at = time.monotonic() + d.deadline
        if req.stream:
            tr.stream = True
            out = tr.out = await gw.dispatcher.stream(req, d, deadline_at, req.affinity)
            return await _relay_stream(request, gw, req, out, d, rid, t0, deadline_at, adm, tr)
        out = tr.out = await gw.dispatcher.complete(req, d, deadline_at, req.affinity)
    except GatewayError as e:
        tr.status, tr.error = e.status, e.code
        extra = _explain(tr.d, None, t0) if tr.d else {}
        if isinstance(e, RateLimited):
            extra.update(e.headers)
        if admitted:
            _account(gw, tr.eff, rid, "none", None, e.code)
        return error_response(e, rid, extra)
    except AttemptError as e:  # the engine refused the request itself: relay its answer
        tr.status, tr.error = e.status or 400, e.kind
        headers = {H_REQUEST_ID: rid, **(_explain(tr.d, None, t0) if tr.d else {})}
        if admitted:
            _account(gw, tr.eff, rid, "none", None, None)
        return web.Response(
            status=e.status or 400, body=e.body, content_type=_JSON, headers=headers
        )
    tr.tier, tr.usage = out.tier, out.usage
    _maybe_shadow(gw, req, d, eff, out.tier, lambda: answer_text(req.kind, orjson.loads(out.body)))
    headers = _explain(d, out, t0)
    headers[H_REQUEST_ID] = rid
    if eff.tenant_id is not None:
        headers.update(rate_headers(adm))
    _account(gw, eff, rid, out.tier, out.usage, _fallback_kind(out.failures))
    return web.Response(body=out.body, content_type=_JSON, headers=headers)


def _maybe_shadow(
    gw: Gateway,
    req: ClientRequest,
    d: RouteDecision,
    eff: Effective,
    tier: str,
    text: Callable[[], str],
) -> None:
    against = gw.shadow.wanted(eff.policy.shadow_rate, d, tier)
    if against is not None:
        body = dict(req.body)
        gw.spawn(gw.shadow.compare(req, body, d, tier, text(), against, eff.tenant_id))


def _account(
    gw: Gateway,
    eff: Effective | None,
    rid: str,
    tier: str,
    usage: dict[str, Any] | None,
    reason: str | None,
) -> None:
    """Free the concurrency slot and count the usage, after the answer (tenants only)."""
    if eff is not None and eff.tenant_id is not None:
        gw.spawn(gw.access.done(eff, rid, tier, usage, reason))


def _fallback_kind(failures: list[Failure]) -> str | None:
    return failures[0].kind if failures else None


async def _relay_stream(
    request: web.Request,
    gw: Gateway,
    req: ClientRequest,
    out: Outcome,
    d: RouteDecision,
    rid: str,
    t0: float,
    deadline_at: float,
    adm: Admission,
    tr: _Trace,
) -> web.StreamResponse:
    assert out.stream is not None
    eff = tr.eff
    headers = _explain(d, out, t0)
    headers[H_REQUEST_ID] = rid
    headers["Cache-Control"] = "no-cache"
    if eff is not None and eff.tenant_id is not None:
        headers.update(rate_headers(adm))
    resp = web.StreamResponse(headers=headers)
    resp.content_type = "text/event-stream"
    relay = StreamRelay(gw.dispatcher, req, d, out, deadline_at)
    try:
        await resp.prepare(request)
    except BaseException:
        out.stream.resp.close()
        out.stream.finish(ok=True)
        raise
    tr.first_byte = time.perf_counter()
    try:
        with contextlib.suppress(ConnectionResetError):  # the client left; relay cleaned up
            await relay.run(resp)
    finally:
        tr.tier, tr.usage, tr.failures = relay.tier, relay.usage(), relay.failures
        if relay.broken:
            tr.error = "stream_broken"
        elif eff is not None:
            _maybe_shadow(gw, req, d, eff, relay.tier, out.stream.state.text)
        _account(gw, eff, rid, relay.tier, tr.usage, _fallback_kind(relay.failures))
    return resp


async def chat_completions(request: web.Request) -> web.StreamResponse:
    return await _handle(request, parse_chat, "chat")


async def completions(request: web.Request) -> web.StreamResponse:
    return await _handle(request, parse_completion, "text_completion")


async def metrics(request: web.Request) -> web.Response:
    body = request.app[GATEWAY].telemetry.prometheus()
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def models(request: web.Request) -> web.Response:
    return web.Response(body=request.app[GATEWAY].models_body, content_type=_JSON)


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    health = request.app[GATEWAY].pools.health()
    ok = any(health.values())
    return web.json_response({"ready": ok, "tiers": health}, status=200 if ok else 503)


async def fallthrough(request: web.Request) -> web.Response:
    rid = _request_id(request)
    method = _KNOWN.get(request.path)
    if method is not None:
        return error_response(
            MethodNotAllowed(f"{request.method} is not allowed on {request.path}; use {method}."),
            rid,
            {"Allow": method},
        )
    return error_response(NotFound(f"Unknown path {request.path}."), rid)


def add_routes(app: web.Application) -> None:
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_post("/v1/completions", completions)
    app.router.add_get("/v1/models", models, allow_head=False)
    app.router.add_get("/healthz", healthz, allow_head=False)
    app.router.add_get("/readyz", readyz, allow_head=False)
    app.router.add_get("/metrics", metrics, allow_head=False)
    app.router.add_route("*", "/{tail:.*}", fallthrough)
