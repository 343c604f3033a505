"""Small pieces every data-plane handler shares: the request id, the error response, and
the :class:`Wire` an answer leaves through when the client speaks another API."""

from __future__ import annotations

import random
from typing import Protocol

from aiohttp import web

from gateway.dispatch.relay import Sink
from gateway.errors import GatewayError, error_body
from gateway.headers import H_REQUEST_ID

JSON = "application/json"
RID = web.RequestKey("rid", str)


def request_id(request: web.Request) -> str:
    """The request's id: the client's ``x-request-id`` when it is sane, else a new one. The
    outermost middleware sets it first thing (:func:`assign_request_id`)."""
    try:
        return request[RID]
    except KeyError:
        return assign_request_id(request)


def assign_request_id(request: web.Request) -> str:
    rid = request.headers.get(H_REQUEST_ID)
    if not (rid and len(rid) <= 128 and rid.isascii() and rid.isprintable()):
        rid = new_id("req_")
    request[RID] = rid
    return rid


def new_id(prefix: str) -> str:
    """A unique id: 96 random bits (the ``random`` module, reseeded in forked workers;
    ``os.urandom`` is a system call per id, and these ids are not secrets)."""
    return f"{prefix}{random.getrandbits(96):024x}"


def error_response(
    err: GatewayError, rid: str, extra: dict[str, str] | None = None
) -> web.Response:
    headers = {H_REQUEST_ID: rid, **(extra or {})}
    return web.Response(status=err.status, body=error_body(err), content_type=JSON, headers=headers)


class Wire(Protocol):
    """How answers leave when the client speaks another API than the engine (the Responses
    API over chat completions): the JSON answer and the stream, translated."""

    def answer(self, body: bytes) -> bytes: ...

    def sink(self, resp: web.StreamResponse) -> Sink: ...
