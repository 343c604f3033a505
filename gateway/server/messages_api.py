"""``POST /v1/messages``: Anthropic's Messages API, stream and not, over the chat pipeline.

The request is translated to a chat completions request
(:func:`gateway.server.messages_format.to_chat`) and served by the same path as
``/v1/chat/completions`` — the tenant's key (``x-api-key`` or ``Authorization``),
classification, routing, admission, budgets, the cache, checks, hedging, fallback and
continuation — and its answer is translated back: a ``message`` object, or the Messages
event stream (:class:`~gateway.server.messages_stream.MessagesSink`). Errors leave in
Anthropic's shape (the data plane's middleware rewrites every error on these paths:
:func:`gateway.server.messages_format.error_from`). The ``anthropic-version`` and
``anthropic-beta`` headers are accepted and change nothing. The tiers stay chat engines: a
hosted Anthropic tier is reached through LiteLLM's chat interface like any hosted tier.

``POST /v1/messages/count_tokens`` answers ``{"input_tokens": N}``: the estimate the router
compares with the tiers' context windows (about 4 characters a token, over the system
prompt, the messages' text and tool results, and the tool definitions as JSON).
"""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from gateway.dispatch.relay import Sink
from gateway.errors import GatewayError, InvalidField
from gateway.request.model import ClientRequest, decode_body, parse_chat, require_str
from gateway.server.completions import Endpoint, handle, read_body
from gateway.server.messages_format import to_chat, to_message
from gateway.server.messages_stream import MessagesSink
from gateway.server.replies import JSON, authorization, error_response, request_id
from gateway.server.state import GATEWAY

# the chat fields whose errors name what the client sent under another name
_PARAMS = (("stop", "stop_sequences"), ("user", "metadata.user_id"))


class _MessagesWire:
    """One request's translation both ways (it keeps the client's body for the answer)."""

    __slots__ = ("body", "estimate")

    def __init__(self) -> None:
        self.body: dict[str, Any] = {}
        self.estimate = 0

    def parse(self, raw: bytes) -> ClientRequest:
        self.body = decode_body(raw)
        req = _parsed(to_chat(self.body))
        self.estimate = estimate(req)
        return req

    def answer(self, body: bytes) -> bytes:
        return to_message(body, self.body)

    def sink(self, resp: web.StreamResponse) -> Sink:
        return MessagesSink(resp, self.body, self.estimate)


def _parsed(chat: dict[str, Any]) -> ClientRequest:
    try:
        return parse_chat(orjson.dumps(chat))
    except InvalidField as e:
        for ours, theirs in _PARAMS:
            if e.param == ours:
                e.param, e.message = theirs, e.message.replace(f"'{ours}", f"'{theirs}")
        raise


def estimate(req: ClientRequest) -> int:
    """Input tokens, as the gateway estimates them: its prompt estimate (about 4 characters a
    token) with the tool definitions, as JSON, on top."""
    tools = req.body.get("tools")
    return req.prompt_tokens + (len(orjson.dumps(tools)) // 4 if tools else 0)


async def messages(request: web.Request) -> web.StreamResponse:
    wire = _MessagesWire()
    return await handle(request, Endpoint(wire.parse, "messages", wire))


async def count_tokens(request: web.Request) -> web.Response:
    """``POST /v1/messages/count_tokens``: the estimate, for a valid key."""
    gw = request.app[GATEWAY]
    try:
        await gw.access.authenticate(authorization(request.headers))
        body = decode_body(await read_body(request, gw.settings))
        require_str(body, "model")
        req = _parsed({**to_chat(body, need_max=False), "stream": False})
    except GatewayError as e:
        return error_response(e, request_id(request))
    return web.Response(body=orjson.dumps({"input_tokens": estimate(req)}), content_type=JSON)
