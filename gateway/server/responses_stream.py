"""A Responses API event stream made from the gateway's chat completion stream.

:class:`ResponsesSink` sits between the stream relay (which writes chat SSE: chunks, an
error event, ``[DONE]``, the trailing ``: x-gateway-...`` comment) and the client's
response, so the Responses stream gets everything the chat stream has: hold-back,
live checks, continuation on another tier. Events: ``response.created``,
``response.in_progress``, per message ``response.output_item.added``,
``response.content_part.added``, ``response.output_text.delta`` ..., ``.done`` events,
per tool call ``response.function_call_arguments.delta`` ...; then
``response.completed`` (``response.incomplete`` at the token limit). A chat error event
becomes an ``error`` event and ``response.failed``. Comments pass through
(:class:`~gateway.server.event_sink.EventSink` reads the chat stream).
"""

from __future__ import annotations

import time
from typing import Any

from gateway.server.event_sink import EventSink, Sink
from gateway.server.responses_format import (
    call_item,
    message_item,
    new_id,
    response_object,
    usage,
)


class ResponsesSink(EventSink):
    def __init__(self, out: Sink, req: dict[str, Any]):
        super().__init__(out)
        self._req = req
        self._seq = 0
        self._id = new_id("resp")
        self._created = int(time.time())
        self._model: object = None
        self._output: list[dict[str, Any]] = []
        self._text: tuple[int, str, list[str]] | None = None  # output index, item id, parts
        self._calls: dict[
            int, tuple[int, dict[str, Any]]
        ] = {}  # chat index -> (output index, item)
        self._finish: object = None
        self._usage: dict[str, Any] | None = None
        self._error: dict[str, Any] | None = None
        self._started = False

    def _emit(self, kind: str, **fields: Any) -> None:
        self._seq += 1
        self.emit(kind, {"type": kind, "sequence_number": self._seq, **fields})

    def _response(self, status: str) -> dict[str, Any]:
        return response_object(
            self._req,
            self._id,
            self._model,
            status=status,
            output=self._output,
            usage=self._usage,
            finish=self._finish if status == "completed" else None,
            created_at=self._created,
            error=self._error,
        )

    def _start(self) -> None:
        if not self._started:
            self._started = True
            self._emit("response.created", response=self._response("in_progress"))
            self._emit("response.in_progress", response=self._response("in_progress"))

    def chunk(self, obj: dict[str, Any]) -> None:
        if "error" in obj:
            self._start()
            err = obj["error"] if isinstance(obj["error"], dict) else {"message": str(obj["error"])}
            self._error = {
                "code": str(err.get("code") or "stream_broken"),
                "message": str(err.get("message", "")),
            }
            self._emit(
                "error", code=self._error["code"], message=self._error["message"], param=None
            )
            return
        self._model = self._model or obj.get("model")
        self._start()
        if obj.get("usage"):
            self._usage = usage(obj["usage"])
        for choice in obj.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue  # one output: n > 1 has no Responses equivalent
            delta = choice.get("delta") or {}
            if delta.get("content"):
                self._text_delta(delta["content"])
            for call in delta.get("tool_calls") or ():
                self._call_delta(call)
            if choice.get("finish_reason"):
                self._finish = choice["finish_reason"]

    def _text_delta(self, text: str) -> None:
        if self._text is None:
            idx, item_id = len(self._output), new_id("msg")
            self._output.append(message_item(item_id, "", "in_progress"))
            self._text = (idx, item_id, [])
            self._emit("response.output_item.added", output_index=idx, item=self._output[idx])
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            self._emit(
                "response.content_part.added",
                item_id=item_id,
                output_index=idx,
                content_index=0,
                part=part,
            )
        idx, item_id, parts = self._text
        parts.append(text)
        self._emit(
            "response.output_text.delta",
            item_id=item_id,
            output_index=idx,
            content_index=0,
            delta=text,
            logprobs=[],
        )

    def _call_delta(self, call: dict[str, Any]) -> None:
        index = call.get("index", 0)
        fn = call.get("function") or {}
        if index not in self._calls:
            self._close_text()
            idx = len(self._output)
            item = call_item(
                new_id("fc"), {**call, "function": {**fn, "arguments": ""}}, "in_progress"
            )
            self._output.append(item)
            self._calls[index] = (idx, item)
            self._emit("response.output_item.added", output_index=idx, item=item)
        idx, item = self._calls[index]
        args = fn.get("arguments")
        if args and item["type"] == "function_call":
            item["arguments"] += args
            self._emit(
                "response.function_call_arguments.delta",
                item_id=item["id"],
                output_index=idx,
                delta=args,
            )

    def _close_text(self) -> None:
        if self._text is None:
            return
        idx, item_id, parts = self._text
        text = "".join(parts)
        self._output[idx] = item = message_item(item_id, text)
        common = {"item_id": item_id, "output_index": idx, "content_index": 0}
        self._emit("response.output_text.done", **common, text=text, logprobs=[])
        self._emit("response.content_part.done", **common, part=item["content"][0])
        self._emit("response.output_item.done", output_index=idx, item=item)
        self._text = None

    def end(self) -> None:
        self._start()
        self._close_text()
        for idx, item in self._calls.values():
            item["status"] = "completed"
            if item["type"] == "function_call":
                self._emit(
                    "response.function_call_arguments.done",
                    item_id=item["id"],
                    output_index=idx,
                    name=item["name"],
                    arguments=item["arguments"],
                )
            self._emit("response.output_item.done", output_index=idx, item=item)
        if self._error is not None:
            self._emit("response.failed", response=self._response("failed"))
            return
        done = self._response("completed")
        kind = "response.incomplete" if done["status"] == "incomplete" else "response.completed"
        self._emit(kind, response=done)
