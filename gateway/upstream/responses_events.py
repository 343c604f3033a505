"""An engine's Responses API answer read as a chat completion stream.

Tiers with ``responses_api: true`` get the client's own ``POST /v1/responses`` body
(passed through, model replaced). So that the gateway's checks, hold-back, hedging and
fallback act on it exactly as on chat, the engine's answer is read through
:class:`ResponsesAsChat`: its Responses events (or, not streamed, its ``response``
object) become the equivalent chat completion chunks, and the client's Responses stream
is made from those again (:mod:`gateway.server.responses_stream`).

Mapped: text deltas -> ``content``; function calls -> ``tool_calls`` deltas; the end
(``response.completed`` / ``.incomplete``) -> a finish chunk (``stop``, ``tool_calls`` or
``length``), a usage chunk and ``[DONE]``; ``error`` / ``response.failed`` -> an error
event. Other events (reasoning, hosted tools) are not forwarded.
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.upstream.failures import BadBody, BadStream, StreamCut
from gateway.upstream.framing import SSEFramer
from gateway.upstream.transport import UpstreamStream, read_whole

RESPONSES_PATH = "/v1/responses"
_DONE = b"data: [DONE]\n\n"


def _chunk(head: dict[str, Any], delta: dict[str, Any], finish: str | None = None) -> bytes:
    doc = {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return b"data: " + orjson.dumps(doc) + b"\n\n"


def _usage(u: object) -> dict[str, int] | None:
    if not isinstance(u, dict):
        return None
    inp, out = int(u.get("input_tokens") or 0), int(u.get("output_tokens") or 0)
    return {"prompt_tokens": inp, "completion_tokens": out, "total_tokens": inp + out}


class _Translator:
    """Responses events in, chat chunk bytes out (one stream)."""

    def __init__(self) -> None:
        self.head: dict[str, Any] = {"id": "", "object": "chat.completion.chunk", "created": 0}
        self.calls: dict[object, int] = {}  # output item id / index -> tool call index
        self.n_calls = 0
        self.ended = False

    def event(self, ev: dict[str, Any]) -> bytes:
        kind = ev.get("type")
        if kind == "response.created":
            r = ev.get("response") or {}
            self.head.update(
                id=r.get("id", ""), created=r.get("created_at", 0), model=r.get("model")
            )
            return _chunk(self.head, {"role": "assistant", "content": ""})
        if kind == "response.output_text.delta":
            return _chunk(self.head, {"content": ev.get("delta", "")})
        if kind == "response.output_item.added":
            return self._call_added(ev.get("item") or {}, ev.get("output_index"))
        if kind == "response.function_call_arguments.delta":
            index = self.calls.get(ev.get("item_id"), self.calls.get(ev.get("output_index"), 0))
            call = {"index": index, "function": {"arguments": ev.get("delta", "")}}
            return _chunk(self.head, {"tool_calls": [call]})
        if kind in ("response.completed", "response.incomplete"):
            return self._end(ev.get("response") or {})
        if kind in ("error", "response.failed"):
            self.ended = True
            err = ev.get("error") or (ev.get("response") or {}).get("error") or ev
            msg = err.get("message", "the engine failed") if isinstance(err, dict) else str(err)
            return (
                b"data: " + orjson.dumps({"error": {"message": msg, "code": 500}}) + b"\n\n" + _DONE
            )
        return b""

    def _call_added(self, item: dict[str, Any], output_index: object) -> bytes:
        if item.get("type") != "function_call":
            return b""
        index, self.n_calls = self.n_calls, self.n_calls + 1
        self.calls[item.get("id")] = self.calls[output_index] = index
        fn = {"name": item.get("name", ""), "arguments": item.get("arguments", "")}
        call = {"index": index, "id": item.get("call_id"), "type": "function", "function": fn}
        return _chunk(self.head, {"tool_calls": [call]})

    def _end(self, r: dict[str, Any]) -> bytes:
        self.ended = True
        finish = "tool_calls" if self.n_calls else "stop"
        if r.get("status") == "incomplete":
            finish = "length"
        out = _chunk(self.head, {}, finish)
        usage = _usage(r.get("usage"))
        if usage is not None:
            out += b"data: " + orjson.dumps({**self.head, "choices": [], "usage": usage}) + b"\n\n"
        return out + _DONE


def _event(payload: bytes) -> dict[str, Any]:
    try:
        ev = orjson.loads(payload)
    except orjson.JSONDecodeError:
        raise BadStream("an event of the engine's stream is not JSON") from None
    if not isinstance(ev, dict):
        raise BadStream("an event of the engine's stream is not an object")
    return ev


def response_as_chat(body: bytes) -> bytes:
    """A whole ``response`` object as the equivalent chat completion (non-streamed)."""
    try:
        r = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise BadBody("the engine's answer is not JSON") from None
    if not isinstance(r, dict):
        raise BadBody("the engine's answer is not a response object")
    text, calls = "", []
    for item in r.get("output") or ():
        if item.get("type") == "message":
            text += "".join(
                p.get("text", "")
                for p in item.get("content") or ()
                if p.get("type") == "output_text"
            )
        elif item.get("type") == "function_call":
            fn = {"name": item.get("name", ""), "arguments": item.get("arguments", "")}
            calls.append({"id": item.get("call_id"), "type": "function", "function": fn})
    msg: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        msg["tool_calls"] = calls
    finish = "length" if r.get("status") == "incomplete" else ("tool_calls" if calls else "stop")
    chat = {
        "id": r.get("id", ""),
        "object": "chat.completion",
        "created": r.get("created_at", 0),
        "model": r.get("model"),
        "choices": [{"index": 0, "message": msg, "finish_reason": finish}],
        "usage": _usage(r.get("usage")),
    }
    return orjson.dumps(chat)


class ResponsesAsChat:
    """Wraps the engine's open answer to ``POST /v1/responses`` (see the module doc)."""

    __slots__ = ("_done", "_framer", "_inner", "_limit", "_stream", "_tr")

    def __init__(
        self,
        inner: UpstreamStream,
        stream: bool,
        max_event: int = 8 << 20,
        max_total: int = 64 << 20,
    ):
        self._inner = inner
        self._stream = stream
        self._framer = SSEFramer(max_event, max_total)  # the tier's limits, on every event
        self._limit = max_total
        self._tr = _Translator()
        self._done = False

    async def read(self) -> bytes:
        if not self._stream:
            return await self._read_whole()
        while True:
            chunk = await self._inner.read()
            if not chunk:
                if not self._tr.ended:
                    raise StreamCut("the engine's Responses stream ended early")
                return b""
            _, payloads = self._framer.feed(chunk)
            out = b"".join(self._tr.event(_event(p)) for p in payloads if p and p != b"[DONE]")
            if out:
                return out

    async def _read_whole(self) -> bytes:
        if self._done:
            return b""
        data = await read_whole(self._inner, self._limit)
        self._done = True
        return response_as_chat(data)

    def close(self) -> None:
        self._inner.close()

    def release(self) -> None:
        self._inner.release()
