"""The base of a stream translated into another API's events at the edge.

The stream relay writes the gateway's chat completion stream (chunks, an error event,
``data: [DONE]``, trailing ``: x-gateway-...`` comments), continuation and splicing
included, so a sink made on :class:`EventSink` gets one clean stream whatever happened on
the tiers. It splits the bytes into SSE blocks, hands each chunk to :meth:`EventSink.chunk`
and the end to :meth:`EventSink.end`, passes comments through, and writes the events its
subclass emitted (:mod:`gateway.server.responses_stream`,
:mod:`gateway.server.messages_stream`).
"""

from __future__ import annotations

from typing import Any, Protocol

import orjson


class Sink(Protocol):
    async def write(self, data: bytes) -> None: ...

    async def write_eof(self, data: bytes = b"") -> None: ...


class EventSink:
    """Chat SSE in, another API's events out (subclasses say which)."""

    def __init__(self, out: Sink):
        self._out = out
        self._buf = b""
        self._events: list[bytes] = []
        self._ended = False

    async def write(self, data: bytes) -> None:
        self._buf += data
        *blocks, self._buf = self._buf.split(b"\n\n")
        for block in blocks:
            self._block(block)
        await self._flush()

    async def write_eof(self, data: bytes = b"") -> None:
        if data:
            await self.write(data + (b"" if data.endswith(b"\n\n") else b"\n\n"))
        if not self._ended:
            self._ended = True
            self.end()
        await self._flush()
        await self._out.write_eof()

    def emit(self, kind: str, doc: dict[str, Any]) -> None:
        """One event: ``event: <kind>`` and its JSON."""
        self._events.append(b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(doc) + b"\n\n")

    def chunk(self, obj: dict[str, Any]) -> None:
        """One chat chunk, or the relay's ``{"error": ...}`` event."""
        raise NotImplementedError

    def end(self) -> None:
        """``[DONE]``, or the end of the bytes: called once."""
        raise NotImplementedError

    async def _flush(self) -> None:
        if self._events:
            out, self._events = b"".join(self._events), []
            await self._out.write(out)

    def _block(self, block: bytes) -> None:
        for line in block.split(b"\n"):
            if line.startswith(b":"):
                self._events.append(line + b"\n\n")  # the gateway's trailing comments
            elif line.startswith(b"data:"):
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    if not self._ended:
                        self._ended = True
                        self.end()
                elif payload and not self._ended:
                    obj = orjson.loads(payload)
                    if isinstance(obj, dict):
                        self.chunk(obj)
