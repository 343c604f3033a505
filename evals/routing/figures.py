"""One cell's figures (a workload at a load through one router), from the client's records
and the engines' own counters, and the judging bars over a whole run.

* hit rate: cached / prompt tokens summed over the engines' ``/metrics`` (what the engines
  say they reused), cold caches at the cell's start;
* TTFT: the simulator's own figure per request (model ms: queue + prefill lane + prefill of
  the uncached prompt) and the client's (wall ms, through the router);
* end-to-end p99 at the client (wall ms); fleet tokens/s (generated, per model second);
* imbalance: the busiest engine's share over the mean, in requests and in prefilled
  (uncached) tokens;
* router CPU per request (its process groups' user + system time, us).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from evals.bench.common import percentile
from evals.routing.client import Record


def _delta(before: list[dict[str, float]], after: list[dict[str, float]], key: str) -> list[float]:
    return [a[key] - b[key] for b, a in zip(before, after, strict=True)]


def _imbalance(values: Sequence[float]) -> float | None:
    mean = sum(values) / len(values) if values else 0.0
    return max(values) / mean if mean > 0 else None


def _p(values: list[float], p: float) -> float | None:
    return percentile(sorted(values), p) if values else None


def cell(
    records: list[Record],
    before: list[dict[str, float]],
    after: list[dict[str, float]],
    cpu_s: float | None,
    wall_s: float,
    time_scale: float,
) -> dict[str, Any]:
    """The figures of one cell (see the module's docstring)."""
    ok = [r for r in records if r.ok]
    prompt = sum(_delta(before, after, "prompt_tokens"))
    cached = sum(_delta(before, after, "cached_tokens"))
    requests = _delta(before, after, "num_requests")
    prefilled = [
        p - c
        for p, c in zip(
            _delta(before, after, "prompt_tokens"),
            _delta(before, after, "cached_tokens"),
            strict=True,
        )
    ]
    engine_ttft = [r.engine_ttft_ms for r in ok if r.engine_ttft_ms is not None]
    client_ttft = [r.client_ttft_ms for r in ok if r.client_ttft_ms is not None]
    usage_prompt = sum(r.prompt_tokens for r in ok)
    return {
        "requests": len(records),
        "failed": len(records) - len(ok),
        "errors": sorted({r.error for r in records if r.error})[:3],
        "hit_rate": cached / prompt if prompt else None,
        "hit_rate_usage": sum(r.cached_tokens for r in ok) / usage_prompt if usage_prompt else None,
        "engine_ttft_p50_ms": _p(engine_ttft, 50),
        "engine_ttft_p99_ms": _p(engine_ttft, 99),
        "client_ttft_p50_ms": _p(client_ttft, 50),
        "client_ttft_p99_ms": _p(client_ttft, 99),
        "e2e_p99_ms": _p([r.e2e_ms for r in ok], 99),
        "tokens_per_s": sum(_delta(before, after, "generation_tokens")) / (wall_s / time_scale),
        "answer_tokens_mean": sum(_delta(before, after, "generation_tokens")) / max(1, len(ok)),
        "prefill_tokens_mean": (prompt - cached) / max(1, len(ok)),
        "requests_per_engine": [int(x) for x in requests],
        "imbalance_requests": _imbalance(requests) if len(requests) > 1 else None,
        "imbalance_prefill": _imbalance(prefilled) if len(prefilled) > 1 else None,
        "router_cpu_us": cpu_s / len(records) * 1e6 if cpu_s is not None and records else None,
        "wall_s": round(wall_s, 2),
    }


GATEWAY, GATEWAYS = "gateway-1", "gateway-4"
SMG = ("smg-cache_aware", "smg-cache_aware-tuned")
TIGHT = ("multiturn", "agent")  # within 10 % of the oracle's hit rate


def bars(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The issue's bars, one line each: what was compared, the figures, met or not."""
    by = {(c["workload"], c["load"], c["router"]): c for c in cells}
    out: list[dict[str, Any]] = []

    def add(what: str, ours: float | None, theirs: float | None, ok: bool | None) -> None:
        out.append({"bar": what, "gateway": ours, "reference": theirs, "met": ok})

    reuse = {c["workload"] for c in cells if c["reuse"]}
    for w, load in sorted({(c["workload"], c["load"]) for c in cells}):
        gw, gw4 = by.get((w, load, GATEWAY)), by.get((w, load, GATEWAYS))
        if gw is None:
            continue
        for smg in SMG:
            ref = by.get((w, load, smg))
            if ref is not None:
                if w in reuse:
                    _compare(add, f"{w} {load}: hit rate >= {smg}", gw, ref, "hit_rate", True)
                for key in ("engine_ttft_p99_ms", "client_ttft_p99_ms"):
                    _compare(add, f"{w} {load}: {key} <= {smg}", gw, ref, key, higher=False)
        oracle = by.get((w, load, "oracle"))
        if w in TIGHT and oracle is not None and gw["hit_rate"] and oracle["hit_rate"]:
            ok = gw["hit_rate"] >= 0.9 * oracle["hit_rate"]
            add(
                f"{w} {load}: hit rate >= 90 % of the oracle",
                gw["hit_rate"],
                oracle["hit_rate"],
                ok,
            )
        if w in reuse and gw4 is not None and gw["hit_rate"] and gw4["hit_rate"] is not None:
            ok = gw4["hit_rate"] >= 0.9 * gw["hit_rate"]
            add(f"{w} {load}: 4 replicas >= 90 % of 1", gw4["hit_rate"], gw["hit_rate"], ok)
    return out


def _compare(
    add: Any, what: str, gw: dict[str, Any], ref: dict[str, Any], key: str, higher: bool
) -> None:
    a, b = gw.get(key), ref.get(key)
    ok = None if a is None or b is None else (a >= b if higher else a <= b)
    add(what, a, b, ok)
