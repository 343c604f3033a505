"""A scriptable OpenAI-compatible engine process for end-to-end tests (the I/O boundary).

Started as its own process on a real socket: ``python tests/fake_engine.py --name
highspeed --port P``. What it answers is chosen by the test, per request, with
directives inside any message (or the prompt)::

    [[highspeed: status=500]]            this engine answers HTTP 500
    [[*: text=Hello there]]              every engine answers "Hello there"
    [[highspeed: loop; chunks=40]]       looping text, streamed in 40 chunks

Directives: text=..., loop, leak, empty, length, big=N (one N-character word), malformed,
status=N, delay=S (before the answer / the first chunk), hang, json=<raw JSON text>,
tool=<name>, args=<json>, first_error (the first SSE event is an error), cut_after=N,
stall_after=N, chunks=N
(the text is split into N pieces; per=K: K words a piece instead), gap=S (between
chunks); mid-stream faults after N pieces: loop_after=N (then the same sentence, one
per chunk, 60 times), leak_after=N (then a template token), error_after=N (then an
error event). Without directives the answer is "Echo (<name>): <last user text>".

Continuation: when the last message is the assistant's (prefill, with or without
``continue_final_message``), the answer is the rest of ``text`` after that prefix
(or " [continued]" when ``text`` does not start with it); with ``echo_prefix`` the
prefix is repeated in front of it, as llama.cpp's server does.

``GET /_requests`` lists the bodies received (newest last), ``POST /_reset`` clears
them, ``GET /_cancelled`` counts streams whose client went away before the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import time
from typing import Any

from aiohttp import web

DIRECTIVE = re.compile(r"\[\[([\w*]+):([^\]]*)\]\]")
LOOP = "I will repeat this sentence again. " * 60
LEAK = "Here is the answer you wanted.<|im_end|><|im_start|>user"


def directives(body: dict[str, Any], name: str) -> dict[str, str]:
    texts: list[str] = []
    for m in body.get("messages") or []:
        c = m.get("content")
        if isinstance(c, str):
            texts.append(c)
        elif isinstance(c, list):
            texts += [p.get("text", "") for p in c if isinstance(p, dict)]
    p = body.get("prompt")
    if isinstance(p, str):
        texts.append(p)
    out: dict[str, str] = {}
    for t in texts:
        for who, spec in DIRECTIVE.findall(t):
            if who in (name, "*"):
                for part in spec.split(";"):
                    k, _, v = part.strip().partition("=")
                    if k:
                        out[k.strip()] = v.strip()
    return out


def last_user(body: dict[str, Any]) -> str:
    for m in reversed(body.get("messages") or []):
        if m.get("role") == "user" and isinstance(m.get("content"), str):
            return DIRECTIVE.sub("", m["content"]).strip()
    p = body.get("prompt")
    return DIRECTIVE.sub("", p).strip() if isinstance(p, str) else ""


class Engine:
    def __init__(self, name: str):
        self.name = name
        self.requests: list[dict[str, Any]] = []
        self.cancelled = 0

    def answer(self, body: dict[str, Any], d: dict[str, str]) -> tuple[str, str, list[Any]]:
        text = d.get("text") or f"Echo ({self.name}): {last_user(body)}"
        msgs = body.get("messages") or []
        if msgs and msgs[-1].get("role") == "assistant":
            prefix = msgs[-1].get("content") or ""
            text = text[len(prefix) :] if text.startswith(prefix) else " [continued]"
            if "echo_prefix" in d:  # like llama.cpp's server: the prefix comes back first
                text = prefix + text
        finish = "stop"
        calls: list[Any] = []
        if "loop" in d:
            text = LOOP
        if "leak" in d:
            text = LEAK
        if "empty" in d:
            text = ""
        if "json" in d:
            text = d["json"]
        if "big" in d:  # one word of N characters: one huge event
            text = "x" * int(d["big"])
        if "length" in d:
            finish = "length"
        if "tool" in d:
            calls = [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": d["tool"], "arguments": d.get("args", "{}")},
                }
            ]
            text, finish = "", "tool_calls"
        return text, finish, calls

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        d = directives(body, self.name)
        if "delay" in d:
            await asyncio.sleep(float(d["delay"]))
        if "hang" in d:
            await asyncio.sleep(3600)
        if "status" in d:
            status = int(d["status"])
            err = {
                "error": {
                    "message": f"{self.name} says {status}",
                    "type": "engine_error",
                    "param": None,
                    "code": status,
                }
            }
            return web.json_response(err, status=status)
        if "malformed" in d:
            return web.Response(text="<html>oops</html>", content_type="text/html")
        chat = request.path.endswith("/chat/completions")
        text, finish, calls = self.answer(body, d)
        base = {
            "id": f"cmpl-{self.name}-{len(self.requests)}",
            "created": int(time.time()),
            "model": body.get("model"),
            "system_fingerprint": f"fp_{self.name}",
        }
        usage = {
            "prompt_tokens": 10,
            "completion_tokens": max(1, len(text.split())),
            "total_tokens": 10 + max(1, len(text.split())),
        }
        if body.get("stream"):
            return await self.stream(request, body, d, base, text, finish, calls, usage, chat)
        if chat:
            msg: dict[str, Any] = {"role": "assistant", "content": text or None}
            if calls:
                msg["tool_calls"] = calls
            choice: dict[str, Any] = {"index": 0, "message": msg, "finish_reason": finish}
            obj = "chat.completion"
        else:
            choice = {"index": 0, "text": text, "finish_reason": finish}
            obj = "text_completion"
        return web.json_response(
            {**base, "object": obj, "choices": [choice], "usage": usage, "engine": self.name}
        )

    async def stream(
        self,
        request: web.Request,
        body: dict[str, Any],
        d: dict[str, str],
        base: dict[str, Any],
        text: str,
        finish: str,
        calls: list[Any],
        usage: dict[str, int],
        chat: bool,
    ) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        obj = "chat.completion.chunk" if chat else "text_completion"

        async def send(payload: Any) -> None:
            await resp.write(b"data: " + json.dumps(payload).encode() + b"\n\n")

        def chunk(delta: dict[str, Any] | str, fin: str | None = None) -> dict[str, Any]:
            if chat:
                c = {"index": 0, "delta": delta, "finish_reason": fin}
            else:
                c = {"index": 0, "text": delta, "finish_reason": fin}
            return {**base, "object": obj, "choices": [c]}

        if "first_error" in d:
            await send({"error": {"message": f"{self.name} failed", "type": "engine_error"}})
            await resp.write(b"data: [DONE]\n\n")
            return resp
        words = text.split(" ")
        n = int(d.get("chunks", "8"))
        per = int(d["per"]) if "per" in d else max(1, -(-len(words) // n))
        pieces = (
            [
                " ".join(words[i : i + per]) + (" " if i + per < len(words) else "")
                for i in range(0, len(words), per)
            ]
            if text
            else []
        )
        if "loop_after" in d:
            k = int(d["loop_after"])
            pieces = [*pieces[:k], *["I will repeat this sentence again. "] * 60]
        if "leak_after" in d:
            k = int(d["leak_after"])
            pieces = [*pieces[:k], "<|im_end|>", *pieces[k:]]
        try:
            await resp.write(b": keep-alive\n\n")
            if chat:
                await send(chunk({"role": "assistant", "content": ""}))
            if calls:
                await send(chunk({"tool_calls": [{"index": 0, **calls[0]}]}))
            for i, piece in enumerate(pieces):
                if "cut_after" in d and i >= int(d["cut_after"]):
                    assert request.transport is not None
                    request.transport.close()
                    return resp
                if "stall_after" in d and i >= int(d["stall_after"]):
                    await asyncio.sleep(3600)
                if "error_after" in d and i >= int(d["error_after"]):
                    await send({"error": {"message": f"{self.name} broke", "code": 500}})
                    await resp.write(b"data: [DONE]\n\n")
                    return resp
                await send(chunk({"content": piece} if chat else piece))
                await asyncio.sleep(float(d.get("gap", "0")))
            if "stall_after" in d and not pieces:
                await asyncio.sleep(3600)
            await send(chunk({} if chat else "", finish))
            if (body.get("stream_options") or {}).get("include_usage"):
                await send({**base, "object": obj, "choices": [], "usage": usage})
            await resp.write(b"data: [DONE]\n\n")
        except (ConnectionResetError, asyncio.CancelledError):
            self.cancelled += 1
            raise
        return resp


def make_app(name: str) -> web.Application:
    eng = Engine(name)
    app = web.Application()

    async def models(_: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": name, "object": "model"}]})

    async def requests(_: web.Request) -> web.Response:
        return web.json_response(eng.requests)

    async def reset(_: web.Request) -> web.Response:
        eng.requests.clear()
        eng.cancelled = 0
        return web.json_response({"ok": True})

    async def cancelled(_: web.Request) -> web.Response:
        return web.json_response({"cancelled": eng.cancelled})

    async def health(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    app.router.add_post("/v1/chat/completions", eng.handle)
    app.router.add_post("/v1/completions", eng.handle)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    app.router.add_get("/_requests", requests)
    app.router.add_post("/_reset", reset)
    app.router.add_get("/_cancelled", cancelled)
    return app


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--name", required=True)
    ap.add_argument("--port", type=int, required=True)
    a = ap.parse_args()
    web.run_app(
        make_app(a.name),
        host="127.0.0.1",
        port=a.port,
        access_log=None,
        print=lambda s: print(s, flush=True),
        handler_cancellation=True,
    )
