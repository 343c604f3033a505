"""``python -m evals sched``: prefix affinity across gateway replicas.

Two gateway replicas in front of eight SGLang-shaped replicas (``engines.sim``, served
in this process on real sockets, time-scaled). Each gateway replica has its own
:class:`gateway.upstream.pools.Pool` (its own in-flight counts, nothing shared), as two
gateway pods behind a load balancer would; the turns of one chat alternate between them.
The workload: multi-turn chats, each opening with one of a few shared system prompts;
every turn sends the whole history (so a turn can hit the engine's radix cache for the
system prompt and for its own earlier turns). The engine replica is picked by:

* ``round-robin``: each gateway replica's own counter;
* ``least-load``: each gateway replica's own in-flight counts;
* ``modulo``: the previous scheme, prefix hash mod n with bounded load (the same engine on
  every gateway replica while the set is stable; most prefixes move when it changes);
* ``rendezvous``: rendezvous hashing of the prompt's head, bounded load at the default
  ``affinity_slack`` 1.0 (``rendezvous@0.25``: at slack 0.25), nothing remembered;
* ``prefix``: the gateway's ``Pool.choose`` (where the prompt's prefix went, else its home:
  ``gateway/upstream/affinity.py``; ``python -m evals routing`` measures it on a fleet);
* ``smg``: no choice in the gateway: each gateway replica's pool has one endpoint, an SGLang
  Model Gateway (``sglang-router`` from PyPI, its own process, ``--policy cache_aware``)
  shared by both gateway replicas, over the same engines; ``smg@round_robin`` etc. pick
  another router policy. The router is installed into the benchmark's venv on first use
  (:mod:`evals.bench.peers`).

Figures per policy: the engines' prefix-cache hit rate (cached / prompt tokens, from the
answers' ``usage``) and TTFT P50/P99 in model time (the simulator's ``sim.ttft_ms``), and,
for hashing schemes, the share of prefixes that move when one engine replica of eight
leaves. Writes ``report.md``, ``results.json`` and ``sched.png`` to ``--out``
(default ``docs/reports/sched``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from evals.report import ROOT, md_table, shown_path
from evals.sched.affinity import measure
from evals.sched.fairness import FAIR, fair_table, fairness

POLICIES = ("round-robin", "least-load", "modulo", "rendezvous@0.25", "rendezvous", "prefix", "smg")


def _report(rows: list[dict[str, Any]], a: argparse.Namespace, out: Path) -> str:
    table = md_table(
        [
            "policy",
            "requests",
            "cache hit rate (range)",
            "TTFT P50 (ms)",
            "TTFT P99 (ms)",
            "moved on leave",
        ],
        [
            [
                r["policy"],
                r["requests"],
                f"{r['hit_rate']:.1%} ({r['hit_rate_range'][0]:.0%}-{r['hit_rate_range'][1]:.0%})",
                f"{r['ttft_p50_ms']:.1f}",
                f"{r['ttft_p99_ms']:.1f}",
                "-" if r["moved_when_one_leaves"] is None else f"{r['moved_when_one_leaves']:.1%}",
            ]
            for r in rows
        ],
    )
    setup = (
        f"{a.gateways} gateway replicas, {a.engines} simulated SGLang replicas (highspeed "
        f"profile, KV/prefix cache {a.cache_tokens} tokens each, time scale {a.time_scale}), "
        f"{a.chats} chats x {a.turns} turns over {a.systems} shared system prompts of "
        f"~{a.system_tokens} tokens, {a.concurrency} chats at once, {a.max_tokens} tokens "
        f"per answer; {a.repeats} runs per policy (hit rate: mean and range; TTFT: all runs "
        "pooled). TTFT in model time (queue + prefill of the uncached prompt)."
    )
    cmd = "python -m evals sched " + " ".join(sys.argv[2:] if sys.argv[1:2] == ["sched"] else [])
    fair = [asyncio.run(fairness(q)) for q in (False, True)]
    text = (
        f"# Prefix affinity across gateway replicas\n\n{setup}\n\n{table}\n\n"
        f"# Fair share under one tenant's burst\n\n{FAIR}\n\n{fair_table(fair)}\n\n"
        f"`{cmd.strip()}`\n"
    )
    (out / "report.md").write_text(text)
    results = {"affinity": rows, "fairness": fair}
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    _plot(rows, out / "sched.png")
    return text


def _plot(rows: list[dict[str, Any]], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover - the evals extra is not installed
        return
    names = [r["policy"] for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    left.bar(names, [r["hit_rate"] * 100 for r in rows], color="tab:blue")
    left.set_ylabel("prefix-cache hit rate (%)")
    left.tick_params(axis="x", labelrotation=25)
    x = range(len(rows))
    right.bar([i - 0.2 for i in x], [r["ttft_p50_ms"] for r in rows], 0.4, label="P50")
    right.bar([i + 0.2 for i in x], [r["ttft_p99_ms"] for r in rows], 0.4, label="P99")
    right.set_xticks(list(x), names)
    right.set_ylabel("TTFT (model ms)")
    right.tick_params(axis="x", labelrotation=25)
    right.legend()
    fig.suptitle("2 gateway replicas, 8 engine replicas, multi-turn chats")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m evals sched", description=__doc__)
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "reports" / "sched")
    p.add_argument("--policies", default=",".join(POLICIES))
    p.add_argument("--gateways", type=int, default=2)
    p.add_argument("--engines", type=int, default=8)
    p.add_argument("--chats", type=int, default=96)
    p.add_argument("--turns", type=int, default=4)
    p.add_argument("--systems", type=int, default=16)
    p.add_argument("--system-tokens", type=int, default=1500)
    p.add_argument("--user-tokens", type=int, default=40)
    p.add_argument("--max-tokens", type=int, default=48)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--cache-tokens", type=int, default=12000)
    p.add_argument("--time-scale", type=float, default=0.05)
    p.add_argument("--repeats", type=int, default=3)
    return p.parse_args(argv)


def main(argv: list[str]) -> int:
    a = parse(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in a.policies.split(","):
        row = asyncio.run(measure(name, a))
        print(
            f"{name}: hit {row['hit_rate']:.1%}, TTFT P50 {row['ttft_p50_ms']:.1f} ms, "
            f"P99 {row['ttft_p99_ms']:.1f} ms ({row['wall_s']} s)",
            file=sys.stderr,
        )
        rows.append(row)
    print(_report(rows, a, a.out))
    print(f"wrote {shown_path(a.out)}/report.md, results.json, sched.png", file=sys.stderr)
    return 0
