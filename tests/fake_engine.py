"""A scriptable OpenAI-compatible engine process for end-to-end tests (the I/O boundary).

Started as its own process on a real socket: ``python tests/fake_engine.py --name
highspeed --port P``. What it answers is chosen by the test, per request, with
directives inside any message (or the prompt)::

    [[highspeed: status=500]]            this engine answers HTTP 500
    [[*: text=Hello there]]              every engine answers "Hello there"
    [[highspeed: loop; chunks=40]]       looping text, streamed in 40 chunks

Directives: text=..., loop, leak, empty, length, big=N (one N-character word), malformed,
status=N, delay=S (before the answer / the first chunk; fresh_delay=S: only when the
request does not continue an assistant prefix), no_prefill (a request that continues an
assistant prefix gets a 400, as an engine without prefill answers), hang, json=<raw JSON text>,
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

``--model M`` sets the model id ``/v1/models`` lists (default: the name); with
``--strict`` a request naming another model gets vLLM's 404. ``--context N``: a context
window of N tokens (4 characters a token, over every message and ``max_tokens``), listed as
``max_model_len`` and refused past it with vLLM's 400 (``--context-quiet``: not listed).
``POST /v1/embeddings`` answers a small deterministic vector per input
(``encoding_format`` float or base64).

``GET /model_info`` and ``/server_info`` (and their ``get_`` forms) answer as SGLang's
do, for an SGLang Model Gateway in front of fake engines.

``GET /_requests`` lists the bodies received (newest last), ``POST /_reset`` clears
them, ``GET /_cancelled`` counts streams whose client went away before the end.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import re
import struct
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
    def __init__(self, name: str, model: str | None = None, strict: bool = False, context: int = 0):
        self.name = name
        self.model = model or name
        self.strict = strict
        self.context = context  # tokens; 0: no limit
        self.requests: list[dict[str, Any]] = []
        self.cancelled = 0

    def wrong_model(self, body: dict[str, Any]) -> web.Response | None:
        if not self.strict or body.get("model") == self.model:
            return None
        msg = f"The model `{body.get('model')}` does not exist."
        err = {"object": "error", "message": msg, "type": "NotFoundError", "code": 404}
        return web.json_response(err, status=404)

    async def embeddings(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests.append(body)
        bad = self.wrong_model(body)
        if bad is not None:
            return bad
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        d = directives({"prompt": " ".join(map(str, inputs))}, self.name)
        if "status" in d:
            err = {"error": {"message": f"{self.name} says {d['status']}", "code": d["status"]}}
            return web.json_response(err, status=int(d["status"]))
        data = []
        for i, text in enumerate(inputs):
            vec = [float(len(str(text))), float(i), 0.5]
            emb: Any = vec
            if body.get("encoding_format") == "base64":
                emb = base64.b64encode(struct.pack(f"<{len(vec)}f", *vec)).decode()
            data.append({"object": "embedding", "index": i, "embedding": emb})
        usage = {"prompt_tokens": len(inputs), "total_tokens": len(inputs)}
        return web.json_response(
            {"object": "list", "data": data, "model": body.get("model"), "usage": usage}
        )

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

    def too_long(self, body: dict[str, Any]) -> web.Response | None:
        if not self.context:
            return None
        chars = len(json.dumps(body.get("messages") or body.get("prompt") or ""))
        need = chars // 4 + int(body.get("max_tokens") or body.get("max_completion_tokens") or 0)
        if need <= self.context:
            return None
        msg = (
            f"This model's maximum context length is {self.context} tokens. However, you "
            f"requested {need} tokens. Please reduce the length of the messages."
        )
        err = {"object": "error", "message": msg, "type": "BadRequestError", "code": 400}
        return web.json_response(err, status=400)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        bad = self.wrong_model(body) or self.too_long(body)
        if bad is not None:
            return bad
        d = directives(body, self.name)
        # the sleeps below are the scripted slowness a test asks for (delay, hang, gap...)
        if "delay" in d:
            await asyncio.sleep(float(d["delay"]))
        msgs = body.get("messages") or [{}]
        if "fresh_delay" in d and msgs[-1].get("role") != "assistant":
            await asyncio.sleep(float(d["fresh_delay"]))
        if "hang" in d:
            await asyncio.sleep(3600)
        if "no_prefill" in d and msgs[-1].get("role") == "assistant":
            err = {"object": "error", "message": "assistant prefill is not supported", "code": 400}
            return web.json_response(err, status=400)
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


def responses_view(body: dict[str, Any]) -> dict[str, Any]:
    """A Responses API body seen as chat messages (enough for directives and echo)."""
    inp = body.get("input")
    msgs: list[dict[str, Any]] = []
    if isinstance(body.get("instructions"), str):
        msgs.append({"role": "system", "content": body["instructions"]})
    if isinstance(inp, str):
        msgs.append({"role": "user", "content": inp})
    for item in inp if isinstance(inp, list) else []:
        c = item.get("content")
        if isinstance(c, list):
            c = "".join(p.get("text", "") for p in c if isinstance(p, dict))
        if item.get("role") and isinstance(c, str):
            msgs.append({"role": item["role"], "content": c})
    return {"messages": msgs}


class ResponsesEngine:
    """``POST /v1/responses`` of the fake engine (as vLLM and SGLang serve it)."""

    def __init__(self, eng: Engine):
        self.eng = eng

    async def handle(self, request: web.Request) -> web.StreamResponse:
        eng = self.eng
        body = await request.json()
        eng.requests.append(body)
        bad = eng.wrong_model(body)
        if bad is not None:
            return bad
        view = responses_view(body)
        d = directives(view, eng.name)
        if "status" in d:
            err = {"error": {"message": f"{eng.name} says {d['status']}", "code": d["status"]}}
            return web.json_response(err, status=int(d["status"]))
        text, finish, calls = eng.answer(view, d)
        output: list[dict[str, Any]] = []
        if text:
            part = {"type": "output_text", "text": text, "annotations": []}
            output.append(
                {
                    "id": "msg_1",
                    "type": "message",
                    "role": "assistant",
                    "status": "completed",
                    "content": [part],
                }
            )
        for c in calls:
            output.append(
                {
                    "id": "fc_1",
                    "type": "function_call",
                    "status": "completed",
                    "call_id": c["id"],
                    "name": c["function"]["name"],
                    "arguments": c["function"]["arguments"],
                }
            )
        usage = {"input_tokens": 7, "output_tokens": max(1, len(text.split())), "total_tokens": 0}
        resp = {
            "id": f"resp_{eng.name}_{len(eng.requests)}",
            "object": "response",
            "created_at": int(time.time()),
            "model": body.get("model"),
            "status": "incomplete" if finish == "length" else "completed",
            "output": output,
            "usage": usage,
        }
        if not body.get("stream"):
            return web.json_response(resp)
        return await self.stream(request, resp, text, d)

    async def stream(
        self, request: web.Request, resp: dict[str, Any], text: str, d: dict[str, str]
    ) -> web.StreamResponse:
        out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await out.prepare(request)

        async def send(kind: str, **fields: Any) -> None:
            doc = {"type": kind, **fields}
            await out.write(f"event: {kind}\ndata: {json.dumps(doc)}\n\n".encode())

        await send("response.created", response={**resp, "status": "in_progress", "output": []})
        if "first_error" in d:
            await send("error", message=f"{self.eng.name} failed", code="server_error")
            return out
        for i, item in enumerate(resp["output"]):
            empty: dict[str, object] = (
                {"arguments": ""} if item["type"] == "function_call" else {"content": []}
            )
            await send("response.output_item.added", output_index=i, item={**item, **empty})
            if item["type"] == "message":
                words = text.split(" ")
                for j, w in enumerate(words):
                    piece = w + (" " if j < len(words) - 1 else "")
                    await send(
                        "response.output_text.delta",
                        item_id=item["id"],
                        output_index=i,
                        content_index=0,
                        delta=piece,
                    )
                    await asyncio.sleep(float(d.get("gap", "0")))  # the scripted pace
            else:
                await send(
                    "response.function_call_arguments.delta",
                    item_id=item["id"],
                    output_index=i,
                    delta=item["arguments"],
                )
            await send("response.output_item.done", output_index=i, item=item)
        await send("response.completed", response=resp)
        return out


def make_app(
    name: str,
    model: str | None = None,
    strict: bool = False,
    context: int = 0,
    context_listed: bool = True,
) -> web.Application:
    eng = Engine(name, model, strict, context)
    app = web.Application(client_max_size=64 << 20)  # as an engine: long prompts

    async def models(_: web.Request) -> web.Response:
        card: dict[str, Any] = {"id": eng.model, "object": "model"}
        if context and context_listed:
            card["max_model_len"] = context
        return web.json_response({"object": "list", "data": [card]})

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

    async def model_info(_: web.Request) -> web.Response:  # as SGLang: an SMG router asks
        return web.json_response({"model_path": eng.model, "is_generation": True})

    async def server_info(_: web.Request) -> web.Response:
        return web.json_response({"served_model_name": eng.model, "model_path": eng.model})

    app.router.add_post("/v1/chat/completions", eng.handle)
    app.router.add_post("/v1/completions", eng.handle)
    app.router.add_post("/v1/embeddings", eng.embeddings)
    app.router.add_post("/v1/responses", ResponsesEngine(eng).handle)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    for path in ("/model_info", "/get_model_info"):
        app.router.add_get(path, model_info)
    for path in ("/server_info", "/get_server_info"):
        app.router.add_get(path, server_info)
    app.router.add_get("/_requests", requests)
    app.router.add_post("/_reset", reset)
    app.router.add_get("/_cancelled", cancelled)
    return app


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--name", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--model", default=None)
    ap.add_argument("--strict", action="store_true")
    ap.add_argument("--context", type=int, default=0)
    ap.add_argument("--context-quiet", action="store_true")
    a = ap.parse_args()
    web.run_app(
        make_app(a.name, a.model, a.strict, a.context, not a.context_quiet),
        host="127.0.0.1",
        port=a.port,
        access_log=None,
        print=lambda s: print(s, flush=True),
        handler_cancellation=True,
    )
