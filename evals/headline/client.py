"""One request of a headline run and what its answer carried: timings, tokens, the
gateway's headers and comments, and the defect (loop, leak, cut, or a task's shape).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from evals.headline.mix import body as mix_body
from evals.headline.mix import prompt as mix_prompt
from evals.headline.mix import shape_defect
from gateway.checks.config import RepetitionSettings
from gateway.checks.repetition import find_loop_start

LEAKS = ("<|im_end|>", "<|im_start|>", "<|endoftext|>", "<|eot_id|>")
TOPICS = ("tea", "rivers", "bridges", "owls", "glass", "maps", "bread", "tides", "chess")


@dataclass
class Target:
    name: str
    url: str
    model: str
    gateway: bool = False


@dataclass
class Sample:
    target: str
    mode: str
    clients: int
    ok: bool
    ttft_s: float | None = None
    latency_s: float = 0.0
    tokens: int = 0
    defect: str | None = None
    error: str | None = None
    tier: str | None = None
    fallback: bool = False
    hedge: bool = False
    # the gateway's own words for it: x-gateway-fallback, -hedge, -continued (a stream's
    # later ones come as comments after its events)
    why: dict[str, str] = field(default_factory=dict)
    index: int = -1  # the prompt's (the same prompt on every target)
    kind: str = "chat"  # the mix's kind of request (evals.headline.mix)


def _body(target: Target, i: int, stream: bool) -> dict[str, Any]:
    topic = TOPICS[i % len(TOPICS)]
    body: dict[str, Any] = {
        "model": target.model,
        "messages": [{"role": "user", "content": f"Tell me about {topic} ({i})."}],
        "max_tokens": 200,
        "stream": stream,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


WHY = ("x-gateway-fallback", "x-gateway-hedge", "x-gateway-continued", "x-gateway-finish")


@dataclass
class Got:
    """What an answer carried: its text, whether it finished, its tool calls' arguments."""

    text: str = ""
    finished: bool = False
    tool_args: list[str] = field(default_factory=list)


def _defect(text: str, finished: bool) -> str | None:
    if any(t in text for t in LEAKS):
        return "leak"
    if find_loop_start(text, RepetitionSettings()) is not None:
        return "loop"
    if not finished:
        return "cut"
    return None


async def _stream(resp: aiohttp.ClientResponse, s: Sample, t0: float) -> Got:
    parts: list[str] = []
    args: dict[int, str] = {}
    finished = done = False
    buf = b""
    async for chunk in resp.content.iter_any():
        buf += chunk
        while b"\n\n" in buf:
            event, buf = buf.split(b"\n\n", 1)
            for line in event.split(b"\n"):
                if line.startswith(b": x-gateway-"):  # what happened after the head
                    name, _, value = line[2:].decode(errors="replace").partition(" ")
                    s.why[name] = value
                    s.fallback = s.fallback or name == "x-gateway-fallback"
                if not line.startswith(b"data: "):
                    continue
                data = line[6:]
                if data == b"[DONE]":
                    done = True
                    continue
                obj = json.loads(data)
                if "error" in obj:
                    s.error = "error_event"
                    continue
                if obj.get("usage"):
                    s.tokens = int(obj["usage"].get("completion_tokens") or s.tokens)
                for ch in obj.get("choices") or ():
                    delta = ch.get("delta") or {}
                    for tc in delta.get("tool_calls") or ():
                        i = tc.get("index", 0)
                        args[i] = args.get(i, "") + (
                            (tc.get("function") or {}).get("arguments") or ""
                        )
                        if s.ttft_s is None:
                            s.ttft_s = time.perf_counter() - t0
                    text = delta.get("content")
                    if text:
                        if s.ttft_s is None:
                            s.ttft_s = time.perf_counter() - t0
                        parts.append(text)
                    finished = finished or bool(ch.get("finish_reason"))
    if not s.tokens:
        s.tokens = len(parts)
    return Got("".join(parts), finished and done, [args[k] for k in sorted(args)])


def _plain(obj: dict[str, Any], s: Sample) -> Got:
    ch = obj["choices"][0]
    msg = ch["message"]
    text = msg.get("content") or ""
    calls = msg.get("tool_calls") or []
    usage = obj.get("usage") or {}
    s.tokens = int(usage.get("completion_tokens") or len(text.split()))
    args = [(c.get("function") or {}).get("arguments") or "" for c in calls]
    return Got(text, bool(ch.get("finish_reason")), args)


async def one(
    session: aiohttp.ClientSession,
    target: Target,
    i: int,
    mode: str,
    clients: int,
    a: argparse.Namespace,
) -> Sample:
    stream = mode == "stream"
    s = Sample(target.name, mode, clients, ok=False, index=i)
    tasks = a.mix == "tasks"
    s.kind = mix_prompt(i).kind if tasks else "chat"
    body = mix_body(target.model, i, stream) if tasks else _body(target, i, stream)
    t0 = time.perf_counter()
    url = target.url + "/v1/chat/completions"
    try:
        async with asyncio.timeout(a.timeout), session.post(url, json=body) as r:
            s.tier = r.headers.get("x-gateway-tier")
            s.fallback = "x-gateway-fallback" in r.headers
            s.hedge = "x-gateway-hedge" in r.headers
            s.why = {k: r.headers[k] for k in WHY if k in r.headers}
            if r.status != 200:
                s.error = f"http_{r.status}"
                await r.read()
                return s
            if stream:
                got = await _stream(r, s, t0)
            else:
                obj = await r.json()
                s.ttft_s = time.perf_counter() - t0
                got = _plain(obj, s)
    except TimeoutError:
        s.error = "timeout"
        return s
    except (aiohttp.ClientError, ValueError, KeyError) as e:
        s.error = type(e).__name__
        return s
    s.latency_s = time.perf_counter() - t0
    if s.error is None:
        s.defect = shape_defect(s.kind, got.text, got.tool_args) or _defect(got.text, got.finished)
    s.ok = s.error is None
    return s
