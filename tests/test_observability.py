"""Metrics on /metrics, OTLP traces to a collector, JSON access logs — through real sockets."""

from __future__ import annotations

import json
import re
import sys
import threading
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from tests.conftest import Proc, free_port, rules_for_tests, start_gateway
from tests.test_e2e_proxy import chat
from tests.test_streams import sse
from tests.waiting import wait_until

pytestmark = pytest.mark.processes


def scrape(base: str) -> str:
    with urllib.request.urlopen(f"{base}/metrics", timeout=5) as r:
        assert r.headers["Content-Type"].startswith("text/plain")
        text: str = r.read().decode()
        return text


def sample(text: str, name: str, **labels: str) -> float:
    """Sum of the samples of ``name`` whose labels include ``labels``."""
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_metrics_count_requests_fallbacks_checks_and_tokens(client: Any, gateway: str) -> None:
    before = scrape(gateway)
    chat(client, "hello metrics")
    chat(client, "loop please [[highspeed: loop]]")
    sse(gateway, "stream metrics")
    after = scrape(gateway)

    def delta(name: str, **labels: str) -> float:
        return sample(after, name, **labels) - sample(before, name, **labels)

    assert delta("gateway_requests_total", tier="highspeed", task="chat", status="200") >= 2
    assert delta("gateway_fallbacks_total", tier="highspeed", reason="check_repetition") == 1
    assert delta("gateway_check_failures_total", check="repetition") == 1
    assert delta("gateway_tokens_total", direction="out") > 0
    assert delta("gateway_request_latency_seconds_count", tier="standard") >= 1
    assert delta("gateway_time_to_first_token_seconds_count", tier="highspeed") >= 1
    assert delta("gateway_upstream_attempt_seconds_count", outcome="ok") >= 2  # non-streamed
    assert 'le="0.05"' in after and 'le="0.1"' in after  # buckets that resolve P95/P99
    assert delta("gateway_overhead_seconds_count") >= 3


class _Collector(BaseHTTPRequestHandler):
    received: ClassVar[list[tuple[str, bytes]]] = []

    def do_POST(self) -> None:
        n = int(self.headers.get("Content-Length", "0"))
        self.received.append((self.path, self.rfile.read(n)))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture()
def collector() -> Iterator[tuple[str, list[tuple[str, bytes]]]]:
    _Collector.received = []
    srv = ThreadingHTTPServer(("127.0.0.1", free_port()), _Collector)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}", _Collector.received
    srv.shutdown()
    srv.server_close()


def test_traces_go_to_the_otlp_collector(
    engines: dict[str, str], tmp_path: Path, collector: tuple[str, list[tuple[str, bytes]]]
) -> None:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    url, received = collector
    proc, base = start_gateway(tmp_path, rules_for_tests(), engines, {"GATEWAY_OTLP_ENDPOINT": url})
    try:
        status, _ = _post(base, "traced [[highspeed: leak]]")
        assert status == 200
        proc.stop()  # shutdown flushes the batch span processor
    finally:
        proc.stop()
    spans = []
    for path, body in received:
        if path == "/v1/traces":
            req = ExportTraceServiceRequest()
            req.ParseFromString(body)
            for rs in req.resource_spans:
                for ss in rs.scope_spans:
                    spans += list(ss.spans)
    by_name = {s.name: s for s in spans}
    root = by_name["chat"]
    attrs = {a.key: a.value for a in root.attributes}
    assert attrs["gen_ai.operation.name"].string_value == "chat"
    assert attrs["gen_ai.request.model"].string_value == "auto"
    assert attrs["tier"].string_value == "standard"
    assert attrs["gateway.fallback_reason"].string_value == "check_template_leak"
    assert {"attempt highspeed", "attempt standard"} <= set(by_name)
    # the final checks of the answer that passed, one span each (those the live phase
    # already passed on the whole text are not run twice)
    assert any(name.startswith("check ") for name in by_name)
    assert by_name["attempt highspeed"].parent_span_id == root.span_id


def _post(base: str, content: str) -> tuple[int, dict[str, Any]]:
    body = json.dumps({"model": "auto", "messages": [{"role": "user", "content": content}]})
    req = urllib.request.Request(
        f"{base}/v1/chat/completions",
        data=body.encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.status, json.loads(r.read())


def _access_lines(proc: Proc) -> list[dict[str, Any]]:
    return [
        json.loads(x)
        for x in proc.log().splitlines()
        if x.startswith("{") and '"logger":"gateway.access"' in x
    ]


def test_access_log_is_json_with_request_id_and_no_prompt(
    engines: dict[str, str], tmp_path: Path
) -> None:
    port = free_port()
    rules = tmp_path / "r.yaml"
    import yaml

    rules.write_text(yaml.safe_dump(rules_for_tests()))
    env = {f"GATEWAY_POOL_{k.upper()}_URLS": v for k, v in engines.items()}
    env["GATEWAY_ACCESS_LOG"] = "true"
    proc = Proc(
        [sys.executable, "-m", "gateway.cli", "serve", "--rules", str(rules), "--port", str(port)],
        f"http://127.0.0.1:{port}/healthz",
        env=env,
    )
    try:
        _post(f"http://127.0.0.1:{port}", "SECRET-PROMPT-TEXT")
        rec = wait_until(lambda: _access_lines(proc), "an access log line")[-1]
        assert re.fullmatch(r"req_[0-9a-f]{24}", rec["request_id"])
        assert rec["status"] == 200 and rec["tier"] == "highspeed" and rec["task"] == "chat"
        assert "SECRET-PROMPT-TEXT" not in proc.log()
    finally:
        proc.stop()


def test_failures_are_logged_even_without_the_access_log(
    engines: dict[str, str], tmp_path: Path
) -> None:
    proc, base = start_gateway(tmp_path, rules_for_tests(), engines)
    try:
        _post(base, "fine")
        _post(base, "bad [[highspeed: status=500]]")
        lines = wait_until(lambda: _access_lines(proc), "the failure's log line")
        assert len(lines) == 1 and lines[0]["level"] == "warning"
        # a 500 is transient: retried once on the same tier, then the standard tier answers
        assert lines[0]["fallbacks"] == ["highspeed:http_500", "highspeed:http_500"]
    finally:
        proc.stop()
