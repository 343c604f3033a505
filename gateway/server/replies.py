"""Small pieces every data-plane handler shares: the request id, the API key, the error
response (an engine's refusal too), and the :class:`Wire` an answer leaves through when the
client speaks another API."""

from __future__ import annotations

import random
from types import MappingProxyType
from typing import Protocol

from aiohttp import web
from multidict import CIMultiDictProxy

from gateway.dispatch.relay import Sink
from gateway.errors import GatewayError, error_body
from gateway.headers import H_REQUEST_ID
from gateway.upstream.failures import ClientRejected, ContextExceeded
from gateway.upstream.refusals import refusal

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


def authorization(headers: CIMultiDictProxy[str]) -> str | None:
    """The tenant's key as ``Authorization`` carries it: that header, else Anthropic's
    ``x-api-key`` (its SDKs and Claude Code send the key there)."""
    auth = headers.get("Authorization")
    if auth is None and (key := headers.get("x-api-key")):
        return f"Bearer {key}"
    return auth


_TYPES = frozenset({"invalid_request_error", "authentication_error", "permission_error"})
_BY_STATUS = MappingProxyType({401: "authentication_error", 403: "permission_error"})


def engine_error(e: ClientRejected) -> GatewayError:
    """An engine's refusal of the request itself, as the gateway's own error: the engine's
    status and message kept, in OpenAI's envelope (any client format is made from it)."""
    said = refusal(e.status, e.body)
    err = GatewayError(said.message, param=said.param, status=e.status)
    kind = said.kind if said.kind in _TYPES else None
    err.type = kind or _BY_STATUS.get(e.status, "invalid_request_error")
    err.code = said.code or ("context_length_exceeded" if isinstance(e, ContextExceeded) else None)
    return err
