"""Guards are defaults, not lines a rule can forget: every rule with a fallback hedges a slow
first token and runs the guard checks unless it opts out; ``gateway validate`` and
``gateway explain`` show each rule's effective settings. Table-driven, pure, plus the
command as a user runs it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.checks.registry import CHECK_NAMES
from gateway.routing.explain import explain
from gateway.rules.effective import hedge_setting, route_settings, rules_settings
from gateway.rules.schema import GUARDS, Route, RulesError, parse_rules
from tests.conftest import RULES
from tests.test_cli import gateway

BASE = yaml.safe_load(RULES.read_text())


def _rules(rule: dict[str, Any]) -> Any:
    data = {**BASE, "rules": [{"name": "mine", "when": {"task": ["code"]}, **rule}]}
    return parse_rules(yaml.safe_dump(data))


@pytest.mark.parametrize(
    ("rule", "hedge", "checks"),
    [
        # a rule that forgot everything still gets the guards and hedging
        ({"tier": "highspeed", "fallback": ["standard"]}, "auto (default)", GUARDS),
        (
            {"tier": "highspeed", "fallback": ["standard"], "checks": ["refusal"]},
            "auto (default)",
            ("refusal", *GUARDS),
        ),
        (
            {"tier": "highspeed", "fallback": ["standard"], "checks_drop": ["repetition"]},
            "auto (default)",
            tuple(g for g in GUARDS if g != "repetition"),
        ),
        ({"tier": "highspeed", "fallback": ["standard"], "hedge_after": 0.3}, "0.3s", GUARDS),
        (
            {"tier": "highspeed", "fallback": ["standard"], "hedge_after": None},
            "off (opted out)",
            GUARDS,
        ),
        (
            {"tier": "highspeed", "fallback": ["standard"], "hedge_after": False},
            "off (opted out)",
            GUARDS,
        ),
        (
            {"tier": "highspeed", "fallback": ["standard"], "hedge_after": "off"},
            "off (opted out)",
            GUARDS,
        ),
        # nothing to fall back on: guards could only fail the one answer there is
        ({"tier": "standard", "checks": ["non_empty"]}, "off (no fallback)", ("non_empty",)),
        ({"tier": "standard", "fallback": ["standard"]}, "off (no fallback)", ()),
        (
            {
                "tier": "standard",
                "split": [{"tier": "standard", "weight": 1}, {"tier": "highspeed", "weight": 1}],
                "fallback": ["standard"],
            },
            "auto (default)",
            GUARDS,
        ),
    ],
)
def test_effective_settings(rule: dict[str, Any], hedge: str, checks: tuple[str, ...]) -> None:
    route = _rules(rule).rules[0]
    assert hedge_setting(route) == hedge
    assert route.guarded_checks(route.chained()) == checks
    s = route_settings(route, _rules(rule))
    assert s["checks"] == list(checks) and s["hedge_after"] == hedge


def test_the_guards_are_every_check_but_the_policy_one() -> None:
    assert set(GUARDS) == set(CHECK_NAMES) - {"refusal"}


@pytest.mark.parametrize(
    ("rule", "error"),
    [
        ({"checks_drop": ["refusal"]}, "rules[0].checks_drop[0]: 'refusal' is not a guard"),
        (
            {"checks": ["repetition"], "checks_drop": ["repetition"]},
            "rules[0].checks_drop[0]: 'repetition' is in the rule's own checks",
        ),
        ({"hedge_after": True}, "hedge_after is seconds, 'auto' or off"),
        ({"hedge_after": -1}, "hedge_after must be > 0 seconds"),
    ],
)
def test_bad_guard_settings(rule: dict[str, Any], error: str) -> None:
    with pytest.raises(RulesError) as e:
        _rules({"tier": "highspeed", "fallback": ["standard"], **rule})
    assert any(error in m for m in e.value.errors), e.value.errors


def test_the_router_runs_the_guards_only_where_there_is_a_fallback() -> None:
    rules = _rules({"tier": "highspeed", "fallback": ["standard"], "checks": ["non_empty"]})
    body = {"model": "auto", "messages": [{"role": "user", "content": "x"}]}
    code = {"body": body, "headers": {"x-gateway-task": "code"}}
    out = explain(rules, code)
    assert out["rule"] == "mine" and tuple(out["checks"]) == ("non_empty", *GUARDS[1:])
    assert out["hedge_after"] == "auto"
    assert out["settings"]["guards_added"] == list(GUARDS[1:])
    pinned = {"body": {**body, "model": "standard"}, "headers": code["headers"]}
    out = explain(rules, pinned)  # pinned to the last tier: no fallback, no guards
    assert list(out["tiers"]) == ["standard"] and list(out["checks"]) == ["non_empty"]


def test_every_rule_of_the_repository_has_its_tail_guarded() -> None:
    rules = parse_rules(RULES.read_text())
    for name, s in rules_settings(rules).items():
        if len(s["tiers"]) > 1:
            assert s["hedge_after"].startswith("auto"), name
            assert set(GUARDS) <= set(s["checks"]), name
    assert isinstance(Route.model_fields["hedge_after"].default, str)


@pytest.mark.processes
def test_validate_prints_each_rules_effective_settings() -> None:
    r = gateway("validate", "routing_rules.yaml")
    assert r.returncode == 0, r.stderr
    lines = {ln.strip().split(":", 1)[0]: ln for ln in r.stdout.splitlines()[2:]}
    assert "hedge auto (default)" in lines["code"] and "(+" in lines["code"]
    assert "hedge off (no fallback)" in lines["reasoning-to-standard"]
    assert "broken stream: standard: continue (prefill)" in lines["default"]


@pytest.mark.processes
def test_explain_shows_the_effective_settings(tmp_path: Path) -> None:
    req = tmp_path / "req.json"
    req.write_text(json.dumps({"model": "auto", "messages": [{"role": "user", "content": "hi"}]}))
    r = gateway("explain", "routing_rules.yaml", str(req))
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)["settings"]
    assert s["tiers"] == ["highspeed", "standard"] and s["hedge_after"] == "auto"
    assert s["stream_finish"]["standard"].startswith("continue (prefill)")
