"""``python -m evals routing``: a fleet of simulated SGLang engines routed by the gateway and
by the SGLang Model Gateway, the same workloads through each, in one run.

For every workload (:mod:`.workloads`) at two loads (moderate, near the fleet's capacity),
every router (:data:`.fleet.ROUTERS`) in turn gets the same sessions on the same engines,
their caches flushed before each cell. Figures per cell (:mod:`.figures`): the engines'
prefix-cache hit rate, TTFT p50/p99 (the engines' own figure and the client's), end-to-end
p99, fleet tokens/s, load imbalance, router CPU per request; the issue's bars over the run.
Writes ``report.md``, ``results.json`` and ``routing.png`` to ``--out``.

    python -m evals routing [--workloads multiturn,agent,...] [--loads moderate,near]
        [--routers gateway-1,gateway-4,smg-cache_aware,...] [--seconds 40] [--out DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

from evals.bench.procs import log
from evals.report import default_out, shown_path
from evals.routing import figures
from evals.routing.client import Client
from evals.routing.fleet import ROUTERS, Engines, counters, flush, start_engines, start_router
from evals.routing.report import markdown, plot
from evals.routing.workloads import LOADS, WORKLOADS, Session, sessions


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m evals routing", description=__doc__.split("\n")[0])
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--loads", default=",".join(LOADS))
    ap.add_argument("--routers", default=",".join(ROUTERS))
    ap.add_argument("--engines", type=int, default=8)
    ap.add_argument("--cache-tokens", type=int, default=16384, help="each engine's radix cache")
    ap.add_argument("--max-running", type=int, default=4, help="each engine's batch slots")
    ap.add_argument("--time-scale", type=float, default=2.0, help="wall s per model s")
    ap.add_argument("--seconds", type=float, default=10.0, help="model s of session starts")
    ap.add_argument("--rate-scale", type=float, default=1.0, help="x every workload's rates")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=180.0, help="per request, wall s")
    ap.add_argument("--gateway-env", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--out", type=Path, default=None, help="default: results/routing-<stamp>")
    a = ap.parse_args(argv)
    for flag in ("workloads", "loads", "routers"):
        names = [n for n in getattr(a, flag).split(",") if n]
        known = {"workloads": WORKLOADS, "loads": LOADS, "routers": ROUTERS}[flag]
        bad = [n for n in names if n not in known]
        if bad:
            ap.error(f"--{flag}: unknown {', '.join(bad)} (known: {', '.join(known)})")
        setattr(a, flag, names)
    a.gateway_env = dict(pair.partition("=")[::2] for pair in a.gateway_env)
    return a


def run_cell(
    name: str, plan: list[Session], eng: Engines, a: argparse.Namespace, out: Path
) -> dict[str, Any]:
    """One router over one workload's sessions, on flushed engines."""
    flush([*eng.urls, eng.oracle])
    router = start_router(name, eng, a, out / "logs")
    try:
        before = [counters(u) for u in router.engines]
        cpu0 = router.cpu_s()
        t0 = time.perf_counter()
        client = Client(router.entries, router.model, a.time_scale, a.timeout)
        records = asyncio.run(client.run(plan))
        wall = time.perf_counter() - t0
        cpu = router.cpu_s() - cpu0 if router.services else None
        after = [counters(u) for u in router.engines]
    finally:
        router.stop()
    return figures.cell(records, before, after, cpu, wall, a.time_scale)


def run(a: argparse.Namespace, out: Path) -> list[dict[str, Any]]:
    (out / "logs").mkdir(parents=True, exist_ok=True)
    eng = start_engines(a, out / "logs")
    cells: list[dict[str, Any]] = []
    try:
        for w in a.workloads:
            for load in a.loads:
                plan = sessions(w, load, a.seconds, a.seed, a.rate_scale)
                for name in a.routers:
                    fig = run_cell(name, plan, eng, a, out)
                    fig.update(workload=w, load=load, router=name, sessions=len(plan))
                    fig["reuse"] = WORKLOADS[w].reuse
                    cells.append(fig)
                    log(_line(fig))
    finally:
        eng.stop()
    return cells


def _line(c: dict[str, Any]) -> str:
    hit = "-" if c["hit_rate"] is None else f"{c['hit_rate']:.1%}"
    p99 = c["engine_ttft_p99_ms"]
    return (
        f"{c['workload']} {c['load']} {c['router']}: {c['requests']} requests "
        f"({c['failed']} failed), hit {hit}, engine TTFT p99 "
        f"{'-' if p99 is None else f'{p99:.0f}'} ms, {c['wall_s']} s {c['errors'] or ''}"
    )


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    out: Path = a.out or default_out("routing")
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    cells = run(a, out)
    setup = {k: v for k, v in vars(a).items() if k not in ("out",) and not k.startswith("_")} | {
        "python": platform.python_version(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t0)),
        "minutes": round((time.time() - t0) / 60, 1),
        "command": "python -m evals routing "
        + " ".join(argv if argv is not None else sys.argv[2:]),
    }
    result = {"setup": setup, "cells": cells, "bars": figures.bars(cells)}
    (out / "results.json").write_text(json.dumps(result, indent=1) + "\n")
    png = plot(cells, out / "routing.png")
    (out / "report.md").write_text(markdown(result, png))
    log(f"wrote {shown_path(out / 'report.md')} ({setup['minutes']} min)")
    failed = sum(c["failed"] for c in cells)
    return 1 if failed > sum(c["requests"] for c in cells) * 0.01 else 0


if __name__ == "__main__":
    raise SystemExit(main())
