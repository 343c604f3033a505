"""One connection policy for every listener the process opens, through real sockets: the
admin listener (uvicorn) closes what the data listener (aiohttp) closes -- a connection
that sends nothing, a head sent a byte at a time, a body that never arrives -- and both
answer a connection over their cap with a 503 before reading it.

(Issue 43: 3,000 connections that never finished their head stayed open on the admin
listener past 40 s, sharing the process's open files with the data plane, which closed
the same in 15 s.)"""

from __future__ import annotations

import http.client
import json
import socket
import time
from collections.abc import Iterator

import pytest

from tests.conftest import Proc, rules_for_tests, start_gateway
from tests.test_tenancy import ADMIN

pytestmark = pytest.mark.processes

IDLE = 1.0
BODY = 1.5
CAP = 6


@pytest.fixture(scope="module")
def gw(engines: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    env = {
        "GATEWAY_ADMIN_TOKEN": ADMIN,  # the admin listener is opened with a token only
        "GATEWAY_IDLE_TIMEOUT": str(IDLE),
        "GATEWAY_BODY_TIMEOUT": str(BODY),
        "GATEWAY_MAX_CONNECTIONS": str(CAP),
    }
    proc, _ = start_gateway(tmp_path_factory.mktemp("listeners"), rules_for_tests(), engines, env)
    yield proc
    proc.stop()


LISTENERS = ("data", "admin")


def _url(gw: Proc, which: str) -> str:
    return gw.url.removesuffix("/healthz") if which == "data" else gw.admin


def _connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=15)


def _closed_after(s: socket.socket) -> tuple[float, bytes]:
    """Seconds until the server closes ``s``, and what it sent first."""
    t0, got = time.monotonic(), b""
    try:
        while chunk := s.recv(65536):
            got += chunk
    except ConnectionResetError:
        pass
    return time.monotonic() - t0, got


@pytest.mark.parametrize("which", LISTENERS)
def test_a_connection_that_sends_nothing_is_closed(gw: Proc, which: str) -> None:
    with _connect(_url(gw, which)) as s:
        took, _ = _closed_after(s)
    assert IDLE * 0.5 <= took <= IDLE + 3, took


@pytest.mark.parametrize("which", LISTENERS)
def test_an_unfinished_head_is_closed(gw: Proc, which: str) -> None:
    """A head sent at once but never finished, and one sent a byte at a time."""
    with _connect(_url(gw, which)) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Never: ends")
        took, _ = _closed_after(s)
    assert took <= IDLE + 3, took
    head = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 200
    with _connect(_url(gw, which)) as s:
        t0 = time.monotonic()
        with pytest.raises(OSError):  # a broken pipe or a reset, once it is closed
            for i in range(len(head)):
                s.sendall(head[i : i + 1])
                time.sleep(0.05)  # 20 bytes a second: the head would take 10 s
                if time.monotonic() - t0 > IDLE + 5:
                    pytest.fail("the trickling head was never cut")
    assert time.monotonic() - t0 <= IDLE + 3


@pytest.mark.parametrize("which", LISTENERS)
def test_a_keep_alive_connection_in_use_is_kept(gw: Proc, which: str) -> None:
    path = "/healthz" if which == "data" else "/admin/tenants"
    conn = http.client.HTTPConnection(_url(gw, which).removeprefix("http://"), timeout=10)
    try:
        for _ in range(4):  # each request within the timeout of the last answer
            conn.request("GET", path, headers={"Authorization": f"Bearer {ADMIN}"})
            resp = conn.getresponse()
            resp.read()
            assert resp.status == 200
            time.sleep(IDLE * 0.6)
    finally:
        conn.close()


def test_the_admin_listener_closes_a_body_that_never_arrives(gw: Proc) -> None:
    with _connect(gw.admin) as s:
        s.sendall(
            b"POST /admin/tenants HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Authorization: Bearer {ADMIN}\r\nContent-Length: 100\r\n\r\n".encode()
            + b'{"name": '  # and nothing more
        )
        took, _ = _closed_after(s)
    assert BODY * 0.5 <= took <= BODY + 3, took


@pytest.mark.parametrize("which", LISTENERS)
def test_a_connection_over_the_cap_gets_a_503_at_once(gw: Proc, which: str) -> None:
    url = _url(gw, which)
    held = [_connect(url) for _ in range(CAP)]
    try:
        time.sleep(0.2)  # all accepted
        with _connect(url) as extra:
            took, got = _closed_after(extra)
        assert took < IDLE * 0.5, took  # refused, not left to time out
        head, _, body = got.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 503 ") and b"Retry-After: 1" in head, got
        err = json.loads(body)["error"]
        assert err["code"] == "overloaded" and "Too many connections" in err["message"]
    finally:
        for s in held:
            s.close()
    time.sleep(0.3)  # the held ones closed: a new connection is served again
    path = "/healthz" if which == "data" else "/admin/tenants"
    conn = http.client.HTTPConnection(url.removeprefix("http://"), timeout=10)
    try:
        conn.request("GET", path, headers={"Authorization": f"Bearer {ADMIN}"})
        assert conn.getresponse().status == 200
    finally:
        conn.close()
