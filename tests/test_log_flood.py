"""Logs a client cannot flood: every refused request is counted in the metrics and only a
sample of them logged; a malformed request (a bad header, a bad request line) is a debug
line without a traceback, its bytes escaped and bounded, on both listeners.

(Issue 43: a warning line per refused request, 5.5 MB in a short load test; a traceback
at error level with the first bytes of the malformed header or URL, per request.)"""

from __future__ import annotations

import json
import logging
import re
import socket
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from gateway.telemetry.logs import LINES, MAX_DETAIL, LineBudget, escaped
from tests.conftest import Proc, rules_for_tests, start_gateway
from tests.test_tenancy import ADMIN
from tests.waiting import until

BAD_HEAD = (
    b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Bad: a\x01\x02\x1b[31m" + b"\xff" * 300 + b"\r\n\r\n"
)


def test_a_line_budget_logs_a_sample_and_says_what_it_left_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = logging.getLogger("test.budget")
    b = LineBudget(log, "refused requests", lines=3, interval=10.0)
    assert [b.allow(100.0 + i / 10) for i in range(5)] == [True, True, True, False, False]
    with caplog.at_level(logging.WARNING, logger="test.budget"):
        b.tick(105.0)  # the interval is not over: nothing yet
        assert not caplog.records
        b.tick(110.5)
    assert [r.getMessage() for r in caplog.records] == [
        "2 more refused requests not logged in 10 s (each is counted in the metrics)"
    ]
    assert b.allow(111.0) and b.left_out == 0  # a new interval, a new budget


def test_escaped_is_printable_and_bounded() -> None:
    out = escaped("X-Bad: a\x01\x1b[31m\u2028" + "\xff" * 500)
    assert out.isprintable() and out.isascii() and "\\x01" in out and "\\u2028" in out
    assert out.endswith("...[cut]") and len(out) == MAX_DETAIL + len("...[cut]")
    assert escaped("short") == "short"


def _malformed(url: str, n: int) -> None:
    host, port = url.removeprefix("http://").split(":")
    for _ in range(n):
        with socket.create_connection((host, int(port)), timeout=5) as s:
            s.sendall(BAD_HEAD)
            assert s.recv(64).startswith((b"HTTP/1.0 400", b"HTTP/1.1 400"))


def _errors(base: str) -> dict[str, float]:
    with urllib.request.urlopen(f"{base}/metrics", timeout=10) as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    for m in re.finditer(r'^gateway_errors_total\{[^}]*kind="([^"]+)"[^}]*\} (\S+)$', text, re.M):
        out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(2))
    return out


def _start(engines: dict[str, str], tmp: Path, level: str) -> tuple[Proc, str]:
    env = {"GATEWAY_ADMIN_TOKEN": ADMIN, "GATEWAY_LOG_LEVEL": level}
    proc, url = start_gateway(tmp, rules_for_tests(), engines, env)
    return proc, url


@pytest.mark.processes
def test_refused_and_malformed_requests_are_counted_and_only_sampled(
    engines: dict[str, str], tmp_path: Path
) -> None:
    proc, base = _start(engines, tmp_path, "info")
    try:
        from tests.test_tenancy import new_tenant

        key = new_tenant(proc.admin)[2]
        refused = 120
        for _ in range(refused):  # a tenant's invalid bodies: refused before any engine
            req = urllib.request.Request(
                f"{base}/v1/chat/completions",
                b"not json",
                {"Content-Type": "application/json", "Authorization": f"Bearer {key}"},
            )
            with pytest.raises(urllib.error.HTTPError) as e:
                urllib.request.urlopen(req, timeout=10)
            e.value.close()
        _malformed(base, 20)
        _malformed(proc.admin, 10)
        counted = {"invalid_json": float(refused), "malformed_request": 30.0}
        assert until(lambda: {k: _errors(base).get(k) for k in counted} == counted), _errors(base)
        log = proc.log()
    finally:
        proc.stop()
    lines = [json.loads(x) for x in log.splitlines() if x.startswith("{")]
    requests = [d for d in lines if d["logger"] == "gateway.access" and d["msg"] == "request"]
    assert len(requests) <= LINES, len(requests)  # a sample, not a line each
    assert not [d for d in lines if d["level"] == "error" or "exc" in d], "no error, no traceback"
    assert "Error handling request" not in log and "Invalid HTTP request" not in log
    assert "\x01" not in log and "\\x01" not in log  # the attacker's bytes are not at info


@pytest.mark.processes
def test_at_debug_a_malformed_request_is_one_escaped_bounded_line(
    engines: dict[str, str], tmp_path: Path
) -> None:
    proc, base = _start(engines, tmp_path, "debug")
    try:
        _malformed(base, 3)
        _malformed(proc.admin, 2)
        assert until(lambda: proc.log().count("malformed request refused") >= 5)
        log = proc.log()
    finally:
        proc.stop()
    lines = [json.loads(x) for x in log.splitlines() if x.startswith("{")]
    said = [d for d in lines if d["msg"].startswith("malformed request refused")]
    assert len(said) == 5 and all(d["level"] == "debug" and "exc" not in d for d in said)
    for d in said:
        detail = d["msg"].removeprefix("malformed request refused: ")
        assert detail.isascii() and detail.isprintable()
        assert len(detail) <= MAX_DETAIL + len("...[cut]")
    assert any("\\x01" in d["msg"] for d in said)  # escaped, not raw
    assert "Traceback" not in log
