"""The engine-facing HTTP/1.1 client, against raw asyncio servers on real sockets.

Each server answers with exact bytes, so the cases engines produce (keep-alive or not,
chunked, close-delimited, a pooled connection closed while idle, malformed answers,
silence) are reproduced as they are on the wire.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from gateway.dispatch.fallback import reason, verdict
from gateway.upstream.failures import (
    AnswerTimeout,
    AttemptFailed,
    ConnectFailed,
    ConnectionReset,
    MalformedAnswerHead,
    Stall,
    StreamCut,
    UpstreamRateLimited,
)
from gateway.upstream.transport import HttpTransport, Timeouts
from tests.waiting import wait_until_async

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
LIMITS = Timeouts(total=5.0, connect=1.0, read_gap=1.0)
BODY = b'{"model": "m"}'


async def serve(handler: Handler) -> tuple[asyncio.Server, str, list[int]]:
    """A server; the list counts its accepted connections."""
    accepted: list[int] = []

    async def on_conn(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        accepted.append(1)
        try:
            await handler(r, w)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            w.close()

    server = await asyncio.start_server(on_conn, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}/v1/chat/completions", accepted


async def read_request(r: asyncio.StreamReader) -> bytes:
    head = await r.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    return head + await r.readexactly(length)


def answer(body: bytes, ctype: bytes = b"application/json", extra: bytes = b"") -> bytes:
    return (
        b"HTTP/1.1 200 OK\r\nContent-Type: " + ctype + b"\r\nContent-Length: "
        + str(len(body)).encode() + b"\r\n" + extra + b"\r\n" + body
    )  # fmt: skip


def chunked(events: list[bytes]) -> bytes:
    out = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    for e in events:
        out += f"{len(e):x}\r\n".encode() + e + b"\r\n"
    return out + b"0\r\n\r\n"


async def read_all(t: HttpTransport, url: str, stream: bool = True) -> bytes:
    up = await t.open(url, BODY, LIMITS, stream)
    parts = []
    while chunk := await up.read():
        parts.append(chunk)
    up.release()
    return b"".join(parts)


def run(coro: Awaitable[None]) -> None:
    asyncio.run(asyncio.wait_for(coro, 20))


EVENTS = [b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n', b"data: [DONE]\n\n"]


def test_keep_alive_connections_are_reused_and_the_request_is_well_formed() -> None:
    seen: list[bytes] = []

    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        while True:
            seen.append(await read_request(r))
            w.write(chunked(EVENTS))
            await w.drain()

    async def main() -> None:
        server, url, accepted = await serve(handler)
        t = HttpTransport(10, 30)
        for _ in range(5):
            assert await read_all(t, url) == b"".join(EVENTS)
        await t.close()
        server.close()
        assert len(accepted) == 1
        head, _, body = seen[0].partition(b"\r\n\r\n")
        assert head.startswith(b"POST /v1/chat/completions HTTP/1.1\r\n")
        assert b"Host: 127.0.0.1:" in head and b"Content-Length: 14" in head
        assert body == BODY

    run(main())


@pytest.mark.parametrize("extra", [b"Connection: close\r\n"], ids=["connection-close"])
def test_an_answer_that_closes_is_not_reused(extra: bytes) -> None:
    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await read_request(r)
        w.write(answer(b'{"ok": 1}', extra=extra))
        await w.drain()

    async def main() -> None:
        server, url, accepted = await serve(handler)
        t = HttpTransport(10, 30)
        for _ in range(3):
            assert await read_all(t, url, stream=False) == b'{"ok": 1}'
        await t.close()
        server.close()
        assert len(accepted) == 3

    run(main())


def test_a_pooled_connection_closed_by_the_engine_is_replaced_once() -> None:
    """llama.cpp's server closes a connection after each stream, Keep-Alive or not."""

    closed: list[int] = []

    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await read_request(r)
        w.write(chunked(EVENTS))
        await w.drain()
        w.close()  # the pooled connection is stale
        await w.wait_closed()
        closed.append(1)

    async def main() -> None:
        server, url, accepted = await serve(handler)
        t = HttpTransport(10, 30)
        for i in range(3):
            assert await read_all(t, url) == b"".join(EVENTS)

            def closes_seen(n: int = i + 1) -> bool:
                return len(closed) == n

            await wait_until_async(closes_seen, "the engine's close")
        await t.close()
        server.close()
        assert len(accepted) == 3

    run(main())


def test_a_body_without_length_ends_with_the_connection() -> None:
    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await read_request(r)
        w.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n" + b"".join(EVENTS))
        await w.drain()

    async def main() -> None:
        server, url, _ = await serve(handler)
        t = HttpTransport(10, 30)
        assert await read_all(t, url) == b"".join(EVENTS)
        await t.close()
        server.close()

    run(main())


def test_json_to_a_stream_request_is_handed_on_as_events() -> None:
    body = b'{"id":"x","choices":[{"index":0,"message":{"role":"assistant","content":"hi"}}]}'

    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await read_request(r)
        w.write(answer(body, ctype=b"application/json; charset=utf-8"))
        await w.drain()

    async def main() -> None:
        server, url, _ = await serve(handler)
        t = HttpTransport(10, 30)
        got = await read_all(t, url)
        assert got.startswith(b"data: {") and b'"delta":{"role":"assistant"' in got
        assert got.endswith(b"data: [DONE]\n\n")
        await t.close()
        server.close()

    run(main())


async def failure(handler: Handler, limits: Timeouts = LIMITS) -> AttemptFailed:
    server, url, _ = await serve(handler)
    t = HttpTransport(10, 30)
    try:
        up = await t.open(url, BODY, limits, True)
        while await up.read():
            pass
        up.release()
    except AttemptFailed as e:
        return e
    finally:
        await t.close()
        server.close()
    raise AssertionError("no failure")


async def _silent(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
    await read_request(r)
    await asyncio.sleep(10)  # silent: the timeout under test fires first


async def _stalls(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
    await read_request(r)
    w.write(chunked(EVENTS)[:-30])
    await asyncio.sleep(10)  # stalled mid-answer: the read gap under test fires first


async def _trickles(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
    await read_request(r)
    w.write(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    for _ in range(100):
        w.write(b"3\r\n: \n\r\n")
        await w.drain()
        await asyncio.sleep(0.1)  # a comment every 0.1 s: alive, but never an answer


async def _cut(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
    await read_request(r)
    w.write(chunked(EVENTS)[:-30])
    await w.drain()


async def _garbage(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
    await read_request(r)
    w.write(b"SMTP ready\r\n\r\n")
    await w.drain()


async def _hangs_up(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
    await read_request(r)


async def _busy(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
    await read_request(r)
    body = b'{"error": "busy"}'
    w.write(
        b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 2\r\nContent-Length: "
        + str(len(body)).encode() + b"\r\n\r\n" + body
    )  # fmt: skip
    await w.drain()


@pytest.mark.parametrize(
    ("handler", "limits", "kind", "why"),
    [
        (_silent, Timeouts(0.3, 1.0, 1.0), AnswerTimeout, "timeout"),
        (_stalls, Timeouts(5.0, 1.0, 0.3), Stall, "stall"),
        (_trickles, Timeouts(0.5, 1.0, 1.0), AnswerTimeout, "timeout"),
        (_cut, LIMITS, StreamCut, "stream_cut"),
        (_garbage, LIMITS, MalformedAnswerHead, "upstream"),
        (_hangs_up, LIMITS, ConnectionReset, "reset"),
        (_busy, LIMITS, UpstreamRateLimited, "http_429"),
    ],
)
def test_failures_are_attempt_failures(
    handler: Handler, limits: Timeouts, kind: type[AttemptFailed], why: str
) -> None:
    async def main() -> None:
        e = await failure(handler, limits)
        assert type(e) is kind and reason(e) == why
        if isinstance(e, UpstreamRateLimited):
            assert e.retry_after == 2.0 and verdict(e).same_tier

    run(main())


def test_a_refused_connection_is_a_connect_error() -> None:
    async def main() -> None:
        server, url, _ = await serve(_silent)
        server.close()
        await server.wait_closed()
        t = HttpTransport(10, 30)
        with pytest.raises(ConnectFailed) as e:
            await t.open(url, BODY, LIMITS, True)
        assert reason(e.value) == "connect"
        await t.close()

    run(main())


def test_connections_per_engine_are_capped() -> None:
    live, peak = [0], [0]

    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        while True:
            await read_request(r)
            live[0] += 1
            peak[0] = max(peak[0], live[0])
            await asyncio.sleep(0.05)  # generating: the requests overlap
            live[0] -= 1
            w.write(chunked(EVENTS))
            await w.drain()

    async def main() -> None:
        server, url, accepted = await serve(handler)
        t = HttpTransport(2, 30)
        got = await asyncio.gather(*(read_all(t, url) for _ in range(8)))
        assert got == [b"".join(EVENTS)] * 8
        assert peak[0] == 2 and len(accepted) == 2
        await t.close()
        server.close()

    run(main())


def test_a_large_answer_arrives_whole_with_backpressure() -> None:
    big = [b"data: " + b"x" * 60_000 + b"\n\n" for _ in range(80)]  # ~4.8 MB

    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await read_request(r)
        w.write(chunked(big))
        await w.drain()

    async def main() -> None:
        server, url, _ = await serve(handler)
        t = HttpTransport(10, 30)
        up = await t.open(url, BODY, LIMITS, True)
        total = 0
        while chunk := await up.read():
            total += len(chunk)
            await asyncio.sleep(0.001)  # a slow reader
        up.release()
        assert total == sum(map(len, big))
        await t.close()
        server.close()

    run(main())


def test_get_reads_status_and_body() -> None:
    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await r.readuntil(b"\r\n\r\n")
        w.write(b"HTTP/1.1 503 Unavailable\r\nContent-Length: 4\r\n\r\nbusy")
        await w.drain()

    async def main() -> None:
        server, url, _ = await serve(handler)
        t = HttpTransport(10, 30)
        assert await t.get(url.replace("/v1/chat/completions", "/health"), 1.0) == (503, b"busy")
        await t.close()
        server.close()

    run(main())


async def _huge_head(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
    await read_request(r)
    w.write(b"HTTP/1.1 200 OK\r\nX-Flood: ")
    for _ in range(200):  # 2 MB of one header value, never ending
        w.write(b"x" * 10_000)
        await w.drain()
    await asyncio.sleep(10)  # the head never ends


def test_an_endless_head_is_refused_early() -> None:
    async def main() -> None:
        e = await failure(_huge_head)
        assert isinstance(e, MalformedAnswerHead) and "head is over" in e.detail

    run(main())
