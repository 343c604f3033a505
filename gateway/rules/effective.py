"""What a rule does once its defaults are filled in: the view ``gateway validate`` prints
and ``gateway explain`` adds to a decision.

A rule's file says only what it changes; this says what it gets: its chain, hedging, the
checks it runs (its own and the guards added), when its streams hold back their first
tokens, and how each tier after the first would finish a stream that broke after the
client got bytes (:func:`tier_finish`; the gateway decides per request, from what the
tiers can do then: ``gateway.dispatch.finish``).
"""

from __future__ import annotations

from typing import Any

from gateway.checks.registry import BUILTINS
from gateway.checks.user import build_user_checks
from gateway.rules.routes import Route
from gateway.rules.schema import Rules
from gateway.rules.tiers import Tier


def tier_finish(tier: Tier) -> str:
    """How ``tier`` finishes a stream another tier began, as its configuration says."""
    fallback = "prompt" if tier.continuation_prompt else "restart"
    if tier.continuation == "off":
        return fallback
    if tier.provider == "litellm":
        return f"continue (prefill) where LiteLLM says the model takes one, else {fallback}"
    return f"continue ({tier.continuation}), or {fallback} once it refuses one"


def hedge_setting(route: Route) -> str:
    if not route.chained():
        return "off (no fallback)"
    v = route.hedge_after
    if v is None:
        return "off (opted out)"
    if v == "auto":
        return "auto" + ("" if "hedge_after" in route.model_fields_set else " (default)")
    return f"{v:g}s"


def route_settings(route: Route, rules: Rules) -> dict[str, Any]:
    """The effective settings of one rule (or the default route), JSON-able."""
    chained = route.chained()
    firsts = [a.tier for a in route.split] or [route.tier]
    chain = [*firsts, *(t for t in route.fallback if t not in firsts)]
    checks = route.guarded_checks(chained)
    later = [t for t in route.fallback if t in rules.tiers]
    kinds = check_kinds(checks, rules)
    holding = [c for c in checks if "holds streams" in kinds.get(c, "")]
    if holding:
        hold = f"every stream, to its end: {', '.join(holding)} judge(s) the whole answer first"
    elif route.hold_back:
        hold = "every stream"
    else:
        hold = "tool calls, a client's JSON schema, n > 1 (a broken one could not be finished)"
    return {
        "tiers": chain,
        "hedge_after": hedge_setting(route),
        "checks": list(checks),
        "check_kinds": kinds,
        "guards_added": [c for c in checks if c not in route.checks],
        "checks_dropped": list(route.checks_drop),
        "hold_back": hold,
        "stream_finish": {t: tier_finish(rules.tiers[t]) for t in later},
        "on_last_failure": route.on_last_failure,
        "split": {a.label: f"{a.tier} x{a.weight:g}" for a in route.split},
        "analysis": route.analysis.describe() if route.analysis is not None else None,
    }


def check_kinds(names: tuple[str, ...], rules: Rules) -> dict[str, str]:
    """Each check's kind and what it can do: ``contains: partial (delta), cheap``."""
    built = build_user_checks({n: s for n, s in rules.checks.named.items() if n in names})
    out: dict[str, str] = {}
    for n in names:
        if n in built:
            out[n] = f"{rules.checks.named[n].kind}: {built[n].abilities.describe()}"
        elif n in BUILTINS:
            out[n] = f"built-in: {BUILTINS[n].abilities.describe()}"
    return out


def rules_settings(rules: Rules) -> dict[str, dict[str, Any]]:
    """Every rule's effective settings, by name, in order; the default route last."""
    out = {r.name: route_settings(r, rules) for r in rules.rules}
    out["default"] = route_settings(rules.default, rules)
    return out


def describe_line(name: str, s: dict[str, Any]) -> str:
    """One rule's effective settings on a line (``gateway validate``)."""
    added = f" (+{', '.join(s['guards_added'])})" if s["guards_added"] else ""
    finish = "; ".join(f"{t}: {how}" for t, how in s["stream_finish"].items()) or "-"
    line = (
        f"{name}: {' -> '.join(s['tiers'])}; hedge {s['hedge_after']}; "
        f"checks {', '.join(s['checks']) or '-'}{added}; broken stream: {finish}"
    )
    if s.get("split"):
        line += "; split " + ", ".join(f"{arm} {w}" for arm, w in s["split"].items())
    if s.get("analysis"):
        line += f"; rollout judged: {s['analysis']}"
    return line
