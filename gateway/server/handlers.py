"""The data plane's small handlers (models, health, metrics, unknown paths) and its routes.

The completion handlers live in :mod:`gateway.server.completions`.
"""

from __future__ import annotations

import hmac
from types import MappingProxyType

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from gateway.errors import MethodNotAllowed, NotFound, Unauthorized
from gateway.server.completions import chat_completions, completions
from gateway.server.responses import JSON, error_response, request_id
from gateway.server.state import GATEWAY

_KNOWN = MappingProxyType(
    {
        "/v1/chat/completions": "POST",
        "/v1/completions": "POST",
        "/v1/models": "GET",
        "/healthz": "GET",
        "/readyz": "GET",
        "/metrics": "GET",
    }
)


async def metrics(request: web.Request) -> web.Response:
    gw = request.app[GATEWAY]
    token = gw.settings.metrics_token
    if token is not None:
        want = f"Bearer {token.get_secret_value()}".encode()
        got = request.headers.get("Authorization", "").encode()
        if not hmac.compare_digest(got, want):
            err = Unauthorized(
                "GET /metrics needs 'Authorization: Bearer <GATEWAY_METRICS_TOKEN>'."
            )
            return error_response(err, request_id(request))
    body = gw.prometheus()
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def models(request: web.Request) -> web.Response:
    return web.Response(body=request.app[GATEWAY].runtime.models_body, content_type=JSON)


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    health = request.app[GATEWAY].runtime.pools.health()
    ok = any(health.values())
    return web.json_response({"ready": ok, "tiers": health}, status=200 if ok else 503)


async def fallthrough(request: web.Request) -> web.Response:
    rid = request_id(request)
    method = _KNOWN.get(request.path)
    if method is not None:
        return error_response(
            MethodNotAllowed(f"{request.method} is not allowed on {request.path}; use {method}."),
            rid,
            {"Allow": method},
        )
    if request.path == "/admin" or request.path.startswith("/admin/"):
        s = request.app[GATEWAY].settings
        return error_response(
            NotFound(
                f"The admin API is served on its own listener ({s.admin_host}:{s.admin_port}), "
                "not on this port."
            ),
            rid,
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
