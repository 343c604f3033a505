"""A policy must fit the running rules: tiers, SLA classes and checks it names must exist."""

from __future__ import annotations

from gateway.checks.registry import CHECK_NAMES
from gateway.errors import Unprocessable
from gateway.rules.schema import Rules, cross_check
from gateway.tenancy.tenants import Policy


def policy_problems(p: Policy, rules: Rules) -> list[str]:
    """A policy that names tiers, SLA classes or checks the rules don't have is refused."""
    errs: list[str] = []
    for t in (*(p.allowed_tiers or ()), *((p.forced_tier,) if p.forced_tier else ())):
        if t not in rules.tiers:
            errs.append(f"unknown tier {t!r}")
    if p.default_sla is not None and p.default_sla not in rules.sla_classes:
        errs.append(f"unknown SLA class {p.default_sla!r}")
    names = (*CHECK_NAMES, *rules.checks.named)
    for c in (*(p.checks_add or ()), *(p.checks_drop or ())):
        if c not in names:
            errs.append(f"unknown check {c!r}")
    if p.rules:
        combined = rules.model_copy(update={"rules": (*p.rules, *rules.rules)})
        n = len(p.rules)
        for e in cross_check(combined):
            if e.startswith("rules[") and int(e[6 : e.index("]")]) < n:
                errs.append("policy." + e)
    return errs


def check_policy(p: Policy, rules: Rules) -> None:
    """422 ``invalid_policy`` with every problem."""
    errs = policy_problems(p, rules)
    if errs:
        raise Unprocessable(
            "The policy does not fit the routing rules.", errs, code="invalid_policy"
        )
