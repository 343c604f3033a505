"""A Messages API event stream made from the gateway's chat completion stream.

:class:`MessagesSink` reads what the stream relay writes (an
:class:`~gateway.server.event_sink.EventSink`), so the client's stream has everything the
chat stream has: hold-back, live checks, hedging, a continuation on another tier spliced
in (one clean stream: the client never sees the break). Events, as Anthropic sends them:
``message_start``, ``ping``; per text or tool call ``content_block_start``,
``content_block_delta`` (``text_delta``, ``input_json_delta``), ``content_block_stop``;
then ``message_delta`` (``stop_reason``, ``stop_sequence``, usage) and ``message_stop``.
A chat error event (a break no tier could finish) becomes an ``error`` event, and the
stream ends without ``message_stop``. Comments pass through.
"""

from __future__ import annotations

from typing import Any

from gateway.server.event_sink import EventSink, Sink
from gateway.server.messages_format import (
    message,
    new_id,
    stop_reason,
    stream_error,
    usage,
)


class MessagesSink(EventSink):
    def __init__(self, out: Sink, req: dict[str, Any], input_estimate: int):
        super().__init__(out)
        self._req = req
        self._input = input_estimate  # message_start's input_tokens (the engine's come last)
        self._id = new_id("msg")
        self._started = False
        self._open: int | None = None  # the content block being written
        self._blocks = 0
        self._text: int | None = None  # the text block, while it is open
        self._calls: dict[int, int] = {}  # chat tool-call index -> content block index
        self._chars = 0
        self._finish: object = None
        self._matched: object = None
        self._usage: object = None
        self._failed = False

    def _start(self, model: object) -> None:
        if self._started:
            return
        self._started = True
        u = usage({"prompt_tokens": self._input})
        msg = message(self._id, model or self._req.get("model"), usage=u)
        self.emit("message_start", {"type": "message_start", "message": msg})
        self.emit("ping", {"type": "ping"})

    def chunk(self, obj: dict[str, Any]) -> None:
        if self._failed:
            return
        if "error" in obj:
            self._start(None)
            self._close()
            self._failed = True
            self.emit("error", stream_error(obj["error"]))
            return
        self._start(obj.get("model"))
        if obj.get("usage"):
            self._usage = obj["usage"]
        for choice in obj.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue  # one message: n > 1 has no Messages equivalent
            delta = choice.get("delta") or {}
            if delta.get("content"):
                self._text_delta(delta["content"])
            for call in delta.get("tool_calls") or ():
                self._call_delta(call)
            if choice.get("finish_reason"):
                self._finish = choice["finish_reason"]
                self._matched = choice.get("matched_stop", choice.get("stop_reason"))

    def _begin(self, block: dict[str, Any]) -> int:
        self._close()
        index, self._blocks = self._blocks, self._blocks + 1
        doc = {"type": "content_block_start", "index": index, "content_block": block}
        self.emit("content_block_start", doc)
        self._open = index
        return index

    def _close(self) -> None:
        if self._open is not None:
            self.emit("content_block_stop", {"type": "content_block_stop", "index": self._open})
            self._open = self._text = None

    def _delta(self, index: int, delta: dict[str, Any]) -> None:
        doc = {"type": "content_block_delta", "index": index, "delta": delta}
        self.emit("content_block_delta", doc)

    def _text_delta(self, text: str) -> None:
        if self._text is None:
            self._text = self._begin({"type": "text", "text": ""})
        self._chars += len(text)
        self._delta(self._text, {"type": "text_delta", "text": text})

    def _call_delta(self, call: dict[str, Any]) -> None:
        fn = call.get("function") or {}
        k = call.get("index", 0)
        if k not in self._calls:
            block: dict[str, Any] = {
                "type": "tool_use",
                "id": call.get("id") or new_id("toolu"),
                "name": fn.get("name") or "",
                "input": {},
            }
            self._calls[k] = self._begin(block)
        args = fn.get("arguments")
        if args:
            self._chars += len(args)
            self._delta(self._calls[k], {"type": "input_json_delta", "partial_json": args})

    def end(self) -> None:
        if self._failed:
            return
        self._start(None)
        self._close()
        reason, seq = stop_reason(
            self._finish, self._matched, self._req.get("stop_sequences"), bool(self._calls)
        )
        u = usage(self._usage, self._chars // 4)
        if not self._usage:
            u["input_tokens"] = self._input
        delta = {"stop_reason": reason, "stop_sequence": seq}
        self.emit("message_delta", {"type": "message_delta", "delta": delta, "usage": u})
        self.emit("message_stop", {"type": "message_stop"})
