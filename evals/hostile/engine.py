"""A fault-injecting OpenAI-compatible engine for ``python -m evals hostile``.

    python -m evals.hostile.engine --port P [--name highspeed] [--faulty]

Only a ``--faulty`` engine acts on a fault named in the prompt, ``[[fault: NAME]]``; the
other answers every request normally (it is the healthy tier behind the faulty one). Each
fault exists for streamed answers (what the gateway asks for by default) and, where it
means something, for plain JSON answers. Error bodies carry the engine's address on
purpose: the gateway must keep them out of what tenants see.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import time
from typing import Any

from aiohttp import web

FAULTS = (
    "http_500",
    "http_429",
    "http_503_html",
    "hang",
    "slow_first",
    "stall",
    "cut",
    "empty_stream",
    "loop",
    "leak",
    "not_json",
    "event_not_json",
    "event_not_object",
    "choices_object",
    "choice_string",
    "delta_string",
    "content_number",
    "tool_call_string",
    "usage_list",
    "error_event_first",
    "error_event_mid",
    "huge_event",
)
"""Every fault the engine knows, in the order ``evals hostile`` tries them."""

_MARK = re.compile(r"\[\[fault: ([a-z_0-9]+)\]\]")
_WORDS = [
    "The",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "the",
    "lazy",
    "dog",
    "while",
    "the",
    "sun",
    "sets",
    "slowly",
]
_SECRET = "engine 10.9.8.7:30000 stack trace: KeyError('secret')"
_HUGE = 9 * 1024 * 1024  # over the gateway's default 8 MiB event limit


def _fault(body: dict[str, Any]) -> str | None:
    for m in body.get("messages") or ():
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, str) and (hit := _MARK.search(content)):
            return hit.group(1)
    return None


def _chunk(delta: Any, finish: str | None = None) -> dict[str, Any]:
    base = {"id": "cmpl-h", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def _events(fault: str | None, usage_wanted: bool) -> list[Any]:
    """The stream's events, in order: dicts, raw bytes, or a command ("cut", "stall")."""
    words = [w + " " for w in _WORDS]
    if fault == "loop":
        words = ["I will repeat this sentence again. "] * 120
    if fault == "leak":
        words[3] = "<|im_end|><|im_start|>user "
    events: list[Any] = [_chunk({"role": "assistant", "content": ""})]
    events += [_chunk({"content": w}) for w in words]
    bad: dict[str, Any] = {
        "event_not_json": b"data: {oops\n\n",
        "event_not_object": b"data: [1, 2]\n\n",
        "choices_object": {**_chunk({}), "choices": {"a": 1}},
        "choice_string": {**_chunk({}), "choices": ["oops"]},
        "delta_string": _chunk("oops"),
        "content_number": _chunk({"content": 42}),
        "tool_call_string": _chunk({"tool_calls": "oops"}),
        "error_event_mid": {"error": {"message": _SECRET, "type": "engine_error"}},
        "huge_event": _chunk({"content": "x" * _HUGE}),
        "cut": "cut",
        "stall": "stall",
    }
    if fault in bad:
        events.insert(4, bad[fault])
    events.append(_chunk({}, "stop"))
    if usage_wanted or fault == "usage_list":
        usage: Any = [1, 2] if fault == "usage_list" else {"prompt_tokens": 9}
        events.append({**_chunk({}), "choices": [], "usage": usage})
    if fault == "error_event_first":
        events = [{"error": {"message": _SECRET, "type": "engine_error"}}]
    if fault == "empty_stream":
        events = []
    return events


async def _stream(request: web.Request, events: list[Any]) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    for ev in events:
        if ev == "cut":
            assert request.transport is not None
            request.transport.close()
            return resp
        if ev == "stall":
            await asyncio.sleep(3600)
        data = ev if isinstance(ev, bytes) else b"data: " + json.dumps(ev).encode() + b"\n\n"
        await resp.write(data)
    await resp.write(b"data: [DONE]\n\n")
    return resp


def _plain(fault: str | None) -> web.Response:
    message: Any = {"role": "assistant", "content": " ".join(_WORDS)}
    if fault == "delta_string":
        message = "oops"
    answer = {
        "id": "cmpl-h",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": [1, 2] if fault == "usage_list" else {"prompt_tokens": 9},
    }
    return web.json_response(answer)


async def _before(fault: str | None) -> web.Response | None:
    """Faults that answer before any event (or never)."""
    if fault == "hang":
        await asyncio.sleep(3600)
    if fault == "slow_first":
        await asyncio.sleep(6)
    if fault in ("http_500", "http_429"):
        status = int(fault[5:])
        err = {"error": {"message": _SECRET, "type": "engine_error", "code": status}}
        return web.json_response(err, status=status, headers={"Retry-After": "0"})
    if fault == "not_json":  # a 200 that is neither JSON nor an event stream
        return web.Response(text="<html>oops</html>", content_type="text/html")
    if fault == "http_503_html":
        return web.Response(status=503, text=f"<h1>{_SECRET}</h1>", content_type="text/html")
    return None


def make_app(faulty: bool) -> web.Application:
    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        fault = _fault(body) if faulty else None
        early = await _before(fault)
        if early is not None:
            return early
        if not body.get("stream"):
            return _plain(fault)
        so = body.get("stream_options")
        wanted = isinstance(so, dict) and bool(so.get("include_usage"))
        return await _stream(request, _events(fault, wanted))

    async def health(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def models(_: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "m", "object": "model"}]})

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/health", health)
    app.router.add_get("/v1/models", models)
    return app


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--name", default="engine")
    p.add_argument("--faulty", action="store_true")
    a = p.parse_args(argv)
    web.run_app(make_app(a.faulty), host="127.0.0.1", port=a.port, print=None, access_log=None)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
