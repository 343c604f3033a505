"""Small pieces every data-plane handler shares: the request id and the error response."""

from __future__ import annotations

import os

from aiohttp import web

from gateway.errors import GatewayError, error_body
from gateway.headers import H_REQUEST_ID

JSON = "application/json"
RID = web.RequestKey("rid", str)


def request_id(request: web.Request) -> str:
    """The client's ``x-request-id`` when it is sane, else a new one (kept on the request)."""
    if RID in request:
        return request[RID]
    rid = request.headers.get(H_REQUEST_ID)
    if not (rid and len(rid) <= 128 and rid.isascii() and rid.isprintable()):
        rid = "req_" + os.urandom(12).hex()
    request[RID] = rid
    return rid


def error_response(
    err: GatewayError, rid: str, extra: dict[str, str] | None = None
) -> web.Response:
    headers = {H_REQUEST_ID: rid, **(extra or {})}
    return web.Response(status=err.status, body=error_body(err), content_type=JSON, headers=headers)
