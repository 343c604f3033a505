"""Cutting an engine's byte stream into complete SSE events.

:class:`SSEFramer` hands on complete events only, so that bytes are forwarded
(untouched) once the events they carry have been checked. It is linear in the bytes it
sees (no re-joining of a growing buffer) and refuses an event larger than its limit, or
a stream over its total, as :class:`AnswerTooLarge`.
"""

from __future__ import annotations

from gateway.upstream.failures import AnswerTooLarge


def data_payloads(events: bytes) -> list[bytes]:
    """The ``data:`` payloads of complete SSE events."""
    return [ln[5:].strip() for ln in events.split(b"\n") if ln.startswith(b"data:")]


class SSEFramer:
    """Splits a byte stream into complete SSE events (``\\n\\n``-terminated).

    Linear in the bytes fed: an unfinished event is kept as a list of chunks and joined
    once, when its end arrives (joining on every chunk made one huge event quadratic).
    An event over ``max_event`` bytes, or a stream over ``max_total``, is an upstream
    failure (:class:`AnswerTooLarge`), not memory without end.
    """

    __slots__ = ("_parts", "_pending", "_total", "max_event", "max_total")

    def __init__(self, max_event: int = 8 << 20, max_total: int = 64 << 20) -> None:
        self._parts: list[bytes] = []
        self._pending = 0
        self._total = 0
        self.max_event = max_event
        self.max_total = max_total

    def feed(self, chunk: bytes) -> tuple[bytes, list[bytes]]:
        """Complete events' bytes (to forward) and their ``data:`` payloads."""
        complete = self.feed_bytes(chunk)
        return complete, data_payloads(complete) if complete else []

    def feed_bytes(self, chunk: bytes) -> bytes:
        """Complete events' bytes (to forward, or for :meth:`StreamState.feed_block`)."""
        if b"\r" in chunk:
            chunk = chunk.replace(b"\r\n", b"\n")
        self._total += len(chunk)
        if self._total > self.max_total:
            raise AnswerTooLarge(f"the answer is over {self.max_total} bytes")
        parts = self._parts
        if parts:
            if b"\n\n" not in chunk and not (chunk[:1] == b"\n" and parts[-1][-1:] == b"\n"):
                return self._hold(chunk)
            parts.append(chunk)
            buf = b"".join(parts)
            parts.clear()
            self._pending = 0
        else:
            buf = chunk
        end = buf.rfind(b"\n\n")
        if end < 0:
            return self._hold(buf)
        complete = buf[: end + 2]
        if len(complete) > self.max_event:  # rare: maybe a whole huge event in one read
            self._each_within_limit(complete)
        if end + 2 < len(buf):
            self._hold(buf[end + 2 :])
        return complete

    def _each_within_limit(self, events: bytes) -> None:
        if max(map(len, events.split(b"\n\n"))) > self.max_event:
            raise AnswerTooLarge(f"an event is over {self.max_event} bytes")

    def _hold(self, data: bytes) -> bytes:
        self._parts.append(data)
        self._pending += len(data)
        if self._pending > self.max_event:
            raise AnswerTooLarge(f"an event is over {self.max_event} bytes")
        return b""

    @property
    def pending(self) -> bytes:
        return b"".join(self._parts)
