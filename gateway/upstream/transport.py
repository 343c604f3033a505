"""The transport seam: how the gateway talks to an engine, and nothing else.

Dispatch and relay see an :class:`UpstreamStream` (read chunks, close, release) opened by
a :class:`Transport`; they never see aiohttp. :class:`HttpTransport` is the real one
(one pooled keep-alive aiohttp session per pool, never retrying on its own: the
dispatcher is the one retry layer); tests hand the dispatcher an in-memory transport
instead (``tests/memory_transport.py``), the way httpx's ``MockTransport`` works.

Every failure is raised as an :class:`AttemptError` that says whether another tier may
be tried (``retryable``), whether it was a timeout, and whether the same tier may be
tried again after a short wait (``transient``: a reset, a 500/502/503, a 429 with
``Retry-After``).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Protocol

import aiohttp
import orjson

_SKIP_HEADERS = ("Accept-Encoding", "User-Agent")
_JSON = MappingProxyType({"Content-Type": "application/json"})
MAX_ERROR_BODY = 64 * 1024
MAX_JSON_ANSWER = 64 * 1024 * 1024
_TRANSIENT = frozenset((500, 502, 503, 429))


class AttemptError(Exception):
    """One attempt on one tier failed. ``kind`` is short and ASCII (it goes into headers)."""

    def __init__(
        self,
        kind: str,
        detail: str,
        *,
        retryable: bool = True,
        timeout: bool = False,
        status: int | None = None,
        body: bytes | None = None,
    ):
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail
        self.retryable = retryable
        self.timeout = timeout
        self.status = status
        self.body = body  # the upstream's own answer, for client errors relayed as they are
        self.retry_after: float | None = None  # the engine's Retry-After, seconds
        self.transient = kind == "reset" or (status is not None and status in _TRANSIENT)


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Limits of one upstream call: the whole call, connecting, and the gap between reads."""

    total: float
    connect: float
    read_gap: float | None


class UpstreamStream(Protocol):
    """An engine's 200 answer, read chunk by chunk."""

    async def read(self) -> bytes:
        """The next bytes; ``b""`` at the end. Raises :class:`AttemptError` or TimeoutError."""
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
        """POST ``body``; the open 200 answer, or :class:`AttemptError`. With ``stream``,
        a whole JSON answer is handed on as the equivalent event stream."""
        ...

    async def get(self, url: str, timeout: float) -> tuple[int, bytes]:
        """A small GET (health, metrics); raises OSError/TimeoutError/AttemptError."""
        ...

    async def close(self) -> None: ...


class _HttpStream:
    __slots__ = ("_resp",)

    def __init__(self, resp: aiohttp.ClientResponse):
        self._resp = resp

    async def read(self) -> bytes:
        try:
            return await self._resp.content.readany()
        except TimeoutError:
            raise AttemptError("stall", "no data within the stall limit", timeout=True) from None
        except aiohttp.ClientError as e:
            raise AttemptError("stream_cut", short(e)) from None

    def close(self) -> None:
        self._resp.close()

    def release(self) -> None:
        self._resp.release()


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
        parts, size = [], 0
        while chunk := await self._inner.read():
            parts.append(chunk)
            size += len(chunk)
            if size > MAX_JSON_ANSWER:
                raise AttemptError("bad_body", "the answer is over the size limit")
        self._done = True
        return json_as_events(b"".join(parts))

    def close(self) -> None:
        self._inner.close()

    def release(self) -> None:
        self._inner.release()


def json_as_events(data: bytes) -> bytes:
    """A chat or text completion object as the SSE events that would have carried it."""
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        raise AttemptError("bad_body", "the answer is not JSON") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("choices"), list):
        raise AttemptError("bad_body", "the answer is not a completion object")
    head = {k: obj[k] for k in ("id", "created", "model", "system_fingerprint") if k in obj}
    choices = []
    for ch in obj["choices"]:
        if not isinstance(ch, dict):
            raise AttemptError("bad_body", "a choice is not an object")
        c = {k: v for k, v in ch.items() if k != "message"}
        if "message" in ch:
            c["delta"] = ch["message"]
        choices.append(c)
    events = [{**head, "choices": choices}]
    if obj.get("usage"):
        events.append({**head, "choices": [], "usage": obj["usage"]})
    return b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in events) + b"data: [DONE]\n\n"


class HttpTransport:
    """The real transport: aiohttp, pooled keep-alive connections, no retries of its own."""

    def __init__(self, max_connections: int, keepalive: float):
        connector = aiohttp.TCPConnector(
            limit=0,
            limit_per_host=max_connections,
            keepalive_timeout=keepalive,
            enable_cleanup_closed=False,
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            skip_auto_headers=_SKIP_HEADERS,
            timeout=aiohttp.ClientTimeout(total=None),
        )

    async def open(
        self, url: str, body: bytes, limits: Timeouts, stream: bool = True
    ) -> UpstreamStream:
        timeout = aiohttp.ClientTimeout(
            total=limits.total, sock_connect=limits.connect, sock_read=limits.read_gap
        )
        resp = await self._post(url, body, timeout)
        if resp.status != 200:
            try:
                data = await resp.content.read(MAX_ERROR_BODY)
            except (aiohttp.ClientError, TimeoutError):
                data = b""
            resp.release()
            err = status_error(resp.status, data)
            err.retry_after = _retry_after(resp.headers.get("Retry-After"))
            raise err
        if stream and resp.content_type == "application/json":  # it ignored "stream"
            return JsonAsStream(_HttpStream(resp))
        return _HttpStream(resp)

    async def _post(
        self, url: str, body: bytes, timeout: aiohttp.ClientTimeout
    ) -> aiohttp.ClientResponse:
        """POST, up to the response headers.

        A pooled keep-alive connection the engine has already closed (llama.cpp's server
        closes one after each stream, whatever its Keep-Alive header says) fails at once
        with a disconnect: that is the transport's business, so one more try goes out on
        a fresh connection.
        """
        for last in (False, True):
            try:
                return await self._session.post(url, data=body, headers=_JSON, timeout=timeout)
            except TimeoutError:
                raise AttemptError(
                    "timeout", f"no response within {timeout.total:.1f}s", timeout=True
                ) from None
            except aiohttp.ClientConnectorError as e:
                raise AttemptError("connect", short(e)) from None
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as e:
                if last:
                    raise AttemptError("reset", short(e)) from None
            except aiohttp.ClientError as e:
                raise AttemptError("upstream", short(e)) from None
        raise AssertionError("unreachable")  # pragma: no cover

    async def get(self, url: str, timeout: float) -> tuple[int, bytes]:
        try:
            t = aiohttp.ClientTimeout(total=timeout)
            async with self._session.get(url, timeout=t) as resp:
                return resp.status, await resp.read()
        except aiohttp.ClientError as e:
            raise OSError(short(e)) from None

    async def close(self) -> None:
        await self._session.close()


def status_error(status: int, body: bytes) -> AttemptError:
    """An engine's non-200 answer. Engine bodies go to logs, never to tenants verbatim."""
    if status == 429 or status == 408 or status >= 500:
        snippet = body[:200].decode("utf-8", "replace").replace("\n", " ")
        return AttemptError(f"http_{status}", snippet or "no body", status=status)
    # other 4xx: the request itself is wrong; another tier would say the same
    return AttemptError(f"http_{status}", "client error", retryable=False, status=status, body=body)


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None  # an HTTP date: treat as no hint


def short(e: BaseException) -> str:
    s = str(e) or type(e).__name__
    return s[:160]
