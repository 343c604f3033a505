"""A bad-deploy drill's figures from its samples and the replicas' gauges, and its report
(markdown and JSON)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from evals.bench.common import percentile
from evals.drills.load import Flip, Sample


@dataclass
class Phases:
    """When the fast tier went bad and when it was fixed, and the end (seconds)."""

    bad: float
    fixed: float
    end: float


def _ms(v: float | None) -> float | None:
    return None if v is None else round(v * 1000, 1)


def _latency(samples: list[Sample]) -> dict[str, Any]:
    ok = sorted(s.latency_s for s in samples if s.status == 200)
    return {"n": len(samples), "p50_ms": _ms(percentile(ok, 50)), "p99_ms": _ms(percentile(ok, 99))}


def _first_flip(flips: list[Flip], after: float, demoted: bool) -> dict[int, float]:
    """Per replica: seconds from ``after`` to its gauge's first change to ``demoted``."""
    out: dict[int, float] = {}
    for f in sorted(flips, key=lambda f: f.at):
        if f.at >= after and f.demoted is demoted and f.replica not in out:
            out[f.replica] = round(f.at - after, 2)
    return out


def figures(samples: list[Sample], flips: list[Flip], ph: Phases) -> dict[str, Any]:
    before = [s for s in samples if s.at < ph.bad]
    during = [s for s in samples if ph.bad <= s.at < ph.fixed]
    after = [s for s in samples if s.at >= ph.fixed]
    demoted_in = _first_flip(flips, ph.bad, True)
    restored_in = _first_flip(flips, ph.fixed, False)
    first_skip = min((s.at for s in during if s.skipped), default=None)
    skipping = [s for s in during if first_skip is not None and s.at >= first_skip]
    back = min((s.at for s in after if s.tier == "highspeed" and not s.probe), default=None)
    spans = {"before": ph.bad, "during": ph.fixed - ph.bad, "after": ph.end - ph.fixed}

    def standard_rate(xs: list[Sample], span: float) -> float:
        return round(sum(s.standard_work for s in xs) / span, 2) if span > 0 else 0.0

    rates = {k: standard_rate(xs, spans[k]) for k, xs in (("before", before), ("during", during),
                                                           ("after", after))}  # fmt: skip
    return {
        "requests": len(samples),
        "errors": sum(s.status != 200 for s in samples),
        "time_to_demote_s": min(demoted_in.values(), default=None),
        "demoted_in_s_by_replica": demoted_in,
        "replicas_apart_s": (
            round(max(demoted_in.values()) - min(demoted_in.values()), 2) if demoted_in else None
        ),
        "first_request_skipping_s": None if first_skip is None else round(first_skip - ph.bad, 2),
        "paid_before_demotion": sum(
            s.paid for s in during if first_skip is None or s.at < first_skip
        ),
        "paid_after_demotion": {
            "probes": sum(s.paid and s.probe for s in skipping),
            "others": sum(s.paid and not s.probe for s in skipping),
        },
        "skipped_during": sum(s.skipped for s in during),
        "during_requests": len(during),
        "latency": {
            "before": _latency(before),
            "during": _latency(during),
            "during_undetected": _latency([s for s in during if s not in skipping]),
            "during_demoted": _latency(skipping),
            "after": _latency(after),
        },
        "standard_rps": rates,
        "standard_extra_load": (
            round(rates["during"] / rates["before"], 2) if rates["before"] else None
        ),
        "time_to_restore_s": min(restored_in.values(), default=None),
        "restored_in_s_by_replica": restored_in,
        "first_fast_answer_after_fix_s": None if back is None else round(back - ph.fixed, 2),
    }


def _row(name: str, lat: dict[str, Any]) -> str:
    def f(v: Any) -> str:
        return "—" if v is None else f"{v:,.0f}"

    return f"| {name} | {lat['n']} | {f(lat['p50_ms'])} | {f(lat['p99_ms'])} |"


def markdown(fig: dict[str, Any], setup: dict[str, Any]) -> str:
    lat = fig["latency"]
    paid_after = fig["paid_after_demotion"]
    lines = [
        "## Bad deploy",
        "",
        f"`{setup['command']}`",
        "",
        f"{setup['replicas']} gateway replica(s){' on one Redis' if setup['redis'] else ''}, "
        f"two simulated tiers (time scale {setup['time_scale']:g}), {setup['rate']:g} "
        f"non-streamed requests/s round-robin over the replicas (max_tokens "
        f"{setup['max_tokens']}); the quality circuit's settings: {setup['quality']}. At "
        f"{setup['bad_at']:g} s every answer of the fast tier starts to loop "
        f'(`POST /sim/faults {{"faults": {{"loop": 1.0}}}}`); at {setup["fixed_at"]:g} s it '
        f"is fixed; the drill ends at {setup['end']:g} s.",
        "",
        "| figure | value |",
        "|---|---|",
        f"| time to demote (first replica's gauge) | {fig['time_to_demote_s']} s |",
        f"| each replica demoted (s after the deploy) | {fig['demoted_in_s_by_replica']} |",
        f"| replicas apart | {fig['replicas_apart_s']} s |",
        f"| first request answered by the standard tier directly | "
        f"{fig['first_request_skipping_s']} s after the deploy |",
        f"| requests that paid for the fast tier's bad answer before the demotion | "
        f"{fig['paid_before_demotion']} |",
        f"| ... after it (probes; others) | {paid_after['probes']}; {paid_after['others']} |",
        f"| requests while it was bad; skipped its tier | {fig['during_requests']}; "
        f"{fig['skipped_during']} |",
        f"| standard tier's load, requests/s (before, during, after) | "
        f"{fig['standard_rps']['before']}, {fig['standard_rps']['during']}, "
        f"{fig['standard_rps']['after']} |",
        f"| time to restore (first replica's gauge after the fix) | {fig['time_to_restore_s']} s |",
        f"| each replica restored (s after the fix) | {fig['restored_in_s_by_replica']} |",
        f"| first answer by the fast tier (no probe) after the fix | "
        f"{fig['first_fast_answer_after_fix_s']} s |",
        f"| requests; errors | {fig['requests']}; {fig['errors']} |",
        "",
        "| phase | requests | p50 ms | p99 ms |",
        "|---|---|---|---|",
        _row("before", lat["before"]),
        _row("during (all)", lat["during"]),
        _row("during, before the demotion", lat["during_undetected"]),
        _row("during, once demoted", lat["during_demoted"]),
        _row("after the fix", lat["after"]),
        "",
    ]
    return "\n".join(lines)


def write(out: Path, fig: dict[str, Any], setup: dict[str, Any], samples: list[Sample]) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    doc = {"setup": setup, "figures": fig, "samples": [asdict(s) for s in samples]}
    (out / "drill-bad-deploy.json").write_text(json.dumps(doc, indent=1))
    path = out / "drill-bad-deploy.md"
    path.write_text(markdown(fig, setup))
    return path
