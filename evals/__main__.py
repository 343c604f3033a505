"""``python -m evals <command> [args]``: the evaluation and benchmark entry point.

    python -m evals speed --target A=URL --target B=URL [--concurrency 1,4,16 ...]
    python -m evals quality [--target fast=URL,... --target standard=URL,...] [--shadow URL]
    python -m evals checks [--out DIR]
    python -m evals headline [--requests 48 --clients 1,8 --faults ... --engines sim|local]
    python -m evals bench [--duration 3 --repeats 3 --targets direct,relay,gateway ...]
    python -m evals micro [--repeat 7 ...]
    python -m evals classify [--train --seed 14] [--out DIR]
    python -m evals hostile [--clients 4 --quick]
    python -m evals sched [--chats 96 --turns 4 --policies round-robin,rendezvous ...]
    python -m evals fleet [--replicas 3 --engines 4 --clients 12 --faults ...] [--out DIR]
    python -m evals semcache [--data evals/data/semantic_pairs.jsonl] [--out docs/reports]
    python -m evals cache [--duration 3 --clients 1,8 --scale 1] [--report FILE]
    python -m evals routing [--workloads multiturn,... --loads moderate,near --routers ...]
    python -m evals drill-bad-deploy [--replicas 2 --rate 16 --healthy 10 --bad 20 --after 40]
    python -m evals drill-canary [--runs bad,good --replicas 2 --rate 60 --factor 3 ...]

Each command is a module with ``main(argv) -> int`` (a harness's ``run`` module); add one
by adding a line to COMMANDS.
"""

from __future__ import annotations

import importlib
import sys

COMMANDS: dict[str, tuple[str, str]] = {
    "headline": ("evals.headline.run", "fast tier raw vs standard raw vs the gateway, faults on"),
    "bench": ("evals.bench.proxy", "proxy overhead: direct vs. relay vs. gateway"),
    "micro": ("evals.bench.micro", "in-process classify+route and checks, us per op"),
    "speed": (
        "evals.speed.run",
        "TTFT/TPOT/tok/s/P99 of endpoints side by side, concurrency sweep",
    ),
    "checks": ("evals.checks.run", "precision/recall/cost of each quality check, labelled set"),
    "classify": ("evals.classify.run", "task classifier: held-out accuracy, latency; --train"),
    "quality": ("evals.quality.run", "both tiers on the shipped eval set: task metrics, alignment"),
    "hostile": ("evals.hostile.run", "hostile input and engine faults: tried/precise/500/hang/..."),
    "fleet": ("evals.fleet.run", "gateway replicas, Sentinel Redis, sim engines: faults"),
    "sched": ("evals.sched.run", "prefix affinity across 2 gateway replicas: cache hits, TTFT"),
    "semcache": ("evals.semcache.run", "semantic cache: false hits and hit rate, labelled pairs"),
    "cache": ("evals.cache.run", "response cache: a hit against the fast tier raw; a workload"),
    "routing": ("evals.routing.run", "fleet routing: gateway vs sglang-router, 8 sim engines"),
    "drill-bad-deploy": (
        "evals.drills.bad_deploy",
        "the fast tier loops mid-run, then recovers: time to demote and restore, who paid",
    ),
    "drill-canary": (
        "evals.drills.canary",
        "a canary with 3x the failures is rolled back, one as good promoted: timings",
    ),
}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] not in COMMANDS:
        width = max(map(len, COMMANDS))
        lines = [f"  {name:<{width}}  {help_}" for name, (_, help_) in COMMANDS.items()]
        print(
            "usage: python -m evals <command> [args]\n\ncommands:\n" + "\n".join(lines),
            file=sys.stderr if args and args[0] not in ("-h", "--help") else sys.stdout,
        )
        return 0 if args and args[0] in ("-h", "--help") else 2
    module = importlib.import_module(COMMANDS[args[0]][0])
    rc: int = module.main(args[1:])
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
