"""The canary drill's figures (:mod:`evals.drills.canary`): per run, when each step and
the decision came, what the canary served before it, each arm's fallback rate as the
clients saw it, the deciding test, the rules versions made; and its Markdown."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Sample:
    at: float  # sent, seconds since the run's load began
    status: int = 0
    latency_s: float = 0.0
    arm: str = ""  # from x-gateway-route
    fallback: str = ""  # x-gateway-fallback: an attempt failed (retried or fallen back)
    error: str = ""


@dataclass
class RunResult:
    name: str
    ok: bool
    doc: dict[str, Any] = field(default_factory=dict)


def _rate(xs: list[Sample]) -> float | None:
    return sum(1 for s in xs if s.fallback) / len(xs) if xs else None


def _deciding(audit: list[dict[str, Any]], action: str) -> dict[str, Any] | None:
    """The fallback comparison of the last audited step of ``action`` (newest first)."""
    for e in audit:
        if e.get("who") == "analysis" and e.get("action") == f"rollout.{action}":
            comps = e.get("change", {}).get("comparisons", [])
            fb = next((c for c in comps if c["metric"] == "fallback_rate"), None)
            return {"target": e.get("target"), "fallback": fb, "reason": e["change"]["reason"]}
    return None


def summarize(
    name: str,
    canary_rate: float,
    base_rate: float,
    samples: list[Sample],
    seen: list[dict[str, Any]],
    audit: list[dict[str, Any]],
    versions: list[dict[str, Any]],
) -> RunResult:
    want = 0.0 if name == "bad" else 100.0
    steps = [(round(e["t"], 2), e["share"]) for e in seen]
    shares = [(t, sh) for i, (t, sh) in enumerate(steps) if i == 0 or sh != steps[i - 1][1]]
    decided = next((t for t, sh in shares if sh == want), None)
    until = decided if decided is not None else max((s.at for s in samples), default=0.0)
    before = [s for s in samples if s.at < until]
    canary = [s for s in before if s.arm == "canary"]
    stable = [s for s in before if s.arm == "stable"]
    doc = {
        "run": name,
        "canary_500_rate": canary_rate,
        "stable_500_rate": base_rate,
        "outcome": "rolled back"
        if decided is not None and want == 0
        else ("promoted to 100 %" if decided is not None else "undecided"),
        "time_to_decision_s": decided,
        "shares": shares,
        "requests": len(samples),
        "requests_before_decision": len(before),
        "canary_requests_before_decision": len(canary),
        "canary_paid_before_decision": sum(1 for s in canary if s.fallback),
        "client_fallback_rate": {"stable": _rate(stable), "canary": _rate(canary)},
        "errors": sum(1 for s in samples if s.status != 200),
        "deciding": _deciding(audit, "rollback" if want == 0 else "promote"),
        "versions_by_analysis": [v["version"] for v in versions if v.get("by") == "analysis"],
    }
    return RunResult(name, decided is not None and doc["errors"] == 0, doc)


def _pct(v: float | None) -> str:
    return "—" if v is None else f"{100 * v:.1f} %"


def markdown(setup: dict[str, Any], results: list[RunResult]) -> str:
    lines = [
        f"`{setup['command']}`: {setup['replicas']} replica(s) on {setup['store']}, "
        f"{setup['rate']:g} requests/s of distinct users, steps {setup['steps']}, each held "
        f"{setup['interval']:g} s and {setup['min_samples']} requests an arm.",
        "",
        "| run | canary / stable HTTP 500s | outcome | decided after | steps (s: share %) "
        "| canary requests before (paid) | fallback rate seen: stable / canary "
        "| deciding fallback test | versions by analysis | errors |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        d = r.doc
        dec = d["deciding"] or {}
        fb = dec.get("fallback") or {}
        test = (
            f"x{fb['ratio']:.2f}, p={fb['p_value']:.2g} (level {fb['alpha']:.2g})"
            if fb and fb.get("ratio") is not None
            else (f"p={fb['p_value']:.2g}" if fb else "—")
        )
        t = d["time_to_decision_s"]
        lines.append(
            f"| {d['run']} | {_pct(d['canary_500_rate'])} / {_pct(d['stable_500_rate'])} "
            f"| {d['outcome']} | {'—' if t is None else f'{t:.1f} s'} "
            f"| {', '.join(f'{s:.1f}: {sh:g}' for s, sh in d['shares'])} "
            f"| {d['canary_requests_before_decision']} ({d['canary_paid_before_decision']}) "
            f"| {_pct(d['client_fallback_rate']['stable'])} / "
            f"{_pct(d['client_fallback_rate']['canary'])} | {test} "
            f"| {', '.join(map(str, d['versions_by_analysis'])) or '—'} | {d['errors']} |"
        )
    return "\n".join(lines) + "\n"
