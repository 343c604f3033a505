"""Response cache benchmark: a hit against the fast tier raw, and a replayed workload.

    python -m evals cache [--duration 3] [--clients 1,8] [--scale 1] [--out DIR]
                          [--report docs/reports/cache.md] [--time-scale 1.0]

Two parts, against the project's SGLang-shaped simulator (``engines.sim``: the fast
tier's profile, TTFT a few ms, EAGLE-speed decoding) behind a real gateway:

1. **A hit against the fast tier raw** — the proxy benchmark's load generator
   (``evals.bench.loadgen``: closed-loop keep-alive clients, every response verified)
   on the same deterministic chat request against three targets: the simulator itself
   (``fast raw``), a gateway without a cache (``gateway``: the normal path), and a gateway
   whose rule caches it (``gateway hit``: every response must say ``x-gateway-cache:
   hit``). Streamed and not, at each ``--clients``: latency and time to first byte,
   p50 and p99, and requests/s.
2. **A replayed workload** — a deterministic trace, sent once through a caching gateway
   and once through one without: an eval run twice (the second pass a re-run at
   ``temperature: 0``), agent loops whose steps are sometimes re-asked (a retry after
   the agent's own timeout or parse error), and users asking a few common questions
   (Zipf), some rephrased (casing, punctuation, politeness: the semantic cache's guard
   lets these through) and some sampled (``temperature`` 0.7: never cached). Reported:
   hits by kind, hit rate, tokens the hits did not spend (their answers' usage), and the
   simulator's own generated-token counter for both runs.

Every child process is stopped at the end (``evals.bench.procs``). Writes the report to
``--report`` and the raw numbers and logs under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from evals.bench.common import CHAT_PATH, run
from evals.bench.loadgen import Expect, load
from evals.bench.procs import ROOT, Service, log
from evals.cache.procs import post, sim_counters, start_gateway, start_sim
from evals.cache.report import report
from evals.cache.workload import replay, workload

PROMPT = "What are the three primary colors? Answer in one sentence."


def bench_body(stream: bool, model: str) -> bytes:
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": 256,
        "temperature": 0,
    }  # it ends by itself: kept
    if stream:
        body["stream"] = True
    return json.dumps(body, separators=(",", ":")).encode()


def hit_vs_raw(
    targets: dict[str, tuple[str, str, Expect]], clients: list[int], duration: float
) -> list[dict[str, Any]]:
    rows = []
    for stream in (False, True):
        for c in clients:
            for name, (url, model, expect) in targets.items():
                out: dict[str, Any] = run(
                    load(
                        url + CHAT_PATH,
                        connections=c,
                        duration=duration,
                        warmup=0.5,
                        stream=stream,
                        expect=expect,
                        body=bench_body(stream, model),
                    )
                )
                row = {
                    "target": name,
                    "stream": stream,
                    "clients": c,
                    "rps": out["rps"],
                    "ok": out["ok"],
                    "errors": out["errors"],
                    "lat_p50": out["total_ms"]["p50"],
                    "lat_p99": out["total_ms"]["p99"],
                    "ttfb_p50": out["ttfb_ms"]["p50"],
                    "ttfb_p99": out["ttfb_ms"]["p99"],
                }
                log(f"{name:12} stream={stream!s:5} c={c}: {row}")
                rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m evals cache", description=__doc__)
    ap.add_argument("--duration", type=float, default=3.0, help="measured seconds per cell")
    ap.add_argument("--clients", default="1,8")
    ap.add_argument("--scale", type=int, default=1, help="workload size multiplier")
    ap.add_argument("--time-scale", type=float, default=1.0, help="the simulator's clock")
    ap.add_argument("--no-semantic", action="store_true", help="exact cache only")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--report", type=Path, default=ROOT / "docs" / "reports" / "cache.md")
    a = ap.parse_args(argv)
    clients = [int(c) for c in a.clients.split(",")]
    outdir = a.out or ROOT / "results" / f"cache-{datetime.now(UTC):%Y%m%dT%H%M%SZ}"
    outdir.mkdir(parents=True, exist_ok=True)
    services: list[Service] = []
    try:
        sim = start_sim(outdir, services, a.time_scale)
        plain = start_gateway(outdir, services, sim, cache=False, semantic=False)
        cached = start_gateway(outdir, services, sim, cache=True, semantic=not a.no_semantic)
        model = json.loads(urllib.request.urlopen(sim + "/v1/models", timeout=5).read())
        post(cached, json.loads(bench_body(False, "auto")))  # the entry every hit replays
        targets = {
            "fast raw": (sim, model["data"][0]["id"], Expect()),
            "gateway": (plain, "auto", Expect({"x-gateway-tier": "highspeed"})),
            "gateway hit": (cached, "auto", Expect({"x-gateway-cache": "hit"})),
        }
        rows = hit_vs_raw(targets, clients, a.duration)
        steps = workload(a.scale)
        engine: dict[str, tuple[float, float]] = {}
        tallies = {}
        for name, url in (("plain", plain), ("cache", cached)):
            before = sim_counters(sim)
            tallies[name] = replay(url, steps)
            after = sim_counters(sim)
            engine[name] = (after[0] - before[0], after[1] - before[1])
        text = report(a, rows, tallies["cache"], tallies["plain"], engine)
        (outdir / "raw.json").write_text(json.dumps({"rows": rows, "engine": engine}, indent=1))
        a.report.parent.mkdir(parents=True, exist_ok=True)
        a.report.write_text(text)
        print(text)
    finally:
        for s in reversed(services):
            s.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
