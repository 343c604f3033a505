"""A tier whose endpoint is an SGLang Model Gateway (``sglang-router``) over its workers.

The topology users run at scale: the gateway's pool has one endpoint, the router, which
spreads requests over the tier's engines itself (cache-aware). Real processes: two fake
engines per tier behind one ``sglang-router`` per tier (the Rust binary from PyPI, in the
benchmark's venv: ``evals.bench.peers``), the gateway in front of both routers. What must
work through the router: health, model discovery, answers streamed and not, a fallback to
the standard tier, and a broken stream continued on the standard tier through its router.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from evals.bench.peers import router_argv, router_python
from tests.conftest import Proc, free_port, rules_for_tests, start_engine, start_gateway
from tests.test_e2e_proxy import engine_requests, reset
from tests.test_streams import ANSWER, chunks, content, sse

METRICS_TOKEN = "metrics-token-0123456789"

pytestmark = [pytest.mark.sglang, pytest.mark.processes]


def _router(workers: list[str]) -> tuple[Proc, str]:
    port = free_port()
    argv = router_argv(
        router_python(), port, workers, policy="cache_aware", metrics_port=free_port()
    )
    proc = Proc(argv, f"http://127.0.0.1:{port}/readiness", timeout=60)
    return proc, f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def topology(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    procs: list[Proc] = []
    try:
        workers: dict[str, list[str]] = {}
        for tier in ("highspeed", "standard"):
            for _ in range(2):
                proc, url = start_engine(tier, "--model", f"fake-{tier}")
                procs.append(proc)
                workers.setdefault(tier, []).append(url)
        routers = {}
        for tier, urls in workers.items():
            proc, url = _router(urls)
            procs.append(proc)
            routers[tier] = url
        rules = rules_for_tests()
        for tier in rules["tiers"].values():
            tier.pop("model", None)  # discovered through the router's /v1/models
        env = {"GATEWAY_METRICS_TOKEN": METRICS_TOKEN}  # /readyz's detail
        gw, base = start_gateway(Path(tmp_path_factory.mktemp("smg")), rules, routers, env)
        procs.append(gw)
        yield {"gateway": base.removesuffix("/healthz"), "workers": workers}
    finally:
        for p in reversed(procs):
            p.stop()


def _all_requests(urls: list[str]) -> list[dict[str, Any]]:
    return [r for u in urls for r in engine_requests(u)]


def test_answers_through_the_router_streamed_and_not(topology: dict[str, Any]) -> None:
    gw = topology["gateway"]
    c = openai.OpenAI(base_url=f"{gw}/v1", api_key="unused", max_retries=0, timeout=20)
    raw = c.chat.completions.with_raw_response.create(
        model="auto", messages=[{"role": "user", "content": "Say hello to the router"}]
    )
    resp = raw.parse()
    assert raw.headers["x-gateway-tier"] == "highspeed"
    assert "x-gateway-fallback" not in raw.headers
    assert resp.model == "fake-highspeed"  # discovered through the router
    assert resp.choices[0].message.content == "Echo (highspeed): Say hello to the router"
    text = "".join(
        ch.choices[0].delta.content or ""
        for ch in c.chat.completions.create(
            model="auto",
            stream=True,
            messages=[{"role": "user", "content": "Stream through the router"}],
        )
        if ch.choices
    )
    assert text == "Echo (highspeed): Stream through the router"
    c.close()


def test_readyz_sees_the_tiers_up(topology: dict[str, Any]) -> None:
    headers = {"Authorization": f"Bearer {METRICS_TOKEN}"}
    req = urllib.request.Request(topology["gateway"] + "/readyz", headers=headers)
    with urllib.request.urlopen(req, timeout=5) as r:
        assert r.status == 200
        body = json.loads(r.read())
    assert body["ready"] is True
    assert body["tiers"] == {"highspeed": True, "standard": True}
    assert body["models"]["highspeed"]


def test_every_request_reaches_one_worker_of_the_tier(topology: dict[str, Any]) -> None:
    gw, hs = topology["gateway"], topology["workers"]["highspeed"]
    reset({str(i): u for i, u in enumerate(hs)})
    c = openai.OpenAI(base_url=f"{gw}/v1", api_key="unused", max_retries=0, timeout=20)
    for i in range(12):
        c.chat.completions.create(
            model="auto", messages=[{"role": "user", "content": f"{i} distinct question {i}?"}]
        )
    c.close()
    counts = [len(engine_requests(u)) for u in hs]
    assert sum(counts) == 12, counts  # every one reached a worker of the tier, once


def test_fallback_to_the_standard_router(topology: dict[str, Any]) -> None:
    gw = topology["gateway"]
    c = openai.OpenAI(base_url=f"{gw}/v1", api_key="unused", max_retries=0, timeout=20)
    raw = c.chat.completions.with_raw_response.create(
        model="auto", messages=[{"role": "user", "content": "q [[highspeed: status=503]]"}]
    )
    c.close()
    assert raw.headers["x-gateway-tier"] == "standard"
    assert raw.headers["x-gateway-fallback"].startswith("highspeed:")
    assert raw.parse().model == "fake-standard"


def test_a_cut_stream_is_continued_through_the_standard_router(
    topology: dict[str, Any],
) -> None:
    gw, st = topology["gateway"], topology["workers"]["standard"]
    reset({str(i): u for i, u in enumerate(st)})
    headers, events, comments = sse(
        gw, f"q [[*: text={ANSWER}; per=1]] [[highspeed: cut_after=25; gap=0.01]]"
    )
    assert content(events) == ANSWER  # no gap, no duplicate
    assert headers["x-gateway-tier"] == "highspeed"
    assert chunks(events)[-1]["choices"][0]["finish_reason"] == "stop"
    assert comments[-1].startswith(": x-gateway-fallback highspeed:stream_cut")
    continuation = _all_requests(st)[-1]
    assert continuation["messages"][-1] == {
        "role": "assistant",
        "content": " ".join(ANSWER.split()[:25]) + " ",
    }
