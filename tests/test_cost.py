"""Every answer's cost: per-tier prices in the rules (self-hosted tiers), on the answer
(``x-gateway-cost-usd``, the stream's trailing comment), in the metrics, the access log,
the tenant's usage, and against a USD budget. Real sockets, the real Redis, own prefix.
(The hosted tier's price from LiteLLM's map is tested in ``test_litellm_tier.py``.)
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from gateway.rules.schema import Tier
from gateway.store.redis_store import RedisStore
from gateway.tenancy.limits import LocalLimiter
from gateway.tenancy.tenants import CostBudget, Policy
from gateway.upstream.pools import Pool
from tests.conftest import REDIS, Proc, rules_for_tests, start_gateway
from tests.test_tenancy import call, chat, new_tenant, tenancy_env
from tests.waiting import until

pytestmark = pytest.mark.processes

PRICES = {"highspeed": (100.0, 400.0), "standard": (1000.0, 2000.0)}  # USD per 1M in, out


def price_of(tier: str, usage: dict[str, int]) -> float:
    p_in, p_out = PRICES[tier]
    return (usage["prompt_tokens"] * p_in + usage["completion_tokens"] * p_out) / 1e6


@pytest.fixture(scope="module")
def priced(
    engines: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Proc, str]]:
    prefix = f"gwtest:{uuid.uuid4().hex[:8]}:"
    rules = rules_for_tests()
    for tier, (p_in, p_out) in PRICES.items():
        rules["tiers"][tier]["price"] = {"input_per_1m": p_in, "output_per_1m": p_out}
    env = {**tenancy_env(prefix), "GATEWAY_ACCESS_LOG": "true"}
    proc, url = start_gateway(tmp_path_factory.mktemp("cost"), rules, engines, env)
    yield proc, url
    proc.stop()

    async def clean() -> None:
        s = RedisStore(REDIS, prefix)
        await s.delete_prefix()
        await s.close()

    asyncio.run(clean())


def test_cost_header_metric_log_and_usage(priced: tuple[Proc, str]) -> None:
    proc, url = priced
    tid, _, key = new_tenant(proc.admin)
    st, body, headers = chat(url, key, "what does it cost")
    assert st == 200 and headers["x-gateway-tier"] == "highspeed"
    cost = float(headers["x-gateway-cost-usd"])
    assert cost == pytest.approx(price_of("highspeed", body["usage"]))
    st, body2, headers2 = chat(url, key, "again [[highspeed: status=500]]")
    assert st == 200 and headers2["x-gateway-tier"] == "standard"  # priced where it answered
    cost2 = float(headers2["x-gateway-cost-usd"])
    assert cost2 == pytest.approx(price_of("standard", body2["usage"]))

    def usage() -> dict[str, Any]:
        out: dict[str, Any] = call(proc.admin, "GET", f"/admin/tenants/{tid}/usage")[1]
        return out

    assert until(lambda: usage()["requests"] == 2)
    u = usage()
    assert u["cost_usd"] == pytest.approx(cost + cost2, abs=2e-6)  # counted in micro-USD
    assert set(u["cost_usd_by_tier"]) == {"highspeed", "standard"}
    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as r:
        metrics = r.read().decode()
    lines = [ln for ln in metrics.splitlines() if ln.startswith("gateway_cost_usd_total{")]
    assert lines and sum(float(ln.rsplit(" ", 1)[1]) for ln in lines) >= cost + cost2 - 1e-9
    assert until(lambda: '"cost_usd"' in proc.log())
    logged = [json.loads(ln) for ln in proc.log().splitlines() if '"cost_usd"' in ln]
    assert any(rec["cost_usd"] == pytest.approx(cost) for rec in logged)


def test_stream_reports_its_cost_in_the_trailing_comment(priced: tuple[Proc, str]) -> None:
    proc, url = priced
    _, _, key = new_tenant(proc.admin)
    body = {
        "model": "auto",
        "stream": True,
        "stream_options": {"include_usage": True},
        "messages": [{"role": "user", "content": "stream it"}],
    }
    req = urllib.request.Request(
        f"{url}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"},
    )
    with urllib.request.urlopen(req, timeout=20) as r:
        headers = {k.lower(): v for k, v in r.headers.items()}
        lines = r.read().decode().splitlines()
    events = [json.loads(ln[6:]) for ln in lines if ln.startswith("data: {")]
    comments = [ln for ln in lines if ln.startswith(":")]
    usage = events[-1]["usage"]
    cost = [c for c in comments if c.startswith(": x-gateway-cost-usd ")]
    assert len(cost) == 1 and "x-gateway-cost-usd" not in headers  # known only at the end
    assert float(cost[0].split()[-1]) == pytest.approx(price_of("highspeed", usage))


def test_usd_budget_gives_insufficient_quota(priced: tuple[Proc, str]) -> None:
    proc, url = priced
    # one answer costs about 0.002 USD at the fast tier's price: the budget covers one
    _, _, key = new_tenant(proc.admin, {"cost_budget": {"usd": 0.001, "period": "day"}})
    assert chat(url, key)[0] == 200
    assert until(lambda: chat(url, key)[0] == 429)
    st, body, _ = chat(url, key)
    assert st == 429 and body["error"]["code"] == "insufficient_quota"
    assert "USD budget" in body["error"]["message"]


def test_policy_refuses_a_bad_usd_budget(priced: tuple[Proc, str]) -> None:
    proc, _ = priced
    st, body, _ = call(
        proc.admin, "POST", "/admin/tenants", {"name": "x", "policy": {"cost_budget": {"usd": 0}}}
    )
    assert st == 400 or st == 422, body


def test_local_limiter_counts_micro_usd() -> None:
    lim = LocalLimiter()
    p = Policy(cost_budget=CostBudget(usd=0.01, period="month"))
    assert lim.admit("t", "r1", p).ok
    lim.debit("t", 10, p, micro_usd=6000)
    assert lim.admit("t", "r2", p).ok
    lim.debit("t", 10, p, micro_usd=5000)
    assert lim.admit("t", "r3", p).denied == "cost_budget"


def test_pool_cost_needs_a_price() -> None:
    tier = Tier(model="m", endpoints=("http://127.0.0.1:9",))
    priced = tier.model_copy(update={"price": None})
    # a placeholder transport: this test prices usage and never sends
    pool = Pool.create("x", priced, transport=object())  # type: ignore[arg-type]
    assert pool.cost({"prompt_tokens": 10, "completion_tokens": 5}) is None
    pool.price = (1e-6, 2e-6)
    assert pool.cost({"prompt_tokens": 10, "completion_tokens": 5}) == pytest.approx(2e-5)
    assert pool.cost(None) is None
