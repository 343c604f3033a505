"""Pool transport details against a hand-rolled HTTP server on a real socket."""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import free_port, rules_for_tests, start_gateway
from tests.test_tenancy import call

pytestmark = pytest.mark.processes

ANSWER = json.dumps(
    {
        "id": "x",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": "Hello from the keep-alive server."},
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 6, "total_tokens": 9},
    }
).encode()


class OneRequestPerConnection(asyncio.Protocol):
    """Answers the first request of a connection with keep-alive, then closes the
    connection when a second request arrives on it, without answering: what a server
    that closes idle connections does under a client that just picked that one."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.t, self.buf, self.n = transport, b"", 0

    def data_received(self, data: bytes) -> None:
        self.buf += data
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            return
        m = re.search(rb"content-length: *(\d+)", self.buf[:end], re.I)
        if len(self.buf) < end + 4 + (int(m.group(1)) if m else 0):
            return
        self.buf = b""
        self.n += 1
        if self.n > 1:
            self.t.close()
            return
        self.t.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
            + str(len(ANSWER)).encode()
            + b"\r\n\r\n"
            + ANSWER
        )


@pytest.fixture()
def closing_server() -> Iterator[str]:
    loop = asyncio.new_event_loop()
    port = free_port()
    server = loop.run_until_complete(loop.create_server(OneRequestPerConnection, "127.0.0.1", port))
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{port}"
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    server.close()
    loop.run_until_complete(server.wait_closed())
    loop.close()


def test_a_closed_keep_alive_connection_is_not_an_upstream_failure(
    closing_server: str, engines: dict[str, str], tmp_path: Path
) -> None:
    rules = rules_for_tests()
    rules["tiers"]["highspeed"]["health"] = {"enabled": False}
    proc, base = start_gateway(
        tmp_path, rules, {"highspeed": closing_server, "standard": engines["standard"]}
    )
    try:
        for _ in range(4):  # each reuses the connection the server is about to drop
            st, body, headers = call(
                base,
                "POST",
                "/v1/chat/completions",
                {"model": "auto", "messages": [{"role": "user", "content": "hi"}]},
            )
            assert st == 200, body
            assert headers["x-gateway-tier"] == "highspeed"
            assert "x-gateway-fallback" not in headers
    finally:
        proc.stop()


def test_half_open_circuit_lets_one_probe_through() -> None:
    from gateway.upstream.circuit import Circuit

    c = Circuit(threshold=2, cooldown=10.0)
    c.failure(0.0)
    assert c.available(1.0)  # one failure: still closed
    c.failure(1.0)
    assert not c.available(5.0)  # open
    assert c.available(11.0)  # half-open: a probe may go
    c.begin(11.0)
    assert not c.available(11.5)  # ... but only one
    c.failure(12.0)
    assert not c.available(15.0) and c.available(22.0)  # a failed probe re-opens it
    c.begin(22.0)
    assert c.available(32.5)  # a probe that never reported frees the way after a cooldown
    c.success()
    assert c.available(33.0) and not c.is_open
