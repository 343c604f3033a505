"""The admin control plane as a FastAPI app, served on its own listener.

``create_admin_app(gw)`` serves the admin API of a running :class:`Gateway`: tenants,
keys, policies, usage, rules, pools, explain, audit, shadow. Every failure leaves as the
gateway's OpenAI-style error envelope (``{"error": {message, type, param, code}}``):
a bad body or parameter is a 400 ``invalid_value`` naming the field, bad JSON a 400
``invalid_json``. The OpenAPI document is generated (``/openapi.json``, also at
``/admin/openapi.json``) and browsable at ``/docs`` (Swagger UI served from a package,
:mod:`gateway.admin.apidocs`: no CDN); neither needs the token: they describe
the routes' shapes, never data, and the admin listener is private (127.0.0.1 by default;
docs/deploy.md). A 503 from a store that is down names no address (the log does).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.admin.apidocs import install as install_docs
from gateway.admin.deps import check_token
from gateway.admin.live import LiveWindow
from gateway.admin.routes import ROUTERS
from gateway.admin.session import Sessions
from gateway.admin.wire import error_response, json_response
from gateway.errors import (
    BadRequest,
    GatewayError,
    InvalidJSON,
    MethodNotAllowed,
    NotFound,
    PayloadTooLarge,
    ServiceUnavailable,
    StoreUnavailable,
)
from gateway.server.app import Gateway
from gateway.store.health import PATIENT

log = logging.getLogger("gateway.admin")


def create_admin_app(gw: Gateway) -> FastAPI:
    app = FastAPI(
        title="llm-gateway admin API",
        version="1",
        summary="Tenants, keys, policies, usage, rules, pools, explain, audit.",
        openapi_url="/openapi.json",
        docs_url=None,  # served from a package below (apidocs): no CDN
        redoc_url=None,
        separate_input_output_schemas=False,
        generate_unique_id_function=_operation_id,
        exception_handlers={
            GatewayError: _gateway_error,
            StoreUnavailable: _store_unavailable,
            RequestValidationError: _invalid,
            HTTPException: _http_error,
            Exception: _internal,
        },
    )
    app.state.gateway = gw
    app.state.max_body_bytes = gw.settings.max_body_bytes
    app.state.live = LiveWindow()
    app.state.sessions = Sessions(gw.store)  # console sessions ended by a logout
    app.add_middleware(_PatientStore)
    for router in ROUTERS:
        app.include_router(router)
    install_docs(app, app.title)

    @app.get("/admin/openapi.json", include_in_schema=False)
    async def admin_openapi() -> Response:
        return json_response(app.openapi())

    return app


class _PatientStore:
    """The admin API's store calls wait for a probe when the breaker is open (see
    :data:`~gateway.store.health.PATIENT`): an operator's call answers as soon as the store
    does, never a probe interval after the data plane."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        token = PATIENT.set(True)
        try:
            await self.app(scope, receive, send)
        finally:
            PATIENT.reset(token)


def _operation_id(route: APIRoute) -> str:
    return route.name  # the handler's name: create_tenant, list_tenants, ...


async def _gateway_error(request: Request, e: GatewayError) -> Response:
    return error_response(e)


async def _store_unavailable(request: Request, e: StoreUnavailable) -> Response:
    """A 503 that names no address; the details go to the log, once per distinct cause."""
    detail = str(e)
    if getattr(request.app.state, "store_logged", None) != detail:
        request.app.state.store_logged = detail
        log.warning("admin API: the store is unavailable: %s", detail)
    return error_response(ServiceUnavailable("The store is unavailable; try again shortly."))


async def _invalid(request: Request, e: RequestValidationError) -> Response:
    """A body or parameter that does not validate: 400, the first error, the field named."""
    first: dict[str, Any] = e.errors()[0]
    if first["type"] == "json_invalid":
        try:
            check_token(request)  # the token is checked before the body, as ever
        except GatewayError as denied:
            return error_response(denied)
        doc = e.body if isinstance(e.body, str) else ""
        why = json.JSONDecodeError(first.get("ctx", {}).get("error", ""), doc, first["loc"][-1])
        return error_response(InvalidJSON(f"The request body is not valid JSON: {why}."))
    loc = ".".join(str(x) for x in first["loc"][1:])  # past "body" / "query" / "path"
    return error_response(
        BadRequest(f"Invalid '{loc}': {first['msg']}.", param=loc or None, code="invalid_value")
    )


async def _http_error(request: Request, e: HTTPException) -> Response:
    """Starlette's own answers (no such path, wrong method, ...) in the error envelope."""
    path, headers = request.url.path, dict(e.headers or {})
    err: GatewayError
    if e.status_code == 404:
        err = NotFound(f"Unknown path {path}.")
    elif e.status_code == 405:
        allowed = headers.get("Allow") or headers.get("allow") or ""
        err = MethodNotAllowed(f"{request.method} is not allowed on {path}; use {allowed}.")
    elif e.status_code == 413:
        err = PayloadTooLarge(str(e.detail))
    else:
        err = BadRequest(str(e.detail), status=e.status_code)
    return error_response(err, headers)


async def _internal(request: Request, e: Exception) -> Response:
    # uvicorn logs the traceback: the error is raised again after this answer
    return error_response(GatewayError("The admin API failed; see the gateway's log."))
