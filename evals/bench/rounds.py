"""The measured runs of the proxy benchmark: one load-generator run per cell (scenario x
target), round-robin until every cell has ``--repeats`` clean runs, each after a wait
for an idle machine (:class:`QuietGate`).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from evals.bench import report
from evals.bench.procs import Service, log, run_json
from evals.bench.sysstat import machine_busy_pct, measured


@dataclass
class Target:
    name: str
    url: str
    services: list[Service] = field(default_factory=list)  # the system under test
    loadgen_args: tuple[str, ...] = ()

    def alive(self) -> bool:
        return all(s.alive() for s in self.services)


def scenarios(clients: list[int]) -> list[dict[str, Any]]:
    return [
        {"id": report.scenario_id(stream, c), "stream": stream, "clients": c}
        for stream in (False, True)
        for c in clients
    ]


def loadgen_argv(
    target: Target, scen: dict[str, Any], a: argparse.Namespace, duration: float, warmup: float
) -> list[str]:
    argv = [
        sys.executable,
        "-m",
        "evals.bench.loadgen",
        target.url,
        "-c",
        str(scen["clients"]),
        "-d",
        str(duration),
        "-w",
        str(warmup),
        "-n",
        str(a.max_requests),
        *target.loadgen_args,
    ]
    if scen["stream"]:
        argv += ["--stream", "--expect-events", str(a.chunks + 3)]  # role, chunks, stop, DONE
    return argv


def flatten(j: dict[str, Any], stream: bool) -> dict[str, Any]:
    rec: dict[str, Any] = {
        "rps": j["rps"],
        "ok": j["ok"],
        "errors": j["errors"],
        "capped": j["capped"],
    }
    for p in ("p50", "p95", "p99"):
        rec[f"lat_{p}_ms"] = j["total_ms"][p]
        if stream:
            rec[f"ttfb_{p}_ms"] = j["ttfb_ms"][p]
    if j.get("collected"):
        rec["self_overhead_p50_ms"] = j["collected"]["p50"]
    return rec


class QuietGate:
    """Before each run, wait until processes outside the harness leave the machine idle.

    The wait is bounded by ``--quiet-wait``; once a wait has run out, the next ones give up
    after a few seconds until the machine is seen quiet again, so a machine that stays busy
    costs the full wait once, not before every run. Busy runs are flagged, not hidden.
    """

    def __init__(self, max_busy_pct: float, wait_s: float):
        self.max_busy_pct = max_busy_pct
        self.wait_s = wait_s
        self.patience = wait_s

    def __call__(self) -> None:
        t0 = time.monotonic()
        while (busy := machine_busy_pct(0.3)) > self.max_busy_pct:
            if time.monotonic() - t0 > self.patience:
                log(
                    f"machine busy ({busy:.0f}% of a core outside the harness); measuring "
                    "anyway, the run will be judged by what others take during it"
                )
                self.patience = min(self.wait_s, 2.0)
                return
            time.sleep(1.0)
        self.patience = self.wait_s


def measure(
    target: Target, scen: dict[str, Any], a: argparse.Namespace, pids: list[int]
) -> dict[str, Any]:
    argv = loadgen_argv(target, scen, a, a.duration, a.warmup)
    j, cpu = measured(
        pids,
        lambda: run_json(argv, cpus=a.load_cpus, nice=a.nice, timeout=a.duration + a.warmup + 60),
    )
    rec = {**flatten(j, scen["stream"]), **cpu}
    rec["clean"] = (
        rec["foreign_cpu_pct"] <= a.max_foreign_pct and not rec["errors"] and not rec["capped"]
    )
    return rec


def _describe(rec: dict[str, Any]) -> str:
    ttfb = f" ttfb_p50={rec['ttfb_p50_ms']}ms" if "ttfb_p50_ms" in rec else ""
    busy = "/".join(f"{v:.0f}" for v in rec["cpu_busy_pct"].values())
    state = "ok" if rec["clean"] else f"NOT CLEAN errors={rec['errors']}"
    return (
        f"rps={rec['rps']:>8} p50={rec['lat_p50_ms']}ms p99={rec['lat_p99_ms']}ms{ttfb} "
        f"cpu%={busy} foreign={rec['foreign_cpu_pct']}% {state}"
    )


def run_rounds(
    targets: list[Target],
    scens: list[dict[str, Any]],
    a: argparse.Namespace,
    pids: list[int],
    results: dict[str, dict[str, list[dict[str, Any]]]],
    save: Callable[[], None],
) -> None:
    """Round-robin until every cell has ``repeats`` clean runs, or until the retries or the
    time budget run out (the first ``repeats`` rounds always run)."""
    quiet_gate = QuietGate(a.max_foreign_pct, a.quiet_wait)
    stop_retrying_at = time.monotonic() + a.time_budget * 60
    for t in targets:
        for s in scens:
            results.setdefault(t.name, {}).setdefault(s["id"], [])
    for rnd in range(a.repeats + a.max_retries):
        todo = [
            (s, t)
            for s in scens
            for t in targets
            if sum(r["clean"] for r in results[t.name][s["id"]]) < a.repeats
        ]
        if not todo:
            return
        for s, t in todo:
            if rnd >= a.repeats and time.monotonic() > stop_retrying_at:
                log(f"time budget of {a.time_budget:g} min spent: no more retries")
                return
            if not t.alive():
                log(f"{t.name} is no longer running; skipping it")
                continue
            quiet_gate()
            rec = measure(t, s, a, pids)
            rec["round"] = rnd
            results[t.name][s["id"]].append(rec)
            log(f"{t.name:8s} {s['id']:6s} {_describe(rec)}")
        save()


def warm_up(targets: list[Target], scens: list[dict[str, Any]], a: argparse.Namespace) -> None:
    """A short discarded run per target at c=8, non-streaming and streaming."""
    for t in targets:
        for stream in (False, True):
            scen = {"stream": stream, "clients": 8}
            run_json(
                loadgen_argv(t, scen, a, duration=1.0, warmup=0.0),
                cpus=a.load_cpus,
                nice=a.nice,
                timeout=60,
            )
