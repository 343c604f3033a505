"""``POST /v1/responses``: the Responses API, stream and not, over the chat pipeline.

The request is translated to a chat completions request
(:func:`gateway.server.responses_format.to_chat`) and served by the same path as
``/v1/chat/completions`` — authentication, classification, routing, admission, checks,
fallback, hedging, continuation — and its answer is translated back: a ``response``
object, or the Responses event stream (:class:`ResponsesSink`). Tiers whose engines
serve the Responses API (``responses_api: true``) get the client's own body instead,
and their answer is read as chat (:mod:`gateway.upstream.responses_events`), so the
checks and fallback act on it the same way.
"""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from gateway.dispatch.relay import Sink
from gateway.request.model import ClientRequest, decode_body, parse_chat
from gateway.server.completions import Endpoint, handle
from gateway.server.responses_format import to_chat, to_response
from gateway.server.responses_stream import ResponsesSink


class _ResponsesWire:
    """One request's translation both ways (it keeps the client's body for the answer)."""

    __slots__ = ("body",)

    def __init__(self) -> None:
        self.body: dict[str, Any] = {}

    def parse(self, raw: bytes) -> ClientRequest:
        self.body = decode_body(raw)
        req = parse_chat(orjson.dumps(to_chat(self.body)))
        req.native = self.body
        return req

    def answer(self, body: bytes) -> bytes:
        return to_response(body, self.body)

    def sink(self, resp: web.StreamResponse) -> Sink:
        return ResponsesSink(resp, self.body)


async def responses(request: web.Request) -> web.StreamResponse:
    wire = _ResponsesWire()
    return await handle(request, Endpoint(wire.parse, "responses", wire))
