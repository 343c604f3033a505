"""The data plane's small handlers (models, health, metrics, unknown paths) and its routes.

The completion handlers live in :mod:`gateway.server.completions`, the Responses API in
:mod:`gateway.server.responses_api`, Anthropic's Messages API in
:mod:`gateway.server.messages_api`, embeddings in :mod:`gateway.server.embeddings`.
"""

from __future__ import annotations

import hmac
from types import MappingProxyType

import orjson
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import SecretStr

from gateway.errors import GatewayError, MethodNotAllowed, ModelNotFound, NotFound, Unauthorized
from gateway.server import drain
from gateway.server.completions import chat_completions, completions
from gateway.server.embeddings import embeddings
from gateway.server.messages_api import count_tokens, messages
from gateway.server.replies import JSON, authorization, error_response, request_id
from gateway.server.responses_api import responses
from gateway.server.state import GATEWAY
from gateway.upstream.capabilities import all_capabilities

_KNOWN = MappingProxyType(
    {
        "/v1/chat/completions": "POST",
        "/v1/completions": "POST",
        "/v1/responses": "POST",
        "/v1/messages": "POST",
        "/v1/messages/count_tokens": "POST",
        "/v1/embeddings": "POST",
        "/v1/models": "GET, HEAD",
        "/healthz": "GET, HEAD",
        "/readyz": "GET, HEAD",
        "/metrics": "GET, HEAD",
    }
)


def _metrics_caller(request: web.Request) -> bool:
    """No metrics token set, or the request presents it."""
    token = request.app[GATEWAY].settings.metrics_token
    if token is None:
        return True
    return _presents(request, token)


def _operator(request: web.Request) -> bool:
    """The request presents the metrics token or the admin token (one that is set)."""
    s = request.app[GATEWAY].settings
    # both compared, whichever matches: the time taken says nothing of which is set
    return any([_presents(request, t) for t in (s.metrics_token, s.admin_token) if t])


def _presents(request: web.Request, token: SecretStr) -> bool:
    want = f"Bearer {token.get_secret_value()}".encode()
    return hmac.compare_digest(request.headers.get("Authorization", "").encode(), want)


async def metrics(request: web.Request) -> web.Response:
    gw = request.app[GATEWAY]
    if not _metrics_caller(request):
        err = Unauthorized("GET /metrics needs 'Authorization: Bearer <GATEWAY_METRICS_TOKEN>'.")
        return error_response(err, request_id(request))
    body = gw.prometheus()
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def _refused(request: web.Request) -> web.Response | None:
    """With keys required, the error for a request without a valid key (as every ``/v1``
    route answers it); None when the key is good or none is needed."""
    try:
        await request.app[GATEWAY].access.authenticate(authorization(request.headers))
    except GatewayError as e:
        return error_response(e, request_id(request))
    return None


async def models(request: web.Request) -> web.Response:
    """``GET /v1/models``: the models, for a valid key when keys are required."""
    if (refused := await _refused(request)) is not None:
        return refused
    return web.Response(body=request.app[GATEWAY].runtime.models_body, content_type=JSON)


async def model(request: web.Request) -> web.Response:
    """``GET /v1/models/{id}``: one entry of the list, or a 404 envelope."""
    if (refused := await _refused(request)) is not None:
        return refused
    name = request.match_info["model"]
    for entry in orjson.loads(request.app[GATEWAY].runtime.models_body)["data"]:
        if entry["id"] == name:
            return web.json_response(entry)
    err = ModelNotFound(f"The model '{name}' does not exist.", param="model")
    return error_response(err, request_id(request))


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    """Ready or not, to anyone (a load balancer's probe); the detail (tiers, models and the
    engines' addresses, the store, saturation) to a caller with the metrics or admin token."""
    if drain.draining(request.app):  # shutting down: new work goes elsewhere, at once
        return web.json_response({"ready": False, "draining": True}, status=503)
    gw = request.app[GATEWAY]
    pools = gw.runtime.pools
    health = pools.health()
    saturated = pools.saturated()
    ok = any(health.values())
    if ok and any(saturated.values()) and gw.settings.unready_when_saturated:
        ok = False  # requests wait here for engine slots: new work should go elsewhere
    status = 200 if ok else 503
    if not _operator(request):
        return web.json_response({"ready": ok}, status=status)
    body = {"ready": ok, "saturated": any(saturated.values()), "tiers": health}
    store = gw.access.store_state()
    if store is not None:  # degraded: still ready, serving what it knows (docs/store.md)
        body["store"] = store
    body["models"] = {name: p.models.state() for name, p in pools.by_tier.items()}
    body["saturated_tiers"] = saturated
    body["capabilities"] = all_capabilities(pools)  # what a hosted tier lacks, among others
    body["quality"] = gw.quality.state()  # tiers demoted per rule, and the windows judging them
    return web.json_response(body, status=status)


async def fallthrough(request: web.Request) -> web.Response:
    rid = request_id(request)
    method = _KNOWN.get(request.path)
    if method is None and request.path.startswith("/v1/models/"):
        method = "GET, HEAD"
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
    app.router.add_post("/v1/responses", responses)
    app.router.add_post("/v1/messages", messages)
    app.router.add_post("/v1/messages/count_tokens", count_tokens)
    app.router.add_post("/v1/embeddings", embeddings)
    app.router.add_get("/v1/models", models)  # and HEAD, as on every GET route
    app.router.add_get("/v1/models/{model:.+}", model)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    app.router.add_route("*", "/{tail:.*}", fallthrough)
