"""A sink that records what a stream sent its client, so the answer can be kept.

It sits in front of the client's sink (and of a Responses API translation, so it records
the chat events the relay wrote) and keeps a copy up to a limit; past it, the answer is
too large to keep and recording stops. :meth:`answer` assembles the client's JSON answer
from the recorded events — only when the stream ended with ``data: [DONE]`` and carried
no error event.
"""

from __future__ import annotations

from typing import Any, Protocol

import orjson

from gateway.dispatch.assemble import assemble
from gateway.upstream.framing import data_payloads


class Sink(Protocol):
    async def write(self, data: bytes) -> None: ...

    async def write_eof(self, data: bytes = b"") -> None: ...


class Tee:
    __slots__ = ("_buf", "_inner", "_limit", "overflow")

    def __init__(self, inner: Sink, limit: int):
        self._inner = inner
        self._limit = limit
        self._buf = bytearray()
        self.overflow = False

    async def write(self, data: bytes) -> None:
        if not self.overflow:
            if len(self._buf) + len(data) > self._limit:
                self.overflow = True
                self._buf = bytearray()
            else:
                self._buf += data
        await self._inner.write(data)

    async def write_eof(self, data: bytes = b"") -> None:
        await self._inner.write_eof(data)

    def answer(self, kind: str) -> dict[str, Any] | None:
        """The answer the client got, as its JSON object; None when it was cut short,
        broken, or too large to record."""
        if self.overflow:
            return None
        events: list[dict[str, Any]] = []
        done = False
        for payload in data_payloads(bytes(self._buf)):
            if payload.strip() == b"[DONE]":
                done = True
                continue
            try:
                ev = orjson.loads(payload)
            except orjson.JSONDecodeError:
                return None
            if not isinstance(ev, dict) or "error" in ev:
                return None
            events.append(ev)
        if not done or not events:
            return None
        return assemble(kind, events)
