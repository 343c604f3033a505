"""The Markdown report of the response-cache benchmark (``docs/reports/cache.md``)."""

from __future__ import annotations

import argparse
import statistics
from datetime import UTC, datetime
from typing import Any

from evals.cache.workload import FAQ, Tally


def _f(v: Any) -> str:
    return "-" if v is None else f"{v:,.2f}" if isinstance(v, float) else f"{v:,}"


def report(
    a: argparse.Namespace,
    rows: list[dict[str, Any]],
    cached: Tally,
    plain: Tally,
    engine: dict[str, tuple[float, float]],
) -> str:
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# Response cache: a hit against the fast tier raw, and a replayed workload",
        "",
        f"`python -m evals cache --duration {a.duration} --clients {a.clients} --scale {a.scale}`"
        f" ({stamp}; this shared 2-core VM, every process on any core: a small run that proves "
        "the benchmark works — rerun it on a quiet machine for figures).",
        "",
        "## 1. A hit against the fast tier raw",
        "",
        "The same deterministic chat request (`temperature: 0`, `max_tokens: 256`: the "
        "simulator's 89-token answer ends by itself, so it is kept), closed-loop "
        "keep-alive clients (`evals.bench.loadgen`). `fast raw`: the simulator's fast-tier "
        "profile itself; `gateway`: through a gateway without a cache; `gateway hit`: through "
        "a gateway whose rule caches it (every response checked for `x-gateway-cache: hit`).",
        "",
        "| stream | clients | target | latency p50 / p99 ms | TTFB p50 / p99 ms | req/s | errors |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ttfb = f"{_f(r['ttfb_p50'])} / {_f(r['ttfb_p99'])}" if r["stream"] else "-"
        lines.append(
            f"| {'yes' if r['stream'] else 'no'} | {r['clients']} | {r['target']} | "
            f"{_f(r['lat_p50'])} / {_f(r['lat_p99'])} | {ttfb} | {_f(r['rps'])} | "
            f"{sum(r['errors'].values()) if r['errors'] else 0} |"
        )
    lines += [
        "",
        "## 2. A replayed workload",
        "",
        _workload_text(a.scale),
        "",
        "| kind | requests | through the caching gateway |",
        "|---|---|---|",
    ]
    for kind in sorted(cached.kinds):
        got = cached.kinds[kind]
        lines.append(
            f"| {kind} | {sum(got.values())} | "
            + ", ".join(f"{k} {v}" for k, v in sorted(got.items()))
            + " |"
        )
    hits = len(cached.hit_ms)
    (rq_c, tok_c), (rq_p, tok_p) = engine["cache"], engine["plain"]
    lines += [
        "",
        f"Hit rate: **{hits / cached.requests:.1%}** ({hits} of {cached.requests}); tokens the "
        f"hits did not spend (their stored answers' usage): **{cached.saved_tokens:,}**, "
        f"{cached.saved_completion:,} of them generated (completion) tokens.",
        f"The engine's own counters over the run: {int(rq_c):,} requests and {int(tok_c):,} "
        f"generated tokens through the caching gateway, against {int(rq_p):,} and "
        f"{int(tok_p):,} through the gateway without a cache "
        f"({1 - tok_c / tok_p if tok_p else 0:.1%} fewer generated tokens).",
        f"Latency p50: a hit {_f(_med(cached.hit_ms))} ms, a miss {_f(_med(cached.miss_ms))} "
        f"ms (the same requests without a cache: {_f(_med(plain.miss_ms))} ms; a miss on a "
        "semantic rule embeds its prompt first).",
        "",
        "The semantic cache's false hits and hit rate on labelled pairs: "
        "[semantic-cache.md](semantic-cache.md) (`python -m evals semcache`).",
    ]
    return "\n".join(lines) + "\n"


def _med(v: list[float]) -> float | None:
    return statistics.median(v) if v else None


def _workload_text(scale: int) -> str:
    return (
        f"Scale {scale}: an eval of {10 * scale} prompts run twice (the second pass a re-run); "
        f"{4 * scale} agents of 5 steps, each step re-asked with probability 0.35; "
        f"{30 * scale} questions from {len(FAQ)} common ones (Zipf, s=1.1), 25 % of them "
        "rephrased (casing, punctuation, greetings) and 20 % sampled at temperature 0.7. "
        "Sent one at a time, in one order, through each gateway; the caching one caches "
        "every rule, semantic on (local embedder, the shipped threshold)."
    )
