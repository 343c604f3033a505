"""The runtime snapshot and the last line of defence, through real sockets.

* Rules swapped every 100 ms between two versions (one without the fast tier) under 64
  concurrent clients: zero 5xx, both versions served.
* An unexpected exception inside the request path: a 500 OpenAI envelope with the id.
* A corrupt or unsupported ``Content-Encoding``: a 4xx envelope, not a plain-text 500.
"""

from __future__ import annotations

import asyncio
import copy
import gzip
import threading
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
import yaml
from aiohttp import web

from gateway.rules.schema import Rules, Tier
from gateway.server.app import AppSource, create_app
from gateway.settings import load_settings
from gateway.upstream.transport import Timeouts, UpstreamStream
from tests.conftest import free_port, rules_for_tests, start_gateway

CHAT = {"model": "auto", "messages": [{"role": "user", "content": "Say hi."}]}


def _without_fast_tier(rules: dict[str, Any]) -> dict[str, Any]:
    b = copy.deepcopy(rules)
    del b["tiers"]["highspeed"]
    for r in b["rules"]:
        r["tier"], r["fallback"] = "standard", []
    b["default"]["tier"], b["default"]["fallback"] = "standard", []
    b["aliases"] = {k: (None if v == "highspeed" else v) for k, v in b.get("aliases", {}).items()}
    return b


@pytest.mark.processes
def test_rules_swapped_under_load_never_answer_5xx(engines: dict[str, str], tmp_path: Path) -> None:
    a = rules_for_tests()
    b = _without_fast_tier(a)
    proc, url = start_gateway(tmp_path, a, engines, {"GATEWAY_RULES_WATCH_INTERVAL": "0.02"})
    path = Path(proc.argv[proc.argv.index("--rules") + 1])
    texts = [yaml.safe_dump(a), yaml.safe_dump(b)]
    stop = threading.Event()

    def swap() -> None:
        i = 0
        while not stop.is_set():
            i += 1
            path.write_text(texts[i % 2])
            time.sleep(0.1)  # the churn under test: a new rules file ten times a second

    async def load() -> tuple[list[int], set[str]]:
        statuses: list[int] = []
        tiers: set[str] = set()
        async with aiohttp.ClientSession() as s:

            async def client() -> None:
                until = time.monotonic() + 3.0
                while time.monotonic() < until:
                    async with s.post(f"{url}/v1/chat/completions", json=CHAT) as r:
                        await r.read()
                        statuses.append(r.status)
                        tiers.add(r.headers.get("x-gateway-tier", ""))

            await asyncio.gather(*(client() for _ in range(64)))
        return statuses, tiers

    t = threading.Thread(target=swap)
    t.start()
    try:
        statuses, tiers = asyncio.run(load())
    finally:
        stop.set()
        t.join()
        proc.stop()
    assert len(statuses) > 100
    assert [s for s in statuses if s >= 500] == []
    assert {"highspeed", "standard"} <= tiers  # both snapshots served


class _Boom:
    """A transport whose engine connection raises something nobody expects."""

    async def open(
        self, url: str, body: bytes, limits: Timeouts, stream: bool = True
    ) -> UpstreamStream:
        raise RuntimeError("injected")

    async def get(self, url: str, timeout: float) -> tuple[int, bytes]:
        return 200, b""

    async def close(self) -> None:
        pass


def _boom(name: str, tier: Tier) -> _Boom:
    return _Boom()


async def _serve_in_process(body: bytes, headers: dict[str, str]) -> tuple[int, Any, str]:
    data = rules_for_tests()
    rules = Rules.model_validate(data)
    settings = load_settings({"GATEWAY_RULES_WATCH_INTERVAL": "0"})
    app = create_app(settings, AppSource(rules, text=yaml.safe_dump(data), transport=_boom))
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        async with (
            aiohttp.ClientSession() as s,
            s.post(f"http://127.0.0.1:{port}/v1/chat/completions", data=body, headers=headers) as r,
        ):
            return r.status, await r.json(content_type=None), r.headers.get("x-request-id", "")
    finally:
        await runner.cleanup()


def test_an_unexpected_exception_is_a_500_envelope_with_the_request_id() -> None:
    status, body, rid = asyncio.run(
        _serve_in_process(orjson.dumps(CHAT), {"x-request-id": "req-boom-1"})
    )
    assert status == 500
    assert body["error"]["code"] == "internal_error"
    assert "req-boom-1" in body["error"]["message"] and rid == "req-boom-1"


@pytest.mark.processes
def test_content_encodings(gateway: str) -> None:
    good = gzip.compress(orjson.dumps(CHAT))
    cases = [
        ({"Content-Encoding": "gzip"}, good, 200, None),
        ({"Content-Encoding": "gzip"}, b"\x1f\x8b\x08\x00not really gzip", 400, "invalid_body"),
        ({"Content-Encoding": "zstd"}, orjson.dumps(CHAT), 415, "unsupported_content_encoding"),
    ]

    async def go() -> list[tuple[int, Any]]:
        out = []
        async with aiohttp.ClientSession(auto_decompress=False) as s:
            for headers, body, _, _ in cases:
                h = {"Content-Type": "application/json", **headers}
                async with s.post(f"{gateway}/v1/chat/completions", data=body, headers=h) as r:
                    out.append((r.status, await r.json(content_type=None)))
        return out

    for (status, body), (_, _, want, code) in zip(asyncio.run(go()), cases, strict=True):
        assert status == want, body
        if code is not None:
            assert body["error"]["code"] == code


def test_a_rules_swap_keeps_the_queue_of_unchanged_engines() -> None:
    """Requests still running on the old pools hold slots: new pools of the same engines
    and capacity share the old gate, so the engines never see twice max_concurrency."""
    from gateway.rules.schema import Rules
    from gateway.upstream.pools import Pools
    from tests.conftest import rules_for_tests

    raw = rules_for_tests()
    raw["tiers"]["highspeed"]["max_concurrency"] = 4

    def pools(r: dict[str, Any]) -> Pools:
        return Pools(Rules.model_validate(r).tiers)  # each pool's own (unused) transport

    old = pools(raw)
    old.by_tier["highspeed"].gate.busy = 3  # three requests in flight on the old rules
    raw2 = copy.deepcopy(raw)
    raw2["tiers"]["highspeed"]["max_queue"] = 7
    raw3 = copy.deepcopy(raw)
    raw3["tiers"]["highspeed"]["max_concurrency"] = 8
    same, bigger = pools(raw2), pools(raw3)
    same.inherit(old)
    bigger.inherit(old)
    assert same.by_tier["highspeed"].gate is old.by_tier["highspeed"].gate
    kept = same.by_tier["highspeed"].gate
    assert kept.busy == 3 and kept.max_queue == 7
    assert bigger.by_tier["highspeed"].gate.busy == 0  # a new capacity: a new gate
