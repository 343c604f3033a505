"""Pool health against the SGLang-shaped simulator: probes, metrics scrape, circuits."""

from __future__ import annotations

import json
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Proc, rules_for_tests, start_gateway
from tests.test_sim import start_sim
from tests.test_tenancy import ADMIN, call, new_tenant
from tests.waiting import until, wait_until

pytestmark = pytest.mark.processes


def sim_rules(interval: float = 0.2) -> dict[str, Any]:
    rules = rules_for_tests()
    for name, tier in rules["tiers"].items():
        tier["model"] = f"sim-{name}"
        tier["health"] = {"interval": interval, "timeout": 0.5}
    return rules


def pools(admin: str) -> dict[str, Any]:
    data: dict[str, Any] = call(admin, "GET", "/admin/pools")[1]
    return data


def post(base: str, key: str, content: str) -> tuple[int, dict[str, str]]:
    st, _, h = call(
        base,
        "POST",
        "/v1/chat/completions",
        {"model": "auto", "max_tokens": 8, "messages": [{"role": "user", "content": content}]},
        key,
    )
    return st, h


def test_dead_replica_is_skipped_after_a_probe_and_comes_back(tmp_path: Path) -> None:
    a, a_url = start_sim("--profile", "highspeed", "--time-scale", "0.01", "--seed", "1")
    b, b_url = start_sim("--profile", "highspeed", "--time-scale", "0.01", "--seed", "2")
    st, st_url = start_sim("--profile", "standard", "--time-scale", "0.01")
    gw, base = start_gateway(
        tmp_path,
        sim_rules(),
        {"highspeed": f"{a_url},{b_url}", "standard": st_url},
        {"GATEWAY_ADMIN_TOKEN": ADMIN},
    )
    try:
        _, _, key = new_tenant(gw.admin)
        # the probe scrapes SGLang's /metrics: cache hit rate and queue depth are known
        assert until(
            lambda: all(
                r["cache_hit_rate"] is not None
                for r in pools(gw.admin)["tiers"]["highspeed"]["replicas"]
            )
        )
        b.stop()

        def replicas() -> dict[str, Any]:
            return {r["url"]: r for r in pools(gw.admin)["tiers"]["highspeed"]["replicas"]}

        # the probes (every 0.2 s) take it out: nothing else is sent to it meanwhile
        wait_until(lambda: replicas()[b_url]["up"] is False, "the dead replica marked down")
        assert replicas()[a_url]["up"] is True
        for i in range(8):
            code, h = post(base, key, f"prefix {i} differs")
            assert code == 200 and h["x-gateway-tier"] == "highspeed"
            assert "x-gateway-fallback" not in h  # the dead replica was not even tried
        port = b_url.rsplit(":", 1)[1]
        b = Proc(
            [
                sys.executable,
                "-m",
                "engines.sim",
                "--port",
                port,
                "--profile",
                "highspeed",
                "--time-scale",
                "0.01",
            ],
            f"{b_url}/health",
        )
        assert until(
            lambda: all(r["up"] for r in pools(gw.admin)["tiers"]["highspeed"]["replicas"])
        )
    finally:
        for p in (gw, a, b, st):
            p.stop()


def test_failing_pool_opens_its_circuit_and_standard_takes_over(tmp_path: Path) -> None:
    bad, bad_url = start_sim("--profile", "highspeed", "--time-scale", "0.01", "--fault", "500=1.0")
    st, st_url = start_sim("--profile", "standard", "--time-scale", "0.01")
    rules = sim_rules()
    rules["tiers"]["highspeed"]["circuit"] = {"failures": 4, "cooldown": 30.0}
    gw, base = start_gateway(
        tmp_path, rules, {"highspeed": bad_url, "standard": st_url}, {"GATEWAY_ADMIN_TOKEN": ADMIN}
    )
    try:
        _, _, key = new_tenant(gw.admin)
        for _ in range(2):  # a 500 is tried twice on the fast tier: 4 failures in all
            code, h = post(base, key, "x")
            assert code == 200 and h["x-gateway-fallback"].startswith("highspeed:http_500")
        code, h = post(base, key, "x")
        assert h["x-gateway-tier"] == "standard" and "x-gateway-fallback" not in h
        assert "unavailable: highspeed" in h["x-gateway-route"]
        state = pools(gw.admin)["tiers"]["highspeed"]
        assert state["circuit_open"] is True and state["available"] is False
        ready = urllib.request.Request(
            f"{base}/readyz", headers={"Authorization": f"Bearer {ADMIN}"}
        )
        with urllib.request.urlopen(ready) as r:
            assert json.loads(r.read())["tiers"] == {"highspeed": False, "standard": True}
    finally:
        for p in (gw, bad, st):
            p.stop()


def test_a_non_streamed_answer_keeps_the_engines_own_fields_as_the_stream_does(
    tmp_path: Path,
) -> None:
    import openai
    from openai.types.chat.completion_create_params import CompletionCreateParamsBase

    hs, hs_url = start_sim("--profile", "highspeed", "--time-scale", "0.01", "--seed", "3")
    st, st_url = start_sim("--profile", "standard", "--time-scale", "0.01")
    gw, base = start_gateway(tmp_path, sim_rules(), {"highspeed": hs_url, "standard": st_url})
    try:
        client = openai.OpenAI(base_url=base + "/v1", api_key="x", max_retries=0)
        ask: CompletionCreateParamsBase = {
            "model": "auto",
            "max_tokens": 16,
            "messages": [{"role": "user", "content": "Tell me about rivers."}],
        }
        whole = client.chat.completions.create(**ask)
        streamed = [c.model_extra or {} for c in client.chat.completions.create(**ask, stream=True)]
        # the simulator's own "sim" object rides on its last chunk and on its whole answer
        sim_direct = json.loads(
            urllib.request.urlopen(
                urllib.request.Request(
                    hs_url + "/v1/chat/completions",
                    json.dumps(ask).encode(),
                    {"Content-Type": "application/json"},
                ),
                timeout=10,
            ).read()
        )["sim"]
        assert any("sim" in extra for extra in streamed)
        sim = (whole.model_extra or {})["sim"]
        assert set(sim) == set(sim_direct) and sim["steps"] > 0
        assert whole.choices[0].message.content
    finally:
        gw.stop()
        hs.stop()
        st.stop()
