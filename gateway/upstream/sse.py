"""What the gateway reads out of an engine's SSE stream (cut into events by
:mod:`gateway.upstream.framing`).

* :class:`StreamState` is what we learn from the events of choice 0: id/model/created,
  the text so far, tool-call deltas, finish reason, usage, ``[DONE]``. An error event
  raises :class:`StreamErrorEvent` at once, a malformed one :class:`BadStream`.
* With ``events`` set, every event is kept too (as its SSE bytes), to assemble a non-streamed
  answer from an upstream stream.

Every event is decoded once, by msgspec into typed structs: the decoder checks the
shapes the gateway relies on (a delta is an object, content a string, usage an object
...) in C, about 3x faster than a JSON parse into dicts walked in Python. An event that
does not fit (a malformed one, or one that carries more than text, tool calls, a finish
reason and usage: log-probabilities, reasoning, n > 1 ...) takes the general path, which
says precisely what is wrong or marks the stream as not plain.
"""

from __future__ import annotations

from typing import Any

import msgspec
import orjson

from gateway.checks.base import Output
from gateway.upstream.failures import BadStream, StreamErrorEvent
from gateway.upstream.framing import data_payloads

_PLAIN_DELTA = frozenset(("role", "content", "tool_calls"))
_PLAIN_CHOICE = frozenset(
    ("index", "delta", "text", "finish_reason", "logprobs", "matched_stop", "stop_reason")
)
TOP_KEYS = ("id", "created", "model", "system_fingerprint", "service_tier")
# OpenAI's "obfuscation" pads each chunk with random text: read, never kept
PLAIN_TOP = frozenset(("object", "choices", "usage", "error", "obfuscation", *TOP_KEYS))
STOP_KEYS = ("matched_stop", "stop_reason")  # SGLang's and vLLM's own, on the last choice


def _extra(obj: dict[str, Any], plain: frozenset[str]) -> bool:
    """Whether ``obj`` has a field beyond ``plain`` that is not null."""
    return not plain.issuperset(obj) and any(
        v is not None for k, v in obj.items() if k not in plain
    )


# -- the typed fast path: what a plain OpenAI stream event carries --------------------------
class _Function(msgspec.Struct):
    name: str | None = None
    arguments: str | None = None


class _ToolCall(msgspec.Struct):
    index: int = 0
    id: Any = None
    type: Any = None
    function: _Function | None = None


class _Delta(msgspec.Struct, forbid_unknown_fields=True):
    role: Any = None
    content: str | None = None
    tool_calls: list[_ToolCall] | None = None
    reasoning_content: None = None  # SGLang and vLLM send these as null in every event
    refusal: None = None


class _Choice(msgspec.Struct, forbid_unknown_fields=True):
    index: int = 0
    delta: _Delta | None = None
    text: str | None = None
    finish_reason: str | None = None
    logprobs: None = None
    matched_stop: Any = None  # SGLang's and vLLM's own: kept for the assembled answer
    stop_reason: Any = None


class _Event(msgspec.Struct, forbid_unknown_fields=True):
    """An event's fields; one beyond these (an engine's own) takes the general path, which
    keeps it (not null) for the assembled answer."""

    choices: list[_Choice] | None = None
    usage: dict[str, Any] | None = None
    error: Any = None
    object: Any = None
    id: Any = None
    model: Any = None
    created: Any = None
    system_fingerprint: Any = None
    service_tier: Any = None
    obfuscation: Any = None


_DECODE = msgspec.json.Decoder(_Event)


class StreamState:
    """What the events of one stream said so far (choice 0)."""

    __slots__ = (
        "chars",
        "chat",
        "created",
        "done",
        "emitted",
        "eof_done",
        "events",
        "extra",
        "finish_reason",
        "first",
        "id",
        "model",
        "multi",
        "parts",
        "plain",
        "stops",
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
        self.emitted = 0  # events that carried output of any kind (text, tool calls, reasoning)
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] | None = None
        self.done = False
        self.eof_done = False  # it ended after a finish_reason without [DONE]
        self.events: list[bytes] | None = None  # every event (SSE bytes), when assembling
        self.tool_calls: dict[int, dict[str, Any]] = {}
        self.multi = False  # n > 1: several choices interleave
        self.plain = True  # nothing seen beyond text, tool calls, finish reason and usage
        self.first: dict[str, Any] = {}  # the first event's id, model, fingerprint ...
        self.stops: dict[str, Any] | None = None  # matched_stop / stop_reason, when sent
        self.extra: dict[str, Any] | None = None  # the events' own top-level fields (last)

    def feed(self, payload: bytes) -> bool:
        """Take one event's payload; True when it carried output (a token). An event that
        is not what an OpenAI stream carries is an upstream failure, never a crash."""
        if self.events is not None:
            self.events.append(b"data: " + payload + b"\n\n")
        return self._feed_one(payload)

    def feed_block(self, block: bytes) -> bool:
        """Take the complete events the framer cut; True when one carried output."""
        if self.events is not None:
            self.events.append(block)
        token = False
        for p in data_payloads(block):
            token = self._feed_one(p) or token
        return token

    def _feed_one(self, payload: bytes) -> bool:
        if payload == b"[DONE]":
            self.done = True
            return False
        try:
            ev = _DECODE.decode(payload)
        except msgspec.ValidationError:
            return self._feed_general(payload)  # not plain, or malformed: the general path
        except msgspec.DecodeError:
            raise BadStream("an event is not JSON") from None
        if ev.error:
            return self._feed_general(payload)  # it words the error
        if self.id is None:
            self.first = {k: getattr(ev, k) for k in TOP_KEYS}
            self.id, self.model, self.created = ev.id, ev.model, ev.created
        usage = ev.usage
        if usage:
            self.usage = usage
        token = False
        for ch in ev.choices or ():
            if ch.index:
                self.multi = True
                self.plain = False
                continue
            if self.chat:
                delta = ch.delta
                text = delta.content if delta is not None else None
                if delta is not None and delta.tool_calls:
                    self._typed_calls(delta.tool_calls)
                    token = True
            else:
                text = ch.text
            if text:
                self.parts.append(text)
                self.chars += len(text)
                self.tokens += 1
                token = True
            if ch.finish_reason:
                self.finish_reason = ch.finish_reason
                token = True
            if ch.matched_stop is not None or ch.stop_reason is not None:
                self.stops = {"matched_stop": ch.matched_stop, "stop_reason": ch.stop_reason}
        if token:
            self.emitted += 1
        return token or (usage is not None and not ev.choices)

    def _typed_calls(self, calls: list[_ToolCall]) -> None:
        for c in calls:
            if c.type not in (None, "function"):
                self.plain = False
            fn = self._call_slot(c.index, c.id)["function"]
            if c.function is not None:
                if c.function.name:
                    fn["name"] += c.function.name
                if c.function.arguments:
                    fn["arguments"] += c.function.arguments

    def _call_slot(self, index: int, call_id: Any) -> dict[str, Any]:
        slot = self.tool_calls.get(index)
        if slot is None:
            slot = self.tool_calls[index] = {
                "id": None,
                "type": "function",
                "function": {"name": "", "arguments": ""},
            }
        if call_id:
            slot["id"] = call_id
        return slot

    # -- the general path: any event, precise errors ---------------------------------------------
    def _feed_general(self, payload: bytes) -> bool:
        try:
            obj = orjson.loads(payload)
        except orjson.JSONDecodeError:
            raise BadStream("an event is not JSON") from None
        if not isinstance(obj, dict):
            raise BadStream("an event is not a JSON object")
        err = obj.get("error")
        if err:
            msg = err.get("message", "") if isinstance(err, dict) else str(err)
            raise StreamErrorEvent(str(msg)[:160] or "error event")
        if self.id is None:
            self.first = obj
            self.id, self.model, self.created = obj.get("id"), obj.get("model"), obj.get("created")
        if _extra(obj, PLAIN_TOP):  # the engine's own fields: kept, the stream still plain
            own = self.extra if self.extra is not None else {}
            own.update((k, v) for k, v in obj.items() if v is not None and k not in PLAIN_TOP)
            self.extra = own
        usage = obj.get("usage")
        if usage:
            if not isinstance(usage, dict):
                raise BadStream("usage is not an object")
            self.usage = usage
        choices = obj.get("choices") or []
        if not isinstance(choices, list):
            raise BadStream("choices is not a list")
        token = False
        for ch in choices:
            token = self._choice(ch) or token
        if token:
            self.emitted += 1
        return token or (usage is not None and not choices)

    def _choice(self, ch: Any) -> bool:
        if not isinstance(ch, dict):
            raise BadStream("a choice is not an object")
        if ch.get("index", 0):
            self.multi = True
            self.plain = False
            return False
        token = False
        if self.chat:
            delta = ch.get("delta") or {}
            if not isinstance(delta, dict):
                raise BadStream("a delta is not an object")
            text = delta.get("content")
            calls = delta.get("tool_calls")
            if calls:
                if not isinstance(calls, list):
                    raise BadStream("tool_calls is not a list")
                self._tool_deltas(calls)
                token = True
            if _extra(delta, _PLAIN_DELTA):
                self.plain = False
                token = token or bool(delta.get("reasoning_content") or delta.get("refusal"))
        else:
            text = ch.get("text")
        if self.plain and (ch.get("logprobs") is not None or _extra(ch, _PLAIN_CHOICE)):
            self.plain = False
        if text:
            if not isinstance(text, str):
                raise BadStream("the text is not a string")
            self.parts.append(text)
            self.chars += len(text)
            self.tokens += 1
            token = True
        fr = ch.get("finish_reason")
        if fr:
            self.finish_reason = fr
            token = True
        if any(ch.get(k) is not None for k in STOP_KEYS):
            self.stops = {k: ch.get(k) for k in STOP_KEYS}
        return token

    def _tool_deltas(self, calls: list[Any]) -> None:
        for c in calls:
            index, fn = c.get("index", 0) if isinstance(c, dict) else None, None
            if isinstance(c, dict):
                fn = c.get("function") or {}
            if not isinstance(index, int) or not isinstance(fn, dict):
                raise BadStream("a tool call is malformed")
            if c.get("type") not in (None, "function"):
                self.plain = False
            slot = self._call_slot(index, c.get("id"))["function"]
            for part in ("name", "arguments"):
                value = fn.get(part)
                if value:
                    if not isinstance(value, str):
                        raise BadStream(f"a tool call's {part} is not a string")
                    slot[part] += value

    # -- reading it ----------------------------------------------------------------------------
    def parsed_events(self) -> list[dict[str, Any]]:
        """The kept events as objects (to assemble an answer that is not plain)."""
        blocks = b"".join(self.events or ())
        return [orjson.loads(p) for p in data_payloads(blocks) if p != b"[DONE]"]

    @property
    def resumable(self) -> bool:
        """Whether another tier could continue this text at all (tool-call deltas and
        interleaved choices cannot be)."""
        return not (self.tool_calls or self.multi)

    def tokens_for(self, chars: int, events: int | None = None) -> int:
        """At least how many tokens the text's first ``chars`` characters took: the content
        ``events`` that carried them (each carries one or more; unknown, the share of all
        events so far) or its words (a tokenizer that splits on spaces first, as BPE ones
        do, gives every word one or more), whichever is more. An engine that decodes
        speculatively (EAGLE, as the fast tier does) sends several tokens an event: counted
        by events alone, a continuation asked for ``max_tokens`` minus them would run far
        past the client's ``max_tokens``."""
        if chars <= 0 or not self.chars:
            return 0
        if events is None:
            events = self.tokens if chars >= self.chars else self.tokens * chars // self.chars
        return max(events, len(self.text()[:chars].split()))

    def prepend(self, first: StreamState, chars: int, tokens: int) -> None:
        """Begin this stream with ``first``'s first ``chars`` characters (``tokens``
        tokens): a continuation that is relayed as if it were ``first`` itself, whose text
        the client saw in front of this one's. Its identity (id, model, created) is
        ``first``'s too, as the client saw it."""
        self.parts.insert(0, first.text()[:chars])
        self.chars += chars
        self.tokens += tokens
        self.emitted += tokens
        self.id, self.model, self.created = first.id, first.model, first.created
        self.first = first.first

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
