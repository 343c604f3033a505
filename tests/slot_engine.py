"""A fake engine with a batch limit, for the scheduling tests (the I/O boundary).

``python tests/slot_engine.py --port P --slots N --service S``: at most N requests
generate at once, each for S seconds; the rest wait FIFO, as an engine's batch limit
does. Every answer is a short SSE stream (or JSON when ``stream`` is false).
``GET /_log`` lists ``[tag, queued_s]`` per request in the order they started generating,
where the tag is the last user message.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

from aiohttp import web


def make_app(slots: int, service: float) -> web.Application:
    sem = asyncio.Semaphore(slots)  # asyncio's semaphore wakes its waiters FIFO
    log: list[list[Any]] = []

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        tag = body["messages"][-1]["content"]
        t0 = time.monotonic()
        async with sem:
            log.append([tag, round(time.monotonic() - t0, 4)])
            await asyncio.sleep(service)  # generating: what holds the slot
        if not body.get("stream"):
            msg = {"role": "assistant", "content": "ok"}
            return web.json_response(
                {
                    "id": "x",
                    "object": "chat.completion",
                    "model": body.get("model"),
                    "choices": [{"index": 0, "message": msg, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
                }
            )
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for delta, fin in (({"role": "assistant", "content": "ok"}, None), ({}, "stop")):
            ev = {
                "id": "x",
                "object": "chat.completion.chunk",
                "model": body.get("model"),
                "choices": [{"index": 0, "delta": delta, "finish_reason": fin}],
            }
            await resp.write(b"data: " + json.dumps(ev).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def models(_: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "slots", "object": "model"}]})

    async def health(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def get_log(_: web.Request) -> web.Response:
        return web.json_response(log)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    app.router.add_get("/_log", get_log)
    return app


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--slots", type=int, default=4)
    ap.add_argument("--service", type=float, default=0.1)
    a = ap.parse_args()
    web.run_app(make_app(a.slots, a.service), host="127.0.0.1", port=a.port, print=None)
