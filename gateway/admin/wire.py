"""How the admin API reads bodies and writes answers: the error envelope, and a route
class that keeps the old API's body rules.

The routes return their declared response models, which FastAPI validates and sends;
:func:`json_response` is for what has no model (the OpenAPI document). :class:`AdminRoute`
reads each body once, refuses it past the gateway's body limit (413), and for a route that
takes a JSON model reads an empty body as ``{}`` and the body as JSON whatever its
Content-Type says — as the aiohttp admin API did.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

import orjson
from fastapi import Request, Response
from fastapi.routing import APIRoute
from starlette.types import Scope

from gateway.errors import GatewayError, PayloadTooLarge, error_body

_JSON = "application/json"


class OrjsonResponse(Response):
    media_type = _JSON

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


def json_response(data: Any, status: int = 200) -> Response:
    return OrjsonResponse(data, status_code=status)


def error_response(e: GatewayError, headers: dict[str, str] | None = None) -> Response:
    return Response(error_body(e), status_code=e.status, media_type=_JSON, headers=headers)


class AdminRequest(Request):
    """A request whose body is read once, up to a limit; JSON is parsed with orjson."""

    async def load(self, limit: int, empty: bytes = b"") -> None:
        chunks: list[bytes] = []
        size = 0
        async for chunk in self.stream():
            size += len(chunk)
            if size > limit:
                raise PayloadTooLarge(f"The request body is larger than {limit} bytes.")
            chunks.append(chunk)
        self._body = b"".join(chunks) or empty  # starlette's own cache of the body

    async def json(self) -> Any:
        # orjson.JSONDecodeError is a json.JSONDecodeError: FastAPI reports it as json_invalid
        return orjson.loads(await self.body())


def _as_json(scope: Scope) -> Scope:
    headers = [(k, v) for k, v in scope["headers"] if k != b"content-type"]
    return {**scope, "headers": [*headers, (b"content-type", _JSON.encode())]}


class AdminRoute(APIRoute):
    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        takes_json = self.body_field is not None

        async def route(request: Request) -> Response:
            scope = _as_json(request.scope) if takes_json else request.scope
            req = AdminRequest(scope, request.receive)
            await req.load(request.app.state.max_body_bytes, b"{}" if takes_json else b"")
            return await handler(req)

        return route
