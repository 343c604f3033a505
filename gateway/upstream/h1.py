"""A lean HTTP/1.1 client for engines: pooled keep-alive connections, httptools' parser,
the body handed over as it arrives.

Why not aiohttp's client: measured with ``python -m evals.bench.proxy`` and py-spy at 64
clients, its per-request machinery (request object, auto headers, timers, the
StreamReader's per-chunk buffering and flow-control calls) was about a quarter of the
gateway's CPU on a 53-event stream. Here a request is one ``write``; the parser (C) calls
back with the status, headers and body pieces; a read takes what has arrived. No
retries of its own, except that a pooled connection found closed by the engine before
it answered is replaced once (engines close idle keep-alive connections at will).
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import urlsplit

import httptools

_HIGH_WATER = 1 << 20  # bytes buffered before the engine's socket stops being read
MAX_HEAD_BYTES = 64 << 10  # status line and headers of an engine's answer


class Stale(Exception):
    """A reused connection was closed by the engine before it answered."""


class Cut(Exception):
    """The connection ended (or broke) before the answer was complete."""


class BadHttp(Exception):
    """The engine's bytes are not an HTTP/1.1 answer."""


@dataclass(frozen=True, slots=True)
class Target:
    """Where a URL goes: its connection pool's key, and the request line's path."""

    scheme: str
    host: str
    port: int
    path: bytes
    host_header: bytes

    @classmethod
    def parse(cls, url: str) -> Target:
        u = urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        port = u.port or (443 if u.scheme == "https" else 80)
        path = (u.path or "/") + (f"?{u.query}" if u.query else "")
        return cls(u.scheme, u.hostname, port, path.encode(), (u.netloc or u.hostname).encode())


class Conn(asyncio.Protocol):
    """One connection and the answer being read on it."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = 0.0
        self._waiter: asyncio.Future[None] | None = None
        self._error: BaseException | None = None
        self.reset()

    def reset(self) -> None:
        """Ready for the next request on this connection."""
        self._parser = httptools.HttpResponseParser(self)
        self.status = 0
        self.headers: dict[bytes, bytes] = {}
        self.chunks: list[bytes] = []
        self._buffered = 0
        self._paused = False
        self.head_done = False
        self._head_bytes = 0
        self._reusable = False
        self.complete = False
        self.seen_bytes = False

    # -- asyncio.Protocol -----------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        self.seen_bytes = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as e:
            self._error = BadHttp(str(e)[:120])
            self.close()
        if not self.head_done:
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD_BYTES:  # a status line and headers, not a flood
                self._error = BadHttp(f"the answer's head is over {MAX_HEAD_BYTES} bytes")
                self.close()
        self._wake()

    def eof_received(self) -> bool:
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.head_done and exc is None and not self.complete:
            h = self.headers  # a body without a length ends with the connection
            self.complete = b"content-length" not in h and b"transfer-encoding" not in h
        self._wake()

    # -- httptools callbacks ----------------------------------------------------------------------
    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.lower()] = value

    def on_headers_complete(self) -> None:
        self.status = self._parser.get_status_code()
        self._reusable = self._parser.should_keep_alive()  # not known any more at the end
        self.head_done = True

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)
        self._buffered += len(body)
        if self._buffered > _HIGH_WATER and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()  # backpressure: the engine waits for us

    def on_message_complete(self) -> None:
        self.complete = True

    # -- reading ----------------------------------------------------------------------------------
    def keep_alive(self) -> bool:
        return self.complete and not self.closed and self._reusable

    async def head(self, deadline: float) -> None:
        """Wait for the status line and headers."""
        while not self.head_done:
            self._check_alive(stale=not self.seen_bytes)
            await self._wait(deadline)

    async def read(self, gap: float | None, deadline: float) -> bytes:
        """What has arrived of the body (waiting up to ``gap`` for it); ``b""`` at its end."""
        while not self.chunks:
            if self.complete:
                return b""
            self._check_alive(stale=False)
            loop_now = asyncio.get_running_loop().time()
            await self._wait(deadline if gap is None else min(deadline, loop_now + gap))
        data = self.chunks[0] if len(self.chunks) == 1 else b"".join(self.chunks)
        self.chunks.clear()
        self._buffered = 0
        if self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        return data

    def _check_alive(self, stale: bool) -> None:
        if self._error is not None:
            raise self._error
        if self.closed:
            raise Stale() if stale else Cut("the engine closed the connection")

    async def _wait(self, until: float) -> None:
        loop = asyncio.get_running_loop()
        fut = self._waiter = loop.create_future()
        timer = loop.call_at(until, _expire, fut)
        try:
            await fut
        finally:
            timer.cancel()
            self._waiter = None

    def _wake(self) -> None:
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


def _expire(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_exception(TimeoutError())


class Origin:
    """The keep-alive connections to one scheme://host:port, at most ``limit`` in use."""

    def __init__(self, target: Target, limit: int, keepalive: float) -> None:
        self._target = target
        self._limit = limit
        self._keepalive = keepalive
        self._idle: list[Conn] = []
        self._active = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._ssl: ssl.SSLContext | None = (
            ssl.create_default_context() if target.scheme == "https" else None
        )

    async def acquire(self, connect_timeout: float, fresh: bool = False) -> tuple[Conn, bool]:
        """A connection (and whether it was reused), waiting while ``limit`` are in use."""
        loop = asyncio.get_running_loop()
        while True:
            while self._idle and not fresh:
                conn = self._idle.pop()
                if conn.closed or loop.time() - conn.idle_since > self._keepalive:
                    conn.close()
                    continue
                self._active += 1
                return conn, True
            if self._active < self._limit:
                break
            fut = loop.create_future()
            self._waiters.append(fut)
            try:
                await fut
            except BaseException:
                if fut.done() and not fut.cancelled():
                    self._wake_one()  # the wake it got goes to the next in line
                raise
        self._active += 1
        try:
            return await self._connect(connect_timeout), False
        except BaseException:
            self.release(None, False)
            raise

    async def _connect(self, timeout: float) -> Conn:
        t = self._target
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(timeout):
            _, conn = await loop.create_connection(
                Conn, t.host, t.port, ssl=self._ssl, server_hostname=t.host if self._ssl else None
            )
        return conn

    def release(self, conn: Conn | None, reuse: bool) -> None:
        self._active -= 1
        if conn is not None:
            if reuse and conn.keep_alive():
                conn.reset()
                conn.idle_since = asyncio.get_running_loop().time()
                self._idle.append(conn)
            else:
                conn.close()
        self._wake_one()

    def _wake_one(self) -> None:
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                break

    def close(self) -> None:
        for conn in self._idle:
            conn.close()
        self._idle.clear()


class Client:
    """Connection pools by origin; one request at a time per connection."""

    def __init__(self, limit_per_origin: int, keepalive: float) -> None:
        self._limit = limit_per_origin
        self._keepalive = keepalive
        self._origins: dict[tuple[str, str, int], Origin] = {}
        self._targets: dict[str, Target] = {}

    def target(self, url: str) -> tuple[Target, Origin]:
        t = self._targets.get(url)
        if t is None:
            t = Target.parse(url)
            if len(self._targets) < 10_000:
                self._targets[url] = t
        key = (t.scheme, t.host, t.port)
        origin = self._origins.get(key)
        if origin is None:
            origin = self._origins[key] = Origin(t, self._limit, self._keepalive)
        return t, origin

    async def send(
        self, method: bytes, url: str, body: bytes, connect_timeout: float, deadline: float
    ) -> tuple[Conn, Origin]:
        """Send a request; the connection once the answer's head has arrived. The caller
        reads the body and hands the connection back with ``origin.release``."""
        t, origin = self.target(url)
        request = _request_bytes(method, t, body)
        fresh = False
        while True:
            conn, reused = await origin.acquire(connect_timeout, fresh)
            try:
                assert conn.transport is not None
                conn.transport.write(request)
                await conn.head(deadline)
                return conn, origin
            except Stale:
                origin.release(conn, False)
                if not reused:
                    raise Cut("the engine closed the connection before answering") from None
                fresh = True  # once more, on a new connection
            except BaseException:
                origin.release(conn, False)
                raise

    def close(self) -> None:
        for origin in self._origins.values():
            origin.close()


def _request_bytes(method: bytes, t: Target, body: bytes) -> bytes:
    head: list[Any] = [
        method, b" ", t.path, b" HTTP/1.1\r\nHost: ", t.host_header,
        b"\r\nContent-Type: application/json\r\nAccept: */*\r\n",
    ]  # fmt: skip
    if body or method == b"POST":
        head += [b"Content-Length: ", str(len(body)).encode(), b"\r\n"]
    head.append(b"\r\n")
    return b"".join(head) + body
