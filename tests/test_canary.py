"""Canary splits: a rule shares its traffic by weight between arms, sticky per session,
user, key or prompt; the arm is in ``x-gateway-route``, explain and the metrics. The
router is pure (table tests); one end-to-end run through a real gateway and fake engines."""

from __future__ import annotations

import asyncio
import json
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
import yaml

from gateway.request.model import parse_chat
from gateway.routing.classify import Classifier
from gateway.routing.explain import explain
from gateway.routing.router import Router
from gateway.rules.schema import Rules, RulesError, parse_rules
from gateway.store.redis_store import RedisStore
from gateway.tenancy.tenants import Effective, Policy
from tests.conftest import REDIS, Proc, rules_for_tests, start_gateway
from tests.test_tenancy import call, chat, new_tenant, tenancy_env
from tests.waiting import until

pytestmark = pytest.mark.processes

SPLIT = [
    {"tier": "highspeed", "weight": 90, "name": "stable"},
    {"tier": "standard", "weight": 10, "name": "canary"},
]


def _rules(split: list[dict[str, Any]] = SPLIT) -> dict[str, Any]:
    data = rules_for_tests()
    data["default"]["split"] = split
    return data


def _decide(rules: Rules, body: dict[str, Any], headers: dict[str, str] | None = None) -> Any:
    req = parse_chat(orjson.dumps({"model": "auto", **body}))
    c = Classifier(rules).classify(req, headers or {})
    return Router(rules).decide(c, {})


def _msg(text: str = "hello there") -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


@pytest.mark.parametrize("canary", [10, 5])
def test_weights_are_honoured_over_many_users(canary: int) -> None:
    split = [
        {"tier": "highspeed", "weight": 100 - canary, "name": "stable"},
        {"tier": "standard", "weight": canary, "name": "canary"},
    ]
    rules, n = parse_rules(yaml.safe_dump(_rules(split))), 20_000
    arms = Counter(_decide(rules, {"messages": _msg(), "user": f"u{i}"}).arm for i in range(n))
    share = arms["canary"] / n
    print(f"\n{100 - canary}/{canary} split: {share:.2%} of {n} users on the canary")
    assert set(arms) == {"stable", "canary"}
    assert abs(share - canary / 100) <= 0.01  # binomial sd: 0.2 points at 10 %


def test_one_client_stays_on_one_arm() -> None:
    rules = parse_rules(
        yaml.safe_dump(
            _rules([{"tier": "highspeed", "weight": 1}, {"tier": "standard", "weight": 1}])
        )
    )
    for i in range(50):
        by_user = {
            _decide(rules, {"messages": _msg(f"q{j}"), "user": f"u{i}"}).arm for j in range(10)
        }
        assert len(by_user) == 1  # whatever the prompt
        by_session = {
            _decide(
                rules, {"messages": _msg(f"q{j}"), "user": f"other{j}"}, {"x-session-id": f"s{i}"}
            ).arm
            for j in range(10)
        }
        assert len(by_session) == 1  # the session header beats the user field
    # an API key is sticky too when neither is sent
    eff = Effective(Policy(), tenant_id="t1", key_id="k-42")
    cls = Classifier(rules)
    picks = {
        Router(rules)
        .decide(
            cls.classify(parse_chat(orjson.dumps({"model": "auto", "messages": _msg(f"{j}")})), {}),
            {},
            eff,
        )
        .arm
        for j in range(20)
    }
    assert len(picks) == 1


def test_the_arm_decides_the_first_tier_and_keeps_the_fallbacks() -> None:
    rules = parse_rules(yaml.safe_dump(_rules([{"tier": "standard", "weight": 1}])))
    d = _decide(rules, {"messages": _msg()})
    assert d.arm == "standard" and d.tiers == ("standard",)  # highspeed's fallback is standard
    assert "arm=standard" in d.route_header
    pinned = _decide(rules, {"messages": _msg()}, {"x-gateway-tier": "highspeed"})
    assert pinned.tiers[0] == "highspeed"  # a client's pin still wins


def test_explain_names_the_arm() -> None:
    rules = parse_rules(yaml.safe_dump(_rules()))
    out = explain(rules, {"body": {"model": "auto", "messages": _msg(), "user": "u7"}})
    d = _decide(rules, {"messages": _msg(), "user": "u7"})
    assert out["arm"] == d.arm and f"arm={d.arm}" in out["route_header"]


@pytest.mark.parametrize(
    ("split", "error"),
    [
        ([{"tier": "nope", "weight": 1}], "default.split[0].tier: unknown tier 'nope'"),
        ([{"tier": "standard", "weight": 1}] * 2, "duplicate arm 'standard'"),
        ([{"tier": "standard", "weight": 0}], "default.split: every arm's weight is 0"),
    ],
)
def test_bad_splits_are_refused(split: list[dict[str, Any]], error: str) -> None:
    with pytest.raises(RulesError) as e:
        parse_rules(yaml.safe_dump(_rules(split)))
    assert any(error in m for m in e.value.errors), e.value.errors


@pytest.fixture(scope="module")
def canary_gw(engines: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    split = [
        {"tier": "highspeed", "weight": 1, "name": "stable"},
        {"tier": "standard", "weight": 1, "name": "canary"},
    ]
    proc: Proc
    proc, url = start_gateway(tmp_path_factory.mktemp("canary"), _rules(split), engines)
    yield url
    proc.stop()


def _post(url: str, session: str) -> dict[str, str]:
    body = {"model": "auto", "messages": _msg()}
    req = urllib.request.Request(
        f"{url}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "x-session-id": session},
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        return {k.lower(): v for k, v in r.headers.items()}


def test_end_to_end_arm_header_tier_and_metrics(canary_gw: str) -> None:
    seen: dict[str, set[str]] = {}
    for i in range(40):
        h = _post(canary_gw, f"s{i % 10}")
        arm = h["x-gateway-route"].split("arm=")[1].split()[0]
        assert h["x-gateway-tier"] == {"stable": "highspeed", "canary": "standard"}[arm]
        seen.setdefault(f"s{i % 10}", set()).add(arm)
    assert all(len(arms) == 1 for arms in seen.values())  # sticky per session
    assert {a for arms in seen.values() for a in arms} == {"stable", "canary"}
    with urllib.request.urlopen(f"{canary_gw}/metrics", timeout=5) as r:
        metrics = r.read().decode()
    reqs = [ln for ln in metrics.splitlines() if ln.startswith("gateway_requests_total{")]
    assert any('arm="canary"' in ln for ln in reqs) and any('arm="stable"' in ln for ln in reqs)
    lat = [ln for ln in metrics.splitlines() if ln.startswith("gateway_request_latency_seconds")]
    assert any('arm="canary"' in ln for ln in lat)


@pytest.fixture(scope="module")
def admin_gw(engines: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    prefix = f"gwtest:{uuid.uuid4().hex[:8]}:"
    tmp = tmp_path_factory.mktemp("canary-admin")
    proc, _ = start_gateway(tmp, rules_for_tests(), engines, tenancy_env(prefix))
    yield proc
    proc.stop()

    async def clean() -> None:
        s = RedisStore(REDIS, prefix)
        await s.delete_prefix()
        await s.close()

    asyncio.run(clean())


def test_rollback_is_a_rules_rollback(admin_gw: Proc) -> None:
    url, admin = admin_gw.url.removesuffix("/healthz"), admin_gw.admin
    key = new_tenant(admin)[2]

    def route() -> tuple[str, str]:
        st, _, h = chat(url, key)
        assert st == 200
        return h["x-gateway-route"], h["x-gateway-tier"]

    assert "arm=" not in route()[0]
    _, before, _ = call(admin, "GET", "/admin/rules")
    canary = _rules([{"tier": "standard", "weight": 1, "name": "canary"}])
    st, _, _ = call(admin, "PUT", "/admin/rules", raw=yaml.safe_dump(canary).encode())
    assert st == 200
    assert until(lambda: "arm=canary" in route()[0])
    assert route()[1] == "standard"
    st, _, _ = call(admin, "POST", "/admin/rules/rollback", {"version": before["version"]})
    assert st == 200
    assert until(lambda: "arm=" not in route()[0])
    assert route()[1] == "highspeed"
