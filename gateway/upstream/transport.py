"""The transport seam: how the gateway talks to an engine, and nothing else.

Dispatch and relay see an :class:`UpstreamStream` (read chunks, close, release) opened by
a :class:`Transport`; they never see sockets. :class:`HttpTransport` is the real one
(pooled keep-alive HTTP/1.1 connections per pool, :mod:`gateway.upstream.h1`, never
retrying on its own: the dispatcher is the one retry layer); tests hand the dispatcher an
in-memory transport instead (``tests/memory_transport.py``), like httpx's ``MockTransport``.

Every failure is raised as a type of the attempt-failure tree
(:mod:`gateway.upstream.failures`): a refused connection, a reset, a cut, a timeout, a
stall, an engine's status, an answer that is not a completion.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Protocol

import orjson

from gateway.upstream import h1
from gateway.upstream.failures import (
    AnswerTimeout,
    AnswerTooLarge,
    AttemptFailed,
    BadBody,
    ConnectFailed,
    ConnectionReset,
    MalformedAnswerHead,
    Stall,
    StreamCut,
    status_error,
)

MAX_ERROR_BODY = 64 * 1024
MAX_JSON_ANSWER = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Limits of one upstream call: the whole call, connecting, and the gap between reads."""

    total: float
    connect: float
    read_gap: float | None


class UpstreamStream(Protocol):
    """An engine's 200 answer, read chunk by chunk."""

    async def read(self) -> bytes:
        """The next bytes; ``b""`` at the end. Raises :class:`AttemptFailed` or TimeoutError."""
        ...

    def close(self) -> None:
        """Drop the connection now: the engine stops generating."""
        ...

    def release(self) -> None:
        """The answer was read to its end: the connection may be reused."""
        ...


class Transport(Protocol):
    async def open(
        self, url: str, body: bytes, limits: Timeouts, stream: bool = True
    ) -> UpstreamStream:
        """POST ``body``; the open 200 answer, or :class:`AttemptFailed`. With ``stream``,
        a whole JSON answer is handed on as the equivalent event stream."""
        ...

    async def get(self, url: str, timeout: float) -> tuple[int, bytes]:
        """A small GET (health, metrics); raises OSError/TimeoutError/AttemptFailed."""
        ...

    async def close(self) -> None: ...


class _HttpStream:
    """An engine's answer on one pooled connection, read as it arrives."""

    __slots__ = ("_conn", "_deadline", "_gap", "_origin", "_total")

    def __init__(self, conn: h1.Conn, origin: h1.Origin, limits: Timeouts, deadline: float):
        self._conn = conn
        self._origin: h1.Origin | None = origin
        self._gap = limits.read_gap
        self._total = limits.total
        self._deadline = deadline

    async def read(self) -> bytes:
        try:
            return await self._conn.read(self._gap, self._deadline)
        except TimeoutError:
            if asyncio.get_running_loop().time() >= self._deadline:
                raise AnswerTimeout(f"the answer did not end within {self._total:.1f}s") from None
            raise Stall("no data within the stall limit") from None
        except (h1.Cut, h1.Stale, h1.BadHttp) as e:
            raise StreamCut(short(e)) from None

    def close(self) -> None:
        self._done(False)

    def release(self) -> None:
        self._done(True)

    def _done(self, reuse: bool) -> None:
        origin, self._origin = self._origin, None
        if origin is not None:  # once
            origin.release(self._conn, reuse)


class JsonAsStream:
    """A whole JSON answer to a request for a stream (some engines and providers ignore
    ``stream: true``), read and handed on as the equivalent event stream."""

    __slots__ = ("_done", "_inner")

    def __init__(self, inner: UpstreamStream):
        self._inner = inner
        self._done = False

    async def read(self) -> bytes:
        if self._done:
            return b""
        data = await read_whole(self._inner, MAX_JSON_ANSWER)
        self._done = True
        return json_as_events(data)

    def close(self) -> None:
        self._inner.close()

    def release(self) -> None:
        self._inner.release()


async def read_whole(up: UpstreamStream, limit: int) -> bytes:
    """Every byte of an answer, refused (:class:`AnswerTooLarge`) once it passes ``limit``."""
    parts, size = [], 0
    while chunk := await up.read():
        parts.append(chunk)
        size += len(chunk)
        if size > limit:
            raise AnswerTooLarge(f"the answer is over {limit} bytes")
    return b"".join(parts)


def json_as_events(data: bytes) -> bytes:
    """A chat or text completion object as the SSE events that would have carried it."""
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        raise BadBody("the answer is not JSON") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("choices"), list):
        raise BadBody("the answer is not a completion object")
    head = {k: obj[k] for k in ("id", "created", "model", "system_fingerprint") if k in obj}
    choices = []
    for ch in obj["choices"]:
        if not isinstance(ch, dict):
            raise BadBody("a choice is not an object")
        c = {k: v for k, v in ch.items() if k != "message"}
        if "message" in ch:
            c["delta"] = ch["message"]
        choices.append(c)
    events = [{**head, "choices": choices}]
    if obj.get("usage"):
        events.append({**head, "choices": [], "usage": obj["usage"]})
    return b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in events) + b"data: [DONE]\n\n"


class HttpTransport:
    """The real transport: pooled keep-alive HTTP/1.1 connections (:mod:`.h1`), no
    retries of its own."""

    def __init__(self, max_connections: int, keepalive: float):
        self._client = h1.Client(max_connections, keepalive)

    async def open(
        self, url: str, body: bytes, limits: Timeouts, stream: bool = True
    ) -> UpstreamStream:
        deadline = asyncio.get_running_loop().time() + limits.total
        conn, origin = await self._send(b"POST", url, body, limits, deadline)
        up = _HttpStream(conn, origin, limits, deadline)
        status, headers = conn.status, conn.headers  # the connection is reset once given back
        if status != 200:
            data = await _error_body(up)
            # raised as made: kept in a local of this frame, it would hold the frame (and
            # the request's body) in a cycle through its own traceback
            raise status_error(status, data, _retry_after(headers.get(b"retry-after")))
        ctype = headers.get(b"content-type", b"").split(b";")[0].strip().lower()
        if stream and ctype == b"application/json":  # it ignored "stream"
            return JsonAsStream(up)
        return up

    async def _send(
        self, method: bytes, url: str, body: bytes, limits: Timeouts, deadline: float
    ) -> tuple[h1.Conn, h1.Origin]:
        """Send, up to the answer's head; every failure as an :class:`AttemptFailed`."""
        try:
            return await self._client.send(method, url, body, limits.connect, deadline)
        except TimeoutError:
            raise AnswerTimeout(f"no response within {limits.total:.1f}s") from None
        except (h1.Cut, h1.Stale) as e:
            raise ConnectionReset(short(e) or "connection reset") from None
        except h1.BadHttp as e:
            raise MalformedAnswerHead(f"malformed HTTP answer: {short(e)}") from None
        except (OSError, ValueError) as e:
            raise ConnectFailed(short(e)) from None

    async def get(self, url: str, timeout: float) -> tuple[int, bytes]:
        limits = Timeouts(timeout, timeout, None)
        deadline = asyncio.get_running_loop().time() + timeout
        try:
            conn, origin = await self._send(b"GET", url, b"", limits, deadline)
        except AttemptFailed as e:
            raise OSError(e.detail) from None
        up = _HttpStream(conn, origin, limits, deadline)
        status = conn.status  # the connection is reset once given back
        try:
            parts = []
            while chunk := await up.read():
                parts.append(chunk)
        except AttemptFailed as e:
            up.close()
            raise OSError(e.detail) from None
        up.release()
        return status, b"".join(parts)

    async def close(self) -> None:
        self._client.close()


async def _error_body(up: _HttpStream) -> bytes:
    """An error answer's body (at most :data:`MAX_ERROR_BODY`), the connection given back."""
    parts, size = [], 0
    try:
        while size < MAX_ERROR_BODY and (chunk := await up.read()):
            parts.append(chunk)
            size += len(chunk)
    except AttemptFailed:
        up.close()
        return b"".join(parts)[:MAX_ERROR_BODY]
    if size < MAX_ERROR_BODY:
        up.release()
    else:
        up.close()
    return b"".join(parts)[:MAX_ERROR_BODY]


def _retry_after(value: bytes | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value.decode("latin-1")))
    except ValueError:
        return None  # an HTTP date: treat as no hint


def short(e: BaseException) -> str:
    s = str(e) or type(e).__name__
    return s[:160]
