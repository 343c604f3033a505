"""A cached answer in the client's own format: its JSON, or an SSE stream.

Both carry a fresh ``id`` and ``created`` (a replay is a new response; its content is the
stored one). The stream is what an engine sends: per choice a role chunk, the content
(and tool calls) in one chunk, a finish chunk; a usage chunk when the client asked
(``stream_options.include_usage``); ``data: [DONE]``. It is written in one piece.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

import orjson

from gateway.cache.entry import Entry

DONE = b"data: [DONE]\n\n"
_TOP = ("model", "system_fingerprint", "service_tier")


def _fresh(kind: str) -> tuple[str, int]:
    prefix = "chatcmpl-" if kind == "chat" else "cmpl-"
    return prefix + secrets.token_hex(12), int(time.time())


def json_body(entry: Entry) -> bytes:
    answer = orjson.loads(entry.answer)
    answer["id"], answer["created"] = _fresh(entry.kind)
    return orjson.dumps(answer)


def sse_body(entry: Entry, include_usage: bool) -> bytes:
    answer = orjson.loads(entry.answer)
    chat = entry.kind == "chat"
    rid, created = _fresh(entry.kind)
    base: dict[str, Any] = {
        "id": rid,
        "object": "chat.completion.chunk" if chat else "text_completion",
        "created": created,
    }
    base.update({k: answer[k] for k in _TOP if answer.get(k) is not None})
    out = bytearray()

    def event(choices: list[dict[str, Any]], **extra: Any) -> None:
        out.extend(b"data: " + orjson.dumps({**base, "choices": choices, **extra}) + b"\n\n")

    for ch in answer["choices"]:
        i, logprobs = ch.get("index", 0), ch.get("logprobs")
        if chat:
            for delta in _deltas(ch.get("message") or {}):
                event([{"index": i, "delta": delta, "logprobs": None, "finish_reason": None}])
            if logprobs:
                event([{"index": i, "delta": {}, "logprobs": logprobs, "finish_reason": None}])
            event(
                [{"index": i, "delta": {}, "logprobs": None, "finish_reason": ch["finish_reason"]}]
            )
        else:
            text = ch.get("text") or ""
            event([{"index": i, "text": text, "logprobs": logprobs, "finish_reason": None}])
            event(
                [{"index": i, "text": "", "logprobs": None, "finish_reason": ch["finish_reason"]}]
            )
    if include_usage and isinstance(answer.get("usage"), dict):
        event([], usage=answer["usage"])
    out.extend(DONE)
    return bytes(out)


def _deltas(msg: dict[str, Any]) -> list[dict[str, Any]]:
    """A message as stream deltas: the role, then its text fields, then its tool calls."""
    opening = "" if isinstance(msg.get("content"), str) else None  # tool calls only: null
    deltas: list[dict[str, Any]] = [{"role": msg.get("role") or "assistant", "content": opening}]
    text = {k: v for k, v in msg.items() if k not in ("role", "tool_calls") and isinstance(v, str)}
    if any(text.values()):
        deltas.append(text)
    calls = msg.get("tool_calls")
    if isinstance(calls, list) and calls:
        deltas.append({"tool_calls": [{"index": n, **c} for n, c in enumerate(calls)]})
    return deltas
