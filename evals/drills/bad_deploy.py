"""``python -m evals drill-bad-deploy``: the fast tier's bad deploy, through real gateways.

Two simulated tiers and gateway replicas (two on one Redis by default) under a steady
load. After ``--healthy`` seconds every answer of the fast tier starts to loop (the
simulator's fault rates are replaced while it runs: ``POST /sim/faults``); after ``--bad``
seconds more it is fixed; the load goes on for ``--after`` seconds. The drill reports how
long the quality circuit took to demote the fast tier (each replica's
``gateway_tier_demoted`` gauge, polled), how many requests paid for its bad answer before
and after, latency p50/p99 before, during and after, the standard tier's extra load, and
how long the restore took. Exit status 1 when the tier was never demoted or never restored.

    python -m evals drill-bad-deploy [--replicas 2] [--redis redis://127.0.0.1:6379/0]
        [--rate 16] [--healthy 10] [--bad 20] [--after 40] [--quality window_s=30 ...]
        [--out DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from evals.bench.procs import Service, log
from evals.drills.load import Flip, Sample, send, watch
from evals.drills.procs import Gateways, set_faults, start_engines, start_gateways
from evals.drills.report import Phases, figures, write

ROOT = Path(__file__).resolve().parents[2]


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m evals drill-bad-deploy", description=__doc__)
    p.add_argument("--replicas", type=int, default=2)
    p.add_argument(
        "--redis",
        default="redis://127.0.0.1:6379/0",
        help="the replicas' store (a key prefix of the drill's own); '' for none: one replica",
    )
    p.add_argument("--rate", type=float, default=16.0, help="requests per second, all replicas")
    p.add_argument("--healthy", type=float, default=10.0, help="seconds before the bad deploy")
    p.add_argument("--bad", type=float, default=20.0, help="seconds the fast tier loops")
    p.add_argument("--after", type=float, default=40.0, help="seconds after the fix")
    p.add_argument("--max-tokens", type=int, default=200)
    p.add_argument("--time-scale", type=float, default=0.5, help="the simulators' (wall/model s)")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument(
        "--quality",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a quality circuit setting for the drill's rules (default: the shipped ones)",
    )
    p.add_argument("--out", type=Path, default=ROOT / ".cache" / "drills")
    a = p.parse_args(argv)
    if not a.redis:
        a.replicas = 1  # no store: each replica would judge alone
    return a


async def _drive(
    a: argparse.Namespace, gws: Gateways, fast: str
) -> tuple[list[Sample], list[Flip], Phases]:
    t0 = time.monotonic()
    ph = Phases(a.healthy, a.healthy + a.bad, a.healthy + a.bad + a.after)
    done = False
    watcher = asyncio.create_task(watch(gws, t0, lambda: done))
    load = asyncio.create_task(send(gws, a.rate, ph.end, t0, a.max_tokens))
    loop = asyncio.get_running_loop()
    await asyncio.sleep(max(0.0, t0 + ph.bad - time.monotonic()))
    await loop.run_in_executor(None, set_faults, fast, {"loop": 1.0})
    log(f"bad deploy at {time.monotonic() - t0:.1f}s: every fast answer loops")
    await asyncio.sleep(max(0.0, t0 + ph.fixed - time.monotonic()))
    await loop.run_in_executor(None, set_faults, fast, {})
    log(f"fixed at {time.monotonic() - t0:.1f}s")
    samples = await load
    await asyncio.sleep(1.0)  # a last look at the gauges
    done = True
    return samples, await watcher, ph


def _quality(a: argparse.Namespace) -> str:
    return ", ".join(a.quality) if a.quality else "the shipped defaults"


def main(argv: list[str]) -> int:
    a = parse(argv)
    out: Path = a.out
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    services: list[Service] = []
    try:
        engines = start_engines(a, logs, services)
        gws = start_gateways(a, logs, engines, services)
        samples, flips, ph = asyncio.run(_drive(a, gws, engines["highspeed"]))
    finally:
        for s in reversed(services):
            s.stop()
    fig = figures(samples, flips, ph)
    setup: dict[str, Any] = {
        "command": "python -m evals drill-bad-deploy " + shlex.join(argv),
        "replicas": a.replicas,
        "redis": bool(a.redis),
        "rate": a.rate,
        "max_tokens": a.max_tokens,
        "time_scale": a.time_scale,
        "quality": _quality(a),
        "bad_at": ph.bad,
        "fixed_at": ph.fixed,
        "end": ph.end,
    }
    path = write(out, fig, setup, samples)
    print(path.read_text())
    ok = fig["time_to_demote_s"] is not None and fig["time_to_restore_s"] is not None
    if not ok:
        print("drill failed: the fast tier was never demoted, or never restored", file=sys.stderr)
    return 0 if ok else 1
