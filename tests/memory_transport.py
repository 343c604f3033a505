"""An in-memory transport for the dispatcher and the relay (the I/O boundary, faked).

Like httpx's ``MockTransport``: the test hands in a function from (tier, request body) to
a :class:`Reply`, and the dispatcher runs unchanged on top of it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.rules.schema import Tier
from gateway.upstream.failures import Stall, StreamCut, status_error
from gateway.upstream.transport import Timeouts, UpstreamStream


@dataclass
class Reply:
    status: int = 200
    chunks: list[bytes] = field(default_factory=list)
    gap: float = 0.0  # before each chunk
    delay: float = 0.0  # before the first chunk
    hang_after: int | None = None  # stop sending (but keep the connection) after N chunks
    body: bytes = b""  # a non-200 answer's body
    retry_after: float | None = None


def events(
    texts: list[str], finish: str | None = "stop", done: bool = True, **usage: int
) -> list[bytes]:
    """A chat stream's SSE chunks: one per text, a finish chunk, usage, ``[DONE]``."""
    base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    out = [
        b"data: "
        + orjson.dumps(
            {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
        )
        + b"\n\n"
    ]
    for t in texts:
        out.append(
            b"data: "
            + orjson.dumps({**base, "choices": [{"index": 0, "delta": {"content": t}}]})
            + b"\n\n"
        )
    if finish is not None:
        out.append(
            b"data: "
            + orjson.dumps(
                {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}
            )
            + b"\n\n"
        )
    if usage:
        out.append(b"data: " + orjson.dumps({**base, "choices": [], "usage": usage}) + b"\n\n")
    if done:
        out.append(b"data: [DONE]\n\n")
    return out


class MemoryStream:
    def __init__(self, reply: Reply, limits: Timeouts):
        self._reply = reply
        self._limits = limits
        self._i = 0
        self.closed = False
        self.released = False

    async def read(self) -> bytes:
        r = self._reply
        if self.closed:
            raise StreamCut("closed")
        # the sleeps are the engine's behaviour under test: silence, a gap, a slow start
        if r.hang_after is not None and self._i >= r.hang_after:
            gap = self._limits.read_gap or 3600.0
            await asyncio.sleep(gap)
            raise Stall("no data within the stall limit")
        if self._i >= len(r.chunks):
            return b""
        if r.gap:
            await asyncio.sleep(r.gap)
        if r.delay and self._i == 0:
            await asyncio.sleep(r.delay)
        self._i += 1
        return r.chunks[self._i - 1]

    def close(self) -> None:
        self.closed = True

    def release(self) -> None:
        self.released = True


Handler = Callable[[str, dict[str, Any]], Reply]


class MemoryTransport:
    """One per tier; ``calls`` and ``streams`` record what the dispatcher did."""

    def __init__(self, tier: str, handler: Handler):
        self.tier = tier
        self.handler = handler
        self.calls: list[dict[str, Any]] = []
        self.streams: list[MemoryStream] = []

    async def open(
        self, url: str, body: bytes, limits: Timeouts, stream: bool = True
    ) -> UpstreamStream:
        data = orjson.loads(body)
        self.calls.append(data)
        reply = self.handler(self.tier, data)
        if reply.status != 200:
            raise status_error(reply.status, reply.body, reply.retry_after)
        s = MemoryStream(reply, limits)
        self.streams.append(s)
        return s

    async def get(self, url: str, timeout: float) -> tuple[int, bytes]:
        return 200, b""

    async def close(self) -> None:
        pass


class Transports:
    """The transport factory a Pools takes: one MemoryTransport per tier, kept for asserts."""

    def __init__(self, handler: Handler):
        self.handler = handler
        self.by_tier: dict[str, MemoryTransport] = {}

    def __call__(self, name: str, tier: Tier) -> MemoryTransport:
        t = self.by_tier[name] = MemoryTransport(name, self.handler)
        return t
