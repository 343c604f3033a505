"""Table tests for the pure parts: request parsing, classifier, router, rules validation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.errors import GatewayError, InvalidField, ModelNotFound
from gateway.request.model import parse_chat, parse_completion
from gateway.routing.classify import Classifier
from gateway.routing.router import Router
from gateway.rules.schema import Rules, RulesError, load_rules, parse_rules
from gateway.tenancy.tenants import Effective, Policy

ROOT = Path(__file__).resolve().parent.parent
RULES = load_rules(ROOT / "routing_rules.yaml")
# the strict choice: no alias pattern, so a name no alias or tier names is a 404
STRICT = RULES.model_copy(update={"aliases": {k: v for k, v in RULES.aliases.items() if k != "*"}})


def chat(content: str, **kw: Any) -> bytes:
    return json.dumps(
        {"model": kw.pop("model", "auto"), "messages": [{"role": "user", "content": content}], **kw}
    ).encode()


TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
LONG = "The committee met on Tuesday and discussed the budget at length. " * 40

CLASSIFY = [
    # id, body, headers, task, task_source, sla, tier_hint
    ("chat", chat("How are you today?"), {}, "chat", "model", "interactive", None),
    ("tools", chat("weather?", tools=TOOLS), {}, "agent", "tools", "interactive", None),
    (
        "json",
        chat("list", response_format={"type": "json_object"}),
        {},
        "extraction",
        "json",
        "standard",
        None,
    ),
    ("fence", chat("Fix this:\n```py\nx=1\n```"), {}, "code", 'cue "```"', "interactive", None),
    (
        "fim",
        chat("<|fim_prefix|>def f(): <|fim_suffix|>"),
        {},
        "code",
        'cue "<|fim_prefix|>"',
        "interactive",
        None,
    ),
    (
        "keywords",
        chat("def add(a, b):\n    return a + b\nwhy?"),
        {},
        "code",
        'cue "def"+"return"',
        "interactive",
        None,
    ),
    (
        "one-keyword-is-not-code",
        chat("I want to import a car"),
        {},
        "chat",
        "model",
        "interactive",
        None,
    ),
    (
        "summarize-long",
        chat(LONG + "\nSummarize the above."),
        {},
        "summarization",
        'cue "summarize"',
        "standard",
        None,
    ),
    (
        "summarize-short-is-chat",
        chat("Summarize your day"),
        {},
        "chat",
        "model",
        "interactive",
        None,
    ),
    (
        "reasoning",
        chat("Solve for x step by step: 2x+3=7"),
        {},
        "reasoning",
        'cue "step by step"',
        "standard",
        None,
    ),
    ("task-header", chat("hi"), {"x-gateway-task": "batch"}, "batch", "header", "batch", None),
    ("sla-header", chat("hi"), {"x-gateway-sla": "batch"}, "chat", "model", "batch", None),
    ("alias-fast", chat("hi", model="fast"), {}, "chat", "model", "interactive", "highspeed"),
    (
        "tier-header",
        chat("hi"),
        {"x-gateway-tier": "standard"},
        "chat",
        "model",
        "interactive",
        "standard",
    ),
    (
        "tier-header-alias",
        chat("hi"),
        {"x-gateway-tier": "fast"},
        "chat",
        "model",
        "interactive",
        "highspeed",
    ),
    (
        "tools-beat-json",
        chat("x", tools=TOOLS, response_format={"type": "json_object"}),
        {},
        "agent",
        "tools",
        "interactive",
        None,
    ),
]


@pytest.mark.parametrize(
    ("body", "headers", "task", "source", "sla", "hint"),
    [c[1:] for c in CLASSIFY],
    ids=[c[0] for c in CLASSIFY],
)
def test_classify(
    body: bytes, headers: dict[str, str], task: str, source: str, sla: str, hint: str | None
) -> None:
    c = Classifier(RULES).classify(parse_chat(body), headers)
    # the model's source carries its probability: "model 0.93"
    got = "model" if c.task_source.startswith("model ") else c.task_source
    assert (c.task, got, c.sla, c.tier_hint) == (task, source, sla, hint)


def test_classify_completions_prompt() -> None:
    req = parse_completion(b'{"model": "auto", "prompt": "def f():\\n    return 1"}')
    assert Classifier(RULES).classify(req, {}).task == "code"


@pytest.mark.parametrize(
    ("body", "headers", "exc", "param"),
    [
        (chat("x", model="gpt-4"), {}, ModelNotFound, "model"),
        (chat("x"), {"x-gateway-task": "nope"}, InvalidField, "x-gateway-task"),
        (chat("x"), {"x-gateway-sla": "nope"}, InvalidField, "x-gateway-sla"),
        (chat("x"), {"x-gateway-tier": "nope"}, InvalidField, "x-gateway-tier"),
    ],
    ids=["unknown-model", "bad-task", "bad-sla", "bad-tier"],
)
def test_classify_rejects(
    body: bytes, headers: dict[str, str], exc: type[GatewayError], param: str
) -> None:
    with pytest.raises(exc) as ei:
        Classifier(STRICT).classify(parse_chat(body), headers)
    assert ei.value.param == param


ROUTE = [
    # id, body, headers, health, rule, tiers, reason-part
    ("default", chat("hello"), {}, {}, "default", ("highspeed", "standard"), "tier=highspeed"),
    (
        "agent",
        chat("x", tools=TOOLS),
        {},
        {},
        "agent-step",
        ("highspeed", "standard"),
        "tier=highspeed",
    ),
    (
        "reasoning",
        chat("prove it step by step"),
        {},
        {},
        "reasoning-to-standard",
        ("standard",),
        "tier=standard",
    ),
    (
        "batch",
        chat("hi"),
        {"x-gateway-sla": "batch"},
        {},
        "batch-to-standard",
        ("standard",),
        "tier=standard",
    ),
    (
        "pin-standard-drops-fast",
        chat("hi", model="standard"),
        {},
        {},
        "default",
        ("standard",),
        "pinned by model",
    ),
    (
        "pin-fast-on-standard-rule",
        chat("prove it step by step", model="fast"),
        {},
        {},
        "reasoning-to-standard",
        ("highspeed", "standard"),
        "tier=highspeed pinned by model",
    ),
    (
        "open-circuit",
        chat("hello"),
        {},
        {"highspeed": False},
        "default",
        ("standard",),
        "unavailable: highspeed",
    ),
    (
        "all-open-still-tries-last",
        chat("hello"),
        {},
        {"highspeed": False, "standard": False},
        "default",
        ("standard",),
        "unavailable: highspeed,standard",
    ),
]


@pytest.mark.parametrize(
    ("body", "headers", "health", "rule", "tiers", "why"),
    [c[1:] for c in ROUTE],
    ids=[c[0] for c in ROUTE],
)
def test_route(
    body: bytes,
    headers: dict[str, str],
    health: dict[str, bool],
    rule: str,
    tiers: tuple[str, ...],
    why: str,
) -> None:
    c = Classifier(RULES).classify(parse_chat(body), headers)
    d = Router(RULES).decide(c, health)
    assert (d.rule, d.tiers) == (rule, tiers)
    assert why in d.reason
    assert d.deadline == RULES.sla_classes[c.sla].deadline


_MINE = {"name": "mine", "when": {"task": ["chat"]}, "tier": "standard"}


@pytest.mark.parametrize(
    ("policy", "rule", "tiers", "sla", "ignored"),
    [
        ({}, "default", ("highspeed", "standard"), "interactive", None),
        ({"default_sla": "batch"}, "batch-to-standard", ("standard",), "batch", None),
        (
            {"default_sla": "gone"},
            "default",
            ("highspeed", "standard"),
            "interactive",
            "default_sla gone",
        ),
        ({"forced_tier": "standard"}, "default", ("standard",), "interactive", None),
        (
            {"forced_tier": "gone"},
            "default",
            ("highspeed", "standard"),
            "interactive",
            "forced_tier gone",
        ),
        ({"rules": [_MINE]}, "mine", ("standard",), "interactive", None),
        (
            {"rules": [{**_MINE, "tier": "gone"}]},
            "default",
            ("highspeed", "standard"),
            "interactive",
            "rule mine (tier gone)",
        ),
        (
            {"rules": [{**_MINE, "fallback": ["gone", "highspeed"]}]},
            "default",
            ("highspeed", "standard"),
            "interactive",
            "rule mine (tier gone)",
        ),
        (
            {"rules": [{**_MINE, "sla": "gone"}]},
            "default",
            ("highspeed", "standard"),
            "interactive",
            "rule mine (sla gone)",
        ),
        (
            {"rules": [{**_MINE, "tier": "gone"}], "forced_tier": "old", "default_sla": "gone"},
            "default",
            ("highspeed", "standard"),
            "interactive",
            "default_sla gone; rule mine (tier gone); forced_tier old",
        ),
        (
            {"allowed_tiers": ["gone", "standard"]},
            "default",
            ("standard",),
            "interactive",
            None,
        ),  # a restriction is kept, never widened: the names it lacks match nothing
    ],
    ids=[
        "none",
        "sla",
        "sla-gone",
        "forced",
        "forced-gone",
        "rule",
        "rule-tier-gone",
        "rule-fallback-gone",
        "rule-sla-gone",
        "all-gone",
        "allowed-partly-gone",
    ],
)
def test_a_policy_naming_what_the_running_rules_lack(
    policy: dict[str, Any], rule: str, tiers: tuple[str, ...], sla: str, ignored: str | None
) -> None:
    """A policy is checked against the rules it was written under; a later version may lack
    a tier or SLA class it names. That part is ignored, and the route header says so (it
    was a KeyError: a 500 on every request of the tenant)."""
    eff = Effective(Policy.model_validate(policy), tenant_id="ten_1")
    c = Classifier(RULES).classify(parse_chat(chat("hello there")), {})
    d = Router(RULES).decide(c, {}, eff)
    assert (d.rule, d.tiers, d.cls.sla) == (rule, tiers, sla)
    assert d.deadline == RULES.sla_classes[sla].deadline
    said = "policy ignored, not in the rules: "
    assert (said + ignored in d.reason) if ignored else (said not in d.reason), d.reason


def _rules_with(**changes: Any) -> Rules:
    data = yaml.safe_load((ROOT / "routing_rules.yaml").read_text())
    data.update(changes)
    return parse_rules(yaml.safe_dump(data))


@pytest.mark.parametrize(
    ("when", "headers", "prompt", "matches"),
    [
        ({"headers": {"x-team": "search"}}, {"x-team": "search"}, "hi", True),
        ({"headers": {"x-team": "search"}}, {"x-team": "ads"}, "hi", False),
        ({"min_prompt_tokens": 100}, {}, "word " * 100, True),
        ({"min_prompt_tokens": 100}, {}, "hi", False),
        ({"max_prompt_tokens": 10}, {}, "hi", True),
        ({"stream": True}, {}, "hi", False),
        ({"model": ["auto"]}, {}, "hi", True),
    ],
    ids=[
        "header-eq",
        "header-ne",
        "min-tokens",
        "min-tokens-short",
        "max-tokens",
        "stream",
        "model",
    ],
)
def test_when_conditions(
    when: dict[str, Any], headers: dict[str, str], prompt: str, matches: bool
) -> None:
    rule = {"name": "probe", "when": when, "tier": "standard", "checks": []}
    rules = _rules_with(rules=[rule])
    c = Classifier(rules).classify(parse_chat(chat(prompt)), headers)
    assert (Router(rules).decide(c, {}).rule == "probe") is matches


BAD_RULES = [
    ("unknown-top-key", {"colour": "red"}, "colour: Extra inputs are not permitted"),
    (
        "unknown-tier-key",
        {"tiers": {"highspeed": {"model": "m", "endpoints": ["http://x"], "turbo": 1}}},
        "tiers.highspeed.turbo: Extra inputs are not permitted",
    ),
    (
        "bad-timeout",
        {
            "tiers": {
                "highspeed": {"model": "m", "endpoints": ["http://x"], "timeouts": {"ttft": -1}}
            }
        },
        "tiers.highspeed.timeouts.ttft: Input should be greater than 0",
    ),
    (
        "bad-url",
        {"tiers": {"highspeed": {"model": "m", "endpoints": ["ftp://x"]}}},
        "tiers.highspeed: Value error, endpoint 'ftp://x' is not an http(s) URL",
    ),
    (
        "rule-unknown-tier",
        {"rules": [{"name": "r", "tier": "gpu9"}]},
        "rules[0].tier: unknown tier 'gpu9'",
    ),
    (
        "rule-unknown-check",
        {"rules": [{"name": "r", "tier": "standard", "checks": ["vibes"]}]},
        "rules[0].checks[0]: unknown check 'vibes'",
    ),
    (
        "rule-unknown-task",
        {"rules": [{"name": "r", "tier": "standard", "when": {"task": ["poetry"]}}]},
        "rules[0].when.task[0]: unknown task 'poetry'",
    ),
    (
        "duplicate-rule",
        {"rules": [{"name": "r", "tier": "standard"}, {"name": "r", "tier": "standard"}]},
        "rules[1].name: duplicate rule name 'r'",
    ),
    ("bad-default-sla", {"default_sla": "asap"}, "default_sla: unknown SLA class 'asap'"),
    (
        "alias-unknown-tier",
        {"aliases": {"auto": None, "turbo": "gpu9"}},
        "aliases.turbo: unknown tier 'gpu9'",
    ),
    (
        "check-settings-unknown-key",
        {"checks": {"vibes": {}}},
        "checks.vibes: Extra inputs are not permitted",
    ),
]


@pytest.mark.parametrize(
    ("change", "expected"), [c[1:] for c in BAD_RULES], ids=[c[0] for c in BAD_RULES]
)
def test_rules_errors_name_their_yaml_path(change: dict[str, Any], expected: str) -> None:
    with pytest.raises(RulesError) as ei:
        _rules_with(**change)
    assert any(e.startswith(expected) for e in ei.value.errors), ei.value.errors


def test_rules_reports_every_error_at_once() -> None:
    with pytest.raises(RulesError) as ei:
        _rules_with(default_sla="asap", rules=[{"name": "r", "tier": "gpu9"}])
    assert len(ei.value.errors) == 2


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("tiers: [", "YAML syntax"),
        ("- a\n- b", "<root>: expected a mapping"),
        ("", "<root>: expected a mapping"),
    ],
    ids=["syntax", "list", "empty"],
)
def test_rules_yaml_shape_errors(text: str, expected: str) -> None:
    with pytest.raises(RulesError) as ei:
        parse_rules(text)
    assert ei.value.errors[0].startswith(expected)


@pytest.mark.parametrize(
    ("budget", "priced", "tiers", "why"),
    [
        (None, frozenset(), ("highspeed", "standard"), None),  # no USD budget: any tier
        (1.0, None, ("highspeed", "standard"), None),  # prices not known to the caller
        (1.0, frozenset({"standard"}), ("standard",), "unpriced: highspeed"),
        (1.0, frozenset({"highspeed", "standard"}), ("highspeed", "standard"), None),
    ],
)
def test_a_usd_budget_keeps_to_priced_tiers_in_the_routers_decision(
    budget: float | None, priced: frozenset[str] | None, tiers: tuple[str, ...], why: str | None
) -> None:
    from gateway.tenancy.tenants import CostBudget, Effective, Policy

    policy = Policy(cost_budget=CostBudget(usd=budget) if budget else None)
    c = Classifier(RULES).classify(parse_chat(chat("hello there")), {})
    d = Router(RULES).decide(c, {}, Effective(policy), priced=priced)
    assert d.tiers == tiers
    assert why is None or why in d.reason


def test_a_usd_budget_with_no_priced_tier_is_refused() -> None:
    from gateway.errors import PermissionDenied
    from gateway.tenancy.tenants import CostBudget, Effective, Policy

    eff = Effective(Policy(cost_budget=CostBudget(usd=1.0)))
    c = Classifier(RULES).classify(parse_chat(chat("hello there")), {})
    with pytest.raises(PermissionDenied) as e:
        Router(RULES).decide(c, {}, eff, priced=frozenset())
    assert e.value.code == "tier_unpriced"
