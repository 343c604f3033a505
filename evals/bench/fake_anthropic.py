"""A fake Anthropic Messages API on loopback: the provider side of a hosted (LiteLLM) tier.

Started as its own process on a real socket (``python -m evals.bench.fake_anthropic --port P``)
or built in process with :func:`make_app` (the benchmark). It speaks Anthropic's wire
format: ``POST /v1/messages`` with ``x-api-key`` and ``anthropic-version``; a JSON
``message`` answer, or with ``stream: true`` Anthropic's SSE events (``message_start``,
``content_block_start``, ``ping``, ``content_block_delta``, ``content_block_stop``,
``message_delta``, ``message_stop``), and its error envelope.

Directives inside any message, for the tests (the same style as ``tests/fake_engine.py``)::

    [[hosted: status=429]]      answer HTTP 429 (rate_limit_error); 400, 500, 529 likewise
    [[hosted: text=Hi there]]   answer "Hi there" (streamed word by word)
    [[hosted: error_after=2]]   a stream that sends 2 deltas, then an ``error`` event
    [[hosted: delay=2]]         wait 2 s before answering

Without directives the answer is ``Hosted echo: <last user text>``. A trailing assistant
message is a prefill: the answer continues it (the rest of ``text`` after it), unless
the model takes none (``NO_PREFILL``): then 400, as a model without prefill answers.
``GET /_requests`` lists what it received: the headers that matter and the body.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
from typing import Any

from aiohttp import web

DIRECTIVE = re.compile(r"\[\[(hosted|\*):([^\]]*)\]\]")
NO_PREFILL = ("claude-haiku-5-5",)  # LiteLLM's map: supports_assistant_prefill false
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


def _texts(body: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for m in body.get("messages") or []:
        c = m.get("content")
        if isinstance(c, str):
            out.append(c)
        elif isinstance(c, list):
            out += [p.get("text", "") for p in c if isinstance(p, dict)]
    return out


def directives(body: dict[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    for t in _texts(body):
        for _, spec in DIRECTIVE.findall(t):
            for part in spec.split(";"):
                k, _, v = part.strip().partition("=")
                out[k.strip()] = v.strip()
    return out


def _error(status: int, message: str) -> web.Response:
    kind = ERROR_TYPES.get(status, "api_error")
    body = {"type": "error", "error": {"type": kind, "message": message}}
    return web.json_response(body, status=status)


def answer_text(body: dict[str, Any], d: dict[str, str]) -> tuple[str, str | None]:
    """The text to send, and the prefill it continues (None: no prefill)."""
    msgs = body.get("messages") or []
    users = [m for m in msgs if m.get("role") == "user"]
    last_user = _texts({"messages": users[-1:]})
    full = d.get("text") or "Hosted echo: " + (last_user[-1] if last_user else "")
    if msgs and msgs[-1].get("role") == "assistant":
        prefix = "".join(_texts({"messages": msgs[-1:]}))
        return (full[len(prefix) :] if full.startswith(prefix) else " [continued]"), prefix
    return full, None


class FakeAnthropic:
    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []

    async def messages(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.received.append(
            {
                "x-api-key": request.headers.get("x-api-key"),
                "anthropic-version": request.headers.get("anthropic-version"),
                "body": body,
            }
        )
        d = directives(body)
        if "delay" in d:
            await asyncio.sleep(float(d["delay"]))
        if "status" in d:
            return _error(int(d["status"]), f"fake error {d['status']}")
        text, prefill = answer_text(body, d)
        if prefill is not None and str(body.get("model")) in NO_PREFILL:
            return _error(400, "This model does not support assistant message prefill.")
        if prefill is not None and prefill != prefill.rstrip():
            return _error(400, "final assistant content cannot end with trailing whitespace")
        words = re.findall(r"\S+\s*|\s+", text) or [""]
        usage_in = sum(len(t) for t in _texts(body)) // 4 + 1
        if not body.get("stream"):
            return web.json_response(
                {
                    "id": "msg_fake",
                    "type": "message",
                    "role": "assistant",
                    "model": body.get("model"),
                    "content": [{"type": "text", "text": text}],
                    "stop_reason": "end_turn",
                    "stop_sequence": None,
                    "usage": {"input_tokens": usage_in, "output_tokens": len(words)},
                }
            )
        return await self._stream(request, body, words, usage_in, d)

    async def _stream(
        self,
        request: web.Request,
        body: dict[str, Any],
        words: list[str],
        usage_in: int,
        d: dict[str, str],
    ) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)

        async def event(kind: str, data: dict[str, Any]) -> None:
            await resp.write(f"event: {kind}\ndata: {json.dumps(data)}\n\n".encode())

        start: dict[str, Any] = {
            "id": "msg_fake",
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": body.get("model"),
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": usage_in, "output_tokens": 1},
        }
        await event("message_start", {"type": "message_start", "message": start})
        block = {"type": "text", "text": ""}
        await event(
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": block},
        )
        await event("ping", {"type": "ping"})
        error_after = int(d.get("error_after", -1))
        for i, w in enumerate(words):
            if i == error_after:
                err = {"type": "overloaded_error", "message": "Overloaded"}
                await event("error", {"type": "error", "error": err})
                return resp
            delta = {"type": "text_delta", "text": w}
            await event(
                "content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}
            )
        await event("content_block_stop", {"type": "content_block_stop", "index": 0})
        await event(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": len(words)},
            },
        )
        await event("message_stop", {"type": "message_stop"})
        return resp


def make_app() -> web.Application:
    fake = FakeAnthropic()
    app = web.Application()

    async def requests(_: web.Request) -> web.Response:
        return web.json_response(fake.received)

    async def reset(_: web.Request) -> web.Response:
        fake.received.clear()
        return web.json_response({})

    async def health(_: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    app.router.add_post("/v1/messages", fake.messages)
    app.router.add_get("/_requests", requests)
    app.router.add_post("/_reset", reset)
    app.router.add_get("/health", health)
    return app


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    args = ap.parse_args()
    web.run_app(make_app(), host="127.0.0.1", port=args.port, print=None)
