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

_PLAIN_DELTA = frozenset(("role", "content", "tool_calls"))
_PLAIN_CHOICE = frozenset(("index", "delta", "text", "finish_reason", "logprobs"))


def data_payloads(events: bytes) -> list[bytes]:
    """The ``data:`` payloads of complete SSE events."""
    return [ln[5:].strip() for ln in events.split(b"\n") if ln.startswith(b"data:")]


class SSEFramer:
    """Splits a byte stream into complete SSE events (``\\n\\n``-terminated).

    Linear in the bytes fed: an unfinished event is kept as a list of chunks and joined
    once, when its end arrives (joining on every chunk made one huge event quadratic).
    An event over ``max_event`` bytes, or a stream over ``max_total``, is an upstream
    failure (``too_large``), not memory without end.
    """

    __slots__ = ("_parts", "_pending", "_total", "max_event", "max_total")

    def __init__(self, max_event: int = 8 << 20, max_total: int = 64 << 20) -> None:
        self._parts: list[bytes] = []
        self._pending = 0
        self._total = 0
        self.max_event = max_event
        self.max_total = max_total

    def feed(self, chunk: bytes) -> tuple[bytes, list[bytes]]:
        """Complete events' bytes (to forward) and their ``data:`` payloads."""
        if b"\r" in chunk:
            chunk = chunk.replace(b"\r\n", b"\n")
        self._total += len(chunk)
        if self._total > self.max_total:
            raise AttemptError("too_large", f"the answer is over {self.max_total} bytes")
        parts = self._parts
        if parts:
            if b"\n\n" not in chunk and not (chunk[:1] == b"\n" and parts[-1][-1:] == b"\n"):
                return self._hold(chunk)
            parts.append(chunk)
            buf = b"".join(parts)
            parts.clear()
            self._pending = 0
        else:
            buf = chunk
        end = buf.rfind(b"\n\n")
        if end < 0:
            return self._hold(buf)
        complete = buf[: end + 2]
        if len(complete) > self.max_event:  # rare: maybe a whole huge event in one read
            self._each_within_limit(complete)
        if end + 2 < len(buf):
            self._hold(buf[end + 2 :])
        return complete, data_payloads(complete)

    def _each_within_limit(self, events: bytes) -> None:
        if max(map(len, events.split(b"\n\n"))) > self.max_event:
            raise AttemptError("too_large", f"an event is over {self.max_event} bytes")

    def _hold(self, data: bytes) -> tuple[bytes, list[bytes]]:
        self._parts.append(data)
        self._pending += len(data)
        if self._pending > self.max_event:
            raise AttemptError("too_large", f"an event is over {self.max_event} bytes")
        return b"", []

    @property
    def pending(self) -> bytes:
        return b"".join(self._parts)


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
        "first",
        "id",
        "model",
        "multi",
        "parts",
        "plain",
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
        self.plain = True  # nothing seen beyond text, tool calls, finish reason and usage
        self.first: dict[str, Any] = {}  # the first event (its id, model, fingerprint ...)

    def feed(self, payload: bytes) -> bool:
        """Take one event's payload; True when it carried output (a token). An event that
        is not what an OpenAI stream carries is an upstream failure, never a crash."""
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
            self.first = obj
            self.id, self.model, self.created = obj.get("id"), obj.get("model"), obj.get("created")
        usage = obj.get("usage")
        if usage:
            if not isinstance(usage, dict):
                raise AttemptError("bad_stream", "usage is not an object")
            self.usage = usage
        choices = obj.get("choices") or []
        if not isinstance(choices, list):
            raise AttemptError("bad_stream", "choices is not a list")
        token = False
        for ch in choices:
            token = self._choice(ch) or token
        return token or (usage is not None and not choices)

    def _choice(self, ch: Any) -> bool:
        if not isinstance(ch, dict):
            raise AttemptError("bad_stream", "a choice is not an object")
        if ch.get("index", 0):
            self.multi = True
            self.plain = False
            return False
        token = False
        if self.chat:
            delta = ch.get("delta") or {}
            if not isinstance(delta, dict):
                raise AttemptError("bad_stream", "a delta is not an object")
            text = delta.get("content")
            calls = delta.get("tool_calls")
            if calls:
                if not isinstance(calls, list):
                    raise AttemptError("bad_stream", "tool_calls is not a list")
                self._tool_deltas(calls)
                token = True
            if not _PLAIN_DELTA.issuperset(delta):
                self.plain = False
                token = token or bool(delta.get("reasoning_content") or delta.get("refusal"))
        else:
            text = ch.get("text")
        if self.plain and (ch.get("logprobs") is not None or not _PLAIN_CHOICE.issuperset(ch)):
            self.plain = False
        if text:
            if not isinstance(text, str):
                raise AttemptError("bad_stream", "the text is not a string")
            self.parts.append(text)
            self.chars += len(text)
            self.tokens += 1
            token = True
        fr = ch.get("finish_reason")
        if fr:
            self.finish_reason = fr
            token = True
        return token

    def _tool_deltas(self, calls: list[Any]) -> None:
        for c in calls:
            index, fn = c.get("index", 0) if isinstance(c, dict) else None, None
            if isinstance(c, dict):
                fn = c.get("function") or {}
            if not isinstance(index, int) or not isinstance(fn, dict):
                raise AttemptError("bad_stream", "a tool call is malformed")
            if c.get("type") not in (None, "function"):
                self.plain = False
            slot = self.tool_calls.setdefault(
                index, {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
            )
            if c.get("id"):
                slot["id"] = c["id"]
            for part in ("name", "arguments"):
                value = fn.get(part)
                if value:
                    if not isinstance(value, str):
                        raise AttemptError("bad_stream", f"a tool call's {part} is not a string")
                    slot["function"][part] += value

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
