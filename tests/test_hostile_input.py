"""Hostile input and hostile tenants through real sockets: a precise OpenAI-style 4xx, never
a 500 or a hang, nothing of the engines leaked, and the tenant's slot back afterwards.

One gateway with tenancy (the in-process store), a metrics token, a short body timeout
and a fast rules watcher; the shared fake engines behind it.
"""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import Proc, rules_for_tests, start_gateway
from tests.test_tenancy import ADMIN, call, new_tenant
from tests.waiting import engine_got, until, wait_until

pytestmark = pytest.mark.processes

METRICS_TOKEN = "metrics-token-0123456789"


@pytest.fixture(scope="module")
def gw(engines: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    env = {
        "GATEWAY_ADMIN_TOKEN": ADMIN,
        "GATEWAY_METRICS_TOKEN": METRICS_TOKEN,
        "GATEWAY_BODY_TIMEOUT": "1",
        "GATEWAY_RULES_WATCH_INTERVAL": "0.1",
    }
    proc, _ = start_gateway(tmp_path_factory.mktemp("gw"), rules_for_tests(), engines, env)
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def base(gw: Proc) -> str:
    return gw.url.removesuffix("/healthz")


@pytest.fixture(scope="module")
def key(gw: Proc) -> str:
    """A tenant allowed one request at a time: a leaked slot shows as a 429."""
    return new_tenant(gw.admin, {"max_concurrent_requests": 1})[2]


def post(
    base: str, body: bytes, key: str, headers: dict[str, str] | None = None
) -> tuple[int, Any, dict[str, str]]:
    h = {"Content-Type": "application/json", "Authorization": f"Bearer {key}", **(headers or {})}
    req = urllib.request.Request(f"{base}/v1/chat/completions", data=body, headers=h)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read()), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read()), dict(e.headers)


def chat_body(content: str = "hi", **kw: Any) -> bytes:
    return json.dumps(
        {"model": "auto", "messages": [{"role": "user", "content": content}], **kw}
    ).encode()


def nested(depth: int) -> bytes:
    return b'{"model": "auto", "messages": [{"role": "user", "content": "hi"}], "x": ' + (
        b"[" * depth + b"]" * depth + b"}"
    )


CASES = [
    ("unknown-hint-header", chat_body(), {"x-gateway-turbo": "1"}, 400, "x-gateway-turbo"),
    ("nested-255", nested(255), {}, 400, None),
    ("nested-300", nested(300), {}, 400, None),
    ("nested-1000", nested(1000), {}, 400, None),
    ("nested-5000", nested(5000), {}, 400, None),
]


@pytest.mark.parametrize(("name", "body", "headers", "status", "param"), CASES)
def test_hostile_bodies_and_headers(
    base: str, key: str, name: str, body: bytes, headers: dict[str, str], status: int, param: Any
) -> None:
    got, payload, h = post(base, body, key, headers)
    assert got == status, payload
    err = payload["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    assert err["param"] == param
    assert "x-request-id" in {k.lower() for k in h}
    assert post(base, chat_body(), key)[0] == 200  # no slot left behind


def test_nesting_the_engine_can_take_still_works(base: str, key: str) -> None:
    assert post(base, nested(200), key)[0] == 200


def test_a_body_shorter_than_its_length_times_out(base: str, key: str) -> None:
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Authorization: Bearer " + key.encode() + b'\r\nContent-Length: 100\r\n\r\n{"mo'
        )
        t0 = time.monotonic()
        data = b""
        while b"}}" not in data:
            part = s.recv(4096)
            if not part:
                break
            data += part
    # the 1 s body timeout cuts it, not the socket's own 10 s: 5 s leaves a busy machine room
    assert time.monotonic() - t0 < 5
    assert data.startswith(b"HTTP/1.1 408"), data[:200]
    assert b'"code":"body_timeout"' in data


def test_the_same_request_id_does_not_bypass_the_concurrency_limit(
    base: str, key: str, engines: dict[str, str]
) -> None:
    same, marker = {"x-request-id": "the-same-id"}, f"hold-{uuid.uuid4().hex}"
    with ThreadPoolExecutor(2) as ex:
        slow = ex.submit(post, base, chat_body(f"{marker} [[*: delay=0.8]]"), key, same)
        # at the engine, so admitted: the one slot is held for the engine's 0.8 s
        wait_until(lambda: engine_got(engines.values(), marker), "the slow request upstream")
        got, payload, _ = post(base, chat_body(), key, same)
        assert got == 429 and "concurrent" in payload["error"]["message"]
        assert slow.result()[0] == 200
    assert until(lambda: post(base, chat_body(), key)[0] == 200)


def test_failures_name_kinds_and_tiers_not_engines(
    base: str, key: str, engines: dict[str, str]
) -> None:
    got, _, h = post(base, chat_body("[[highspeed: status=500]]"), key)
    assert got == 200 and h["x-gateway-fallback"].startswith("highspeed:http_500")
    assert h["x-gateway-fallback"].endswith(" -> standard")
    got, payload, h = post(base, chat_body("[[*: status=503]]"), key)
    assert got == 502
    text = json.dumps(payload) + json.dumps(h)
    for url in engines.values():
        assert url.removeprefix("http://") not in text
    assert "says 503" not in text  # the engine's own error body goes to the log only


def test_metrics_need_the_token_and_carry_no_tenant_ids(gw: Proc, base: str, key: str) -> None:
    tenant = new_tenant(gw.admin)[0]
    req = urllib.request.Request(f"{base}/metrics")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=5)
    assert e.value.code == 401
    assert json.loads(e.value.read())["error"]["code"] == "invalid_api_key"
    req.add_header("Authorization", f"Bearer {METRICS_TOKEN}")

    def scrape() -> str:
        with urllib.request.urlopen(req, timeout=5) as r:
            return str(r.read().decode())

    assert until(lambda: 'tenant="all"' in scrape())
    assert tenant not in scrape()


def test_rules_watcher_survives_any_bytes(gw: Proc, base: str, key: str) -> None:
    path = Path(gw.argv[gw.argv.index("--rules") + 1])
    good = rules_for_tests()

    def last_error() -> Any:
        return call(gw.admin, "GET", "/admin/rules")[1]["last_error"]

    bads = (b"tiers: \xff\xfe\x00bad", b"a: " + b"[" * 5000, b"x: " + b"{a: " * 5000)
    for i, bad in enumerate(bads):
        path.write_bytes(bad)
        assert until(lambda: last_error() is not None)
        assert call(gw.admin, "POST", "/admin/rules/reload")[0] == 422
        assert post(base, chat_body(), key)[0] == 200  # the good rules still run
        good["aliases"] = {"auto": None, f"quick{i}": "standard"}
        path.write_text(yaml.safe_dump(good))  # a valid edit is taken: the watcher lives
        assert until(lambda: last_error() is None), last_error()
        assert (
            post(
                base,
                json.dumps(
                    {"model": f"quick{i}", "messages": [{"role": "user", "content": "hi"}]}
                ).encode(),
                key,
            )[0]
            == 200
        )
    st, body, _ = call(gw.admin, "PUT", "/admin/rules", raw=b"a: " + b"[" * 5000)
    assert st == 422, body
    st, body, _ = call(gw.admin, "PUT", "/admin/rules", raw=b"tiers: \xff\xfe")
    assert st == 400 and body["error"]["code"] == "invalid_rules"  # not YAML text at all


def test_a_failed_attempt_is_logged_with_its_request_id(gw: Proc, base: str, key: str) -> None:
    rid = f"rid-{uuid.uuid4().hex}"
    got, _, _ = post(base, chat_body("[[highspeed: status=500]]"), key, {"x-request-id": rid})
    assert got == 200

    def logged() -> bool:  # every log line written while serving it names it
        docs = [json.loads(ln) for ln in gw.log().splitlines() if ln.startswith("{")]
        return any(
            d["msg"].startswith("attempt on highspeed failed") and d.get("request_id") == rid
            for d in docs
        )

    assert until(logged)


def test_readyz_says_ready_to_anyone_and_the_detail_to_a_token_holder(
    base: str, engines: dict[str, str], key: str
) -> None:
    def ready(headers: dict[str, str]) -> str:
        req = urllib.request.Request(f"{base}/readyz", headers=headers)
        with urllib.request.urlopen(req, timeout=5) as r:
            return str(r.read().decode())

    # anyone, a tenant's key and a wrong token alike: ready or not, nothing more
    for headers in ({}, {"Authorization": f"Bearer {key}"}, {"Authorization": "Bearer nope"}):
        assert json.loads(ready(headers)) == {"ready": True}, headers
    for token in (METRICS_TOKEN, ADMIN):  # either credential: tiers, models, engines
        holder = json.loads(ready({"Authorization": f"Bearer {token}"}))
        assert holder["ready"] is True and holder["tiers"] == {"highspeed": True, "standard": True}
        replicas = [r for m in holder["models"].values() for r in m.get("replicas", {})]
        assert all(any(u in r for r in replicas) for u in engines.values()), holder
