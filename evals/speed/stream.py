"""One measured request of ``python -m evals speed``: a streamed completion, its SSE
parsed as it arrives (TTFT, TPOT, tokens, the verdict).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import aiohttp
import orjson

from evals.speed.targets import Body, Target

KEPT_HEADERS = ("x-gateway-", "x-sim-")
FALLBACK_COMMENT = b": x-gateway-fallback "


@dataclass
class Sample:
    """One measured request (seconds; ``start`` is relative to its slice's start)."""

    target: str
    cell: str
    start: float
    ok: bool = False
    error: str | None = None
    status: int | None = None
    ttft: float | None = None
    tpot: float | None = None
    latency: float | None = None
    tokens: int = 0
    token_source: str = "chunks"
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class StreamState:
    """What the SSE parser has seen so far."""

    first: float | None = None
    last: float | None = None
    chunks: int = 0
    usage_tokens: int | None = None
    done: bool = False
    error: str | None = None
    fallback: str | None = None


def _has_content(event: Body) -> bool:
    for choice in event.get("choices") or ():
        delta = choice.get("delta") or {}
        if choice.get("text") or delta.get("content") or delta.get("reasoning_content"):
            return True
        if any((c.get("function") or {}).get("arguments") for c in delta.get("tool_calls") or ()):
            return True
    return False


def feed_line(state: StreamState, line: bytes, now: float) -> None:
    """Update ``state`` with one line of an SSE body."""
    if line.startswith(FALLBACK_COMMENT):
        state.fallback = line[len(FALLBACK_COMMENT) :].decode(errors="replace").strip()
        return
    if not line.startswith(b"data:"):
        return
    data = line[5:].strip()
    if data == b"[DONE]":
        state.done = True
        return
    try:
        event = orjson.loads(data)
    except orjson.JSONDecodeError:
        state.error = state.error or "bad_event"
        return
    if not isinstance(event, dict):
        return
    if "error" in event:
        err = event["error"] if isinstance(event["error"], dict) else {}
        state.error = state.error or f"error_event:{err.get('code') or 'unknown'}"
    usage = event.get("usage")
    if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
        state.usage_tokens = usage["completion_tokens"]
    if _has_content(event):
        state.first = now if state.first is None else state.first
        state.last = now
        state.chunks += 1


def finish_sample(s: Sample, st: StreamState, t0: float, end: float) -> None:
    """Fill timings and the verdict of a 200 stream from the parser's state."""
    if st.fallback:
        s.headers["x-gateway-fallback"] = st.fallback
    s.latency = end - t0
    s.tokens = st.usage_tokens if st.usage_tokens is not None else st.chunks
    s.token_source = "usage" if st.usage_tokens is not None else "chunks"
    if st.first is not None and st.last is not None:
        s.ttft = st.first - t0
        s.tpot = (st.last - st.first) / (s.tokens - 1) if s.tokens > 1 else None
    s.error = _verdict(st)
    s.ok = s.error is None


def _verdict(st: StreamState) -> str | None:
    """Why a finished 200 stream counts as an error, or None."""
    if st.error:
        return st.error
    if not st.done:
        return "incomplete"
    return None if st.first is not None else "no_content"


async def _post(
    session: aiohttp.ClientSession, url: str, data: bytes, headers: dict[str, str]
) -> aiohttp.ClientResponse:
    """POST; once more on a fresh connection when a pooled keep-alive one was closed by the
    server (llama.cpp's closes it after every stream, whatever its Keep-Alive header says)."""
    try:
        return await session.post(url, data=data, headers=headers)
    except aiohttp.ClientConnectorError:
        raise
    except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError):
        return await session.post(url, data=data, headers=headers)


async def send(
    session: aiohttp.ClientSession,
    target: Target,
    body: Body,
    headers: dict[str, str],
    cell: str,
    origin: float,
) -> Sample:
    """Stream one request and measure it; never raises for a failed request."""
    t0 = time.perf_counter()
    s = Sample(target.name, cell, start=t0 - origin)
    try:
        async with await _post(session, target.url(body), orjson.dumps(body), headers) as resp:
            s.status = resp.status
            s.headers = {
                k.lower(): v for k, v in resp.headers.items() if k.lower().startswith(KEPT_HEADERS)
            }
            if resp.status != 200:
                await resp.read()
                s.error = f"http_{resp.status}"
                return s
            st = StreamState()
            async for line in resp.content:
                feed_line(st, line.rstrip(b"\r\n"), time.perf_counter())
            finish_sample(s, st, t0, time.perf_counter())
    except TimeoutError:
        s.error = "timeout"
    except (aiohttp.ClientError, OSError, ValueError) as exc:
        s.error = type(exc).__name__
    return s
