"""What a connection may cost the gateway, through its real sockets: connections that send
nothing and headers that trickle in are closed after the idle timeout; large bodies held at
once are capped (the next gets a 503 with Retry-After before a byte of it is read); and at
SIGTERM the listener stays open for a moment, so a request on an idle keep-alive connection
is answered (with ``Connection: close``), not cut by the close."""

from __future__ import annotations

import http.client
import json
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest
from aiohttp import web

from gateway.server.bodies import SMALL, TRIM_AFTER, BodyBudget
from tests.conftest import rules_for_tests, start_gateway
from tests.test_dispatch_memory import aio
from tests.waiting import wait_until, wait_until_async

pytestmark = pytest.mark.processes

IDLE = 1.0
CAP = 4 << 20  # bytes of large bodies held at once


@pytest.fixture(scope="module")
def tight(engines: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    env = {
        "GATEWAY_IDLE_TIMEOUT": str(IDLE),
        "GATEWAY_MAX_BODY_BYTES_IN_FLIGHT": str(CAP),
        "GATEWAY_BODY_TIMEOUT": "20",
    }
    proc, url = start_gateway(tmp_path_factory.mktemp("conn"), rules_for_tests(), engines, env)
    yield url
    proc.stop()


def _connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    s = socket.create_connection((host, int(port)), timeout=10)
    return s


def _closed_after(s: socket.socket) -> float:
    """Seconds until the server closes ``s`` (reading whatever it sends first)."""
    t0 = time.monotonic()
    while s.recv(65536):
        pass
    return time.monotonic() - t0


def test_a_connection_that_sends_nothing_is_closed_after_the_idle_timeout(tight: str) -> None:
    with _connect(tight) as s:
        took = _closed_after(s)
    assert IDLE * 0.5 <= took <= IDLE + 3, took


def test_headers_sent_a_byte_at_a_time_are_cut_at_the_idle_timeout(tight: str) -> None:
    head = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 200
    with _connect(tight) as s:
        t0 = time.monotonic()
        with pytest.raises((BrokenPipeError, ConnectionResetError)):
            for i in range(len(head)):
                s.sendall(head[i : i + 1])
                time.sleep(0.05)  # 20 bytes a second: the head would take 10 s
                if time.monotonic() - t0 > IDLE + 5:
                    pytest.fail("the trickling head was never cut")
        took = time.monotonic() - t0
    assert took <= IDLE + 3, took


def test_a_keep_alive_connection_in_use_is_not_cut_by_the_idle_timeout(tight: str) -> None:
    conn = http.client.HTTPConnection(tight.removeprefix("http://"), timeout=10)
    try:
        for _ in range(4):  # each request within the timeout of the last answer
            conn.request("GET", "/healthz")
            resp = conn.getresponse()
            assert resp.status == 200
            resp.read()
            time.sleep(IDLE * 0.6)
    finally:
        conn.close()


def test_large_bodies_over_the_cap_get_a_503_before_being_read(tight: str) -> None:
    size = 3 << 20  # each under the 10 MiB body limit; two are over the 4 MiB cap
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {size}\r\n\r\n"
    ).encode()
    with _connect(tight) as first:
        first.sendall(head + b'{"model": "auto", "messages": [')  # held: the body is coming
        time.sleep(0.3)
        conn = http.client.HTTPConnection(tight.removeprefix("http://"), timeout=10)
        try:
            body = json.dumps(
                {"model": "auto", "messages": [{"role": "user", "content": "x" * size}]}
            )
            conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
            resp = conn.getresponse()
            err = json.loads(resp.read())["error"]
            assert resp.status == 503, err
            assert err["code"] == "server_overloaded" and "MiB of request bodies" in err["message"]
            assert resp.getheader("Retry-After") == "1"
        finally:
            conn.close()
    # the first one gone (its handler sees the disconnect), a large body is taken again: a
    # 400 for its content, not a 503
    wait_until(lambda: _post_status(tight, "x" * size) == 400, "a large body taken again")


def _post_status(url: str, body: str) -> int:
    conn = http.client.HTTPConnection(url.removeprefix("http://"), timeout=10)
    try:
        conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        resp.read()
        return resp.status
    finally:
        conn.close()


class _Req:
    def __init__(self, length: int | None, body: bool = True) -> None:
        self.content_length = length
        self.body_exists = body


def _req(length: int | None, body: bool = True) -> web.BaseRequest:
    """A stand-in with the two attributes ``BodyBudget.take`` reads."""
    return cast(web.BaseRequest, _Req(length, body))


@pytest.mark.parametrize(
    ("held", "length", "body", "taken"),
    [
        (0, None, False, 0),  # no body
        (0, SMALL, True, 0),  # small bodies are not counted
        (0, 9 << 20, True, 9 << 20),  # one body is always taken, even over the cap
        (1 << 20, 2 << 20, True, 2 << 20),  # within the cap
        (1 << 20, 4 << 20, True, None),  # over it: refused
        (1 << 20, None, True, None),  # chunked: counted at the size limit
        (0, None, True, 10 << 20),
    ],
)
def test_the_body_budget(held: int, length: int | None, body: bool, taken: int | None) -> None:
    b = BodyBudget(cap=4 << 20, max_body=10 << 20, trim=lambda: None)
    b.held = held
    if taken is None:
        with pytest.raises(Exception, match="MiB of request bodies"):
            b.take(_req(length, body))
        assert b.held == held
    else:
        assert b.take(_req(length, body)) == taken
        assert b.held == held + taken


@aio
async def test_the_last_large_body_let_go_trims_the_allocator_at_most_once_a_second() -> None:
    calls: list[float] = []
    b = BodyBudget(cap=64 << 20, max_body=10 << 20, trim=lambda: calls.append(time.monotonic()))
    a, c = b.take(_req(TRIM_AFTER)), b.take(_req(TRIM_AFTER))
    b.give(a)
    assert calls == []  # another large body is still held
    b.give(c)
    assert len(calls) == 1 and b.held == 0
    b.give(b.take(_req(TRIM_AFTER)))
    assert len(calls) == 1  # within the second: deferred to its end, not dropped
    b.give(b.take(_req(SMALL + 1)))  # under 1 MiB: never trims
    await wait_until_async(lambda: len(calls) == 2, "the deferred trim")
    assert calls[1] - calls[0] >= 0.99 and b.trims == 2


def test_at_sigterm_an_idle_keep_alive_connection_is_still_answered(
    engines: dict[str, str], tmp_path: Path
) -> None:
    drain, listen = 3.0, 1.5
    env = {"GATEWAY_DRAIN_SECONDS": str(drain), "GATEWAY_DRAIN_LISTEN_SECONDS": str(listen)}
    proc, url = start_gateway(tmp_path, rules_for_tests(), engines, env)
    addr = url.removeprefix("http://")
    kept = http.client.HTTPConnection(addr, timeout=10)
    try:
        kept.request("GET", "/healthz")
        resp = kept.getresponse()
        resp.read()
        assert resp.status == 200 and resp.getheader("Connection", "").lower() != "close"
        t0 = time.monotonic()
        proc.p.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        fresh = http.client.HTTPConnection(addr, timeout=5)  # new connections: still accepted
        fresh.request("GET", "/readyz")
        ready = fresh.getresponse()
        ready.read()
        fresh.close()
        assert ready.status == 503  # balancers move off
        kept.request("GET", "/healthz")  # the idle keep-alive, reused: answered
        resp = kept.getresponse()
        resp.read()
        assert resp.status == 200 and resp.getheader("Connection", "").lower() == "close"
        rc = proc.p.wait(drain + 10)
        took = time.monotonic() - t0
        assert rc == 0
        assert listen * 0.8 <= took <= drain + 3, took
    finally:
        kept.close()
        proc.stop()
