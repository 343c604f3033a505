"""What the gateway reads out of an engine's SSE stream, and the live checks on it.

* :class:`SSEFramer` cuts the byte stream into complete events, so that bytes are
  forwarded (untouched) only once the events they carry have been checked.
* :class:`StreamState` is what we learn from the events of choice 0: id/model/created,
  the text so far, tool-call deltas, finish reason, usage, ``[DONE]``. An error event
  raises :class:`AttemptError` at once.
* With ``events`` set, every parsed event is kept too, to assemble a non-streamed
  answer from an upstream stream (parsed once, used twice).
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.checks.base import Output
from gateway.upstream.transport import AttemptError


def data_payloads(events: bytes) -> list[bytes]:
    """The ``data:`` payloads of complete SSE events."""
    return [ln[5:].strip() for ln in events.split(b"\n") if ln.startswith(b"data:")]


class SSEFramer:
    """Splits a byte stream into complete SSE events (``\\n\\n``-terminated)."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, chunk: bytes) -> tuple[bytes, list[bytes]]:
        """Complete events' bytes (to forward) and their ``data:`` payloads."""
        if b"\r" in chunk:
            chunk = chunk.replace(b"\r\n", b"\n")
        buf = self._buf + chunk if self._buf else chunk
        end = buf.rfind(b"\n\n")
        if end < 0:
            self._buf = buf
            return b"", []
        complete, self._buf = buf[: end + 2], buf[end + 2 :]
        return complete, data_payloads(complete)

    @property
    def pending(self) -> bytes:
        return self._buf


class StreamState:
    """What the events of one stream said so far (choice 0)."""

    __slots__ = (
        "chars",
        "chat",
        "created",
        "done",
        "eof_done",
        "events",
        "finish_reason",
        "id",
        "model",
        "multi",
        "parts",
        "tokens",
        "tool_calls",
        "usage",
    )

    def __init__(self, chat: bool):
        self.chat = chat
        self.id: Any = None
        self.model: Any = None
        self.created: Any = None
        self.parts: list[str] = []
        self.chars = 0
        self.tokens = 0  # content events: engines send about one token per event
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] | None = None
        self.done = False
        self.eof_done = False  # it ended after a finish_reason without [DONE]
        self.events: list[dict[str, Any]] | None = None  # every event, when assembling
        self.tool_calls: dict[int, dict[str, Any]] = {}
        self.multi = False  # n > 1: several choices interleave

    def feed(self, payload: bytes) -> bool:
        """Take one event's payload; True when it carried output (a token)."""
        if payload == b"[DONE]":
            self.done = True
            return False
        try:
            obj = orjson.loads(payload)
        except orjson.JSONDecodeError:
            raise AttemptError("bad_stream", "an event is not JSON") from None
        if not isinstance(obj, dict):
            raise AttemptError("bad_stream", "an event is not a JSON object")
        err = obj.get("error")
        if err:
            msg = err.get("message", "") if isinstance(err, dict) else str(err)
            raise AttemptError("stream_error", str(msg)[:160] or "error event")
        if self.events is not None:
            self.events.append(obj)
        if self.id is None:
            self.id, self.model, self.created = obj.get("id"), obj.get("model"), obj.get("created")
        usage = obj.get("usage")
        if usage:
            self.usage = usage
        token = False
        for ch in obj.get("choices") or ():
            if not isinstance(ch, dict):
                continue
            if ch.get("index", 0):
                self.multi = True
                continue
            if self.chat:
                delta = ch.get("delta") or {}
                text = delta.get("content")
                calls = delta.get("tool_calls")
                if calls:
                    self._tool_deltas(calls)
                    token = True
                if delta.get("reasoning_content") or delta.get("refusal"):
                    token = True
            else:
                text = ch.get("text")
            if text:
                self.parts.append(text)
                self.chars += len(text)
                self.tokens += 1
                token = True
            fr = ch.get("finish_reason")
            if fr:
                self.finish_reason = fr
                token = True
        return token or (usage is not None and not obj.get("choices"))

    def _tool_deltas(self, calls: list[Any]) -> None:
        for c in calls:
            if not isinstance(c, dict):
                continue
            slot = self.tool_calls.setdefault(
                int(c.get("index", 0)),
                {"id": None, "type": "function", "function": {"name": "", "arguments": ""}},
            )
            if c.get("id"):
                slot["id"] = c["id"]
            fn = c.get("function") or {}
            if fn.get("name"):
                slot["function"]["name"] += fn["name"]
            if fn.get("arguments"):
                slot["function"]["arguments"] += fn["arguments"]

    def text(self) -> str:
        if len(self.parts) > 1:
            self.parts = ["".join(self.parts)]
        return self.parts[0] if self.parts else ""

    def tail(self, n: int) -> str:
        """The last ``n`` (or a few more) characters, without joining the whole text."""
        got, i = 0, len(self.parts)
        while i > 0 and got < n:
            i -= 1
            got += len(self.parts[i])
        return "".join(self.parts[i:])

    def output(self) -> Output:
        return Output(self.text(), self.finish_reason, list(self.tool_calls.values()))
