"""The client-facing HTTP layer: OpenAI wire format in and out, SSE, the error envelope.

Thin on purpose: parse -> classify -> route -> dispatch, then write the answer with
the headers that explain it. Every error leaves through :func:`error_response`.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable

from aiohttp import web

from gateway.access import rate_headers
from gateway.app import GATEWAY, Gateway
from gateway.dispatch import Failure, Outcome
from gateway.errors import (
    GatewayError,
    MethodNotAllowed,
    NotFound,
    PayloadTooLarge,
    RateLimited,
    error_body,
)
from gateway.limits import Admission
from gateway.pools import AttemptError
from gateway.relay import StreamRelay
from gateway.request import ClientRequest, parse_chat, parse_completion
from gateway.router import RouteDecision
from gateway.tenants import Effective

H_TIER = "x-gateway-tier"
H_ROUTE = "x-gateway-route"
H_FALLBACK = "x-gateway-fallback"
H_OVERHEAD = "x-gateway-overhead-ms"
H_REQUEST_ID = "x-request-id"
_JSON = "application/json"
_KNOWN = {
    "/v1/chat/completions": "POST",
    "/v1/completions": "POST",
    "/v1/models": "GET",
    "/healthz": "GET",
    "/readyz": "GET",
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


async def _handle(
    request: web.Request, parse: Callable[[bytes], ClientRequest]
) -> web.StreamResponse:
    t0 = time.perf_counter()
    gw = request.app[GATEWAY]
    rid = _request_id(request)
    d: RouteDecision | None = None
    admitted: Effective | None = None
    try:
        eff = await gw.access.authenticate(request.headers.get("Authorization"))
        req = parse(await _read(request, gw))
        cls = gw.classifier.classify(req, request.headers)
        d = gw.router.decide(cls, gw.pools.health(), eff)
        adm = await gw.access.admit(eff, rid)
        admitted = eff
        deadline_at = time.monotonic() + d.deadline
        if req.stream:
            out = await gw.dispatcher.stream(req, d, deadline_at, req.affinity)
            return await _relay_stream(request, gw, req, out, d, rid, t0, deadline_at, eff, adm)
        out = await gw.dispatcher.complete(req, d, deadline_at, req.affinity)
    except GatewayError as e:
        extra = _explain(d, None, t0) if d else {}
        if isinstance(e, RateLimited):
            extra.update(e.headers)
        if admitted is not None:
            gw.spawn(gw.access.done(admitted, rid, "none", None, _short_reason(e)))
        return error_response(e, rid, extra)
    except AttemptError as e:  # the engine refused the request itself: relay its answer
        headers = {H_REQUEST_ID: rid, **(_explain(d, None, t0) if d else {})}
        if admitted is not None:
            gw.spawn(gw.access.done(admitted, rid, "none", None, None))
        return web.Response(
            status=e.status or 400, body=e.body, content_type=_JSON, headers=headers
        )
    headers = _explain(d, out, t0)
    headers[H_REQUEST_ID] = rid
    if eff.tenant_id is not None:
        headers.update(rate_headers(adm))
        gw.spawn(gw.access.done(eff, rid, out.tier, out.usage, _fallback_kind(out.failures)))
    return web.Response(body=out.body, content_type=_JSON, headers=headers)


def _fallback_kind(failures: list[Failure]) -> str | None:
    return failures[0].kind if failures else None


def _short_reason(e: GatewayError) -> str:
    return e.code or type(e).__name__


async def _relay_stream(
    request: web.Request,
    gw: Gateway,
    req: ClientRequest,
    out: Outcome,
    d: RouteDecision,
    rid: str,
    t0: float,
    deadline_at: float,
    eff: Effective,
    adm: Admission,
) -> web.StreamResponse:
    assert out.stream is not None
    headers = _explain(d, out, t0)
    headers[H_REQUEST_ID] = rid
    headers["Cache-Control"] = "no-cache"
    if eff.tenant_id is not None:
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
    try:
        with contextlib.suppress(ConnectionResetError):  # the client left; relay cleaned up
            await relay.run(resp)
    finally:
        if eff.tenant_id is not None:
            gw.spawn(
                gw.access.done(eff, rid, relay.tier, relay.usage(), _fallback_kind(relay.failures))
            )
    return resp


async def chat_completions(request: web.Request) -> web.StreamResponse:
    return await _handle(request, parse_chat)


async def completions(request: web.Request) -> web.StreamResponse:
    return await _handle(request, parse_completion)


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
    app.router.add_route("*", "/{tail:.*}", fallthrough)
