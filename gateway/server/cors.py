"""CORS for browser clients: off unless ``GATEWAY_CORS_ORIGINS`` names origins (``*``: any).

A preflight (``OPTIONS`` with ``Access-Control-Request-Method``) from an allowed origin is
answered here with 204; every answer to an allowed origin, streams included, carries
``Access-Control-Allow-Origin`` and exposes the gateway's explanation headers. A preflight
from another origin is a 403 envelope. With no origins configured nothing is installed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from gateway.errors import GatewayError
from gateway.headers import all_headers
from gateway.server.replies import error_response, request_id

_EXPOSE = ", ".join(all_headers())  # every header the gateway sets, from one list
_METHODS = "GET, HEAD, POST, OPTIONS"
_DEFAULT_HEADERS = "authorization, content-type, x-request-id, x-gateway-tier, x-gateway-task"


class OriginNotAllowed(GatewayError):
    status = 403
    type = "invalid_request_error"
    code = "cors_origin_not_allowed"


def install(app: web.Application, origins: frozenset[str]) -> None:
    """Add the preflight middleware and the response headers, when ``origins`` is not empty."""
    if not origins:
        return
    app.middlewares.append(_preflight(origins))
    app.on_response_prepare.append(_decorate(origins))


def _allowed(origins: frozenset[str], origin: str | None) -> bool:
    return origin is not None and ("*" in origins or origin.rstrip("/") in origins)


def _preflight(origins: frozenset[str]) -> Middleware:
    @web.middleware
    async def preflight(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.method != "OPTIONS" or "Access-Control-Request-Method" not in request.headers:
            return await handler(request)
        origin = request.headers.get("Origin")
        if not _allowed(origins, origin):
            msg = f"The origin {origin!r} may not call this gateway (GATEWAY_CORS_ORIGINS)."
            return error_response(OriginNotAllowed(msg), request_id(request))
        asked = request.headers.get("Access-Control-Request-Headers", _DEFAULT_HEADERS)
        return web.Response(
            status=204,
            headers={
                "Access-Control-Allow-Methods": _METHODS,
                "Access-Control-Allow-Headers": asked,
                "Access-Control-Max-Age": "600",
            },
        )

    return preflight


def _decorate(
    origins: frozenset[str],
) -> Callable[[web.Request, web.StreamResponse], Awaitable[None]]:
    async def decorate(request: web.Request, response: web.StreamResponse) -> None:
        origin = request.headers.get("Origin")
        if _allowed(origins, origin):
            assert origin is not None
            response.headers["Access-Control-Allow-Origin"] = "*" if "*" in origins else origin
            response.headers["Access-Control-Expose-Headers"] = _EXPOSE
            response.headers.add("Vary", "Origin")

    return decorate
