"""Proxy overhead benchmark: direct vs. a minimal relay vs. the gateway, side by side.

    python -m evals.bench.proxy [--duration 3] [--repeats 3] [--targets direct,relay,gateway]
                                [--clients 1,8,64] [--out DIR]
    python -m evals.bench.proxy --summarize results/bench-<stamp>   # re-print a finished run

What answers the client, per target:

* ``direct``: the fake upstream itself (the baseline: load generator + upstream cost);
* ``relay``: ``evals.bench.relay``, a minimal aiohttp pass-through, the floor for one
  Python hop;
* ``sglang-router``: the SGLang Model Gateway (``sglang-router`` from PyPI, installed into
  ``.cache/bench-venv`` by :mod:`evals.bench.peers`) with the fake upstream as its one
  worker: the peer SGLang users put in front of their pools;
* ``gateway``: ``python -m gateway.cli serve`` with a copy of ``routing_rules.yaml`` (rules
  and checks unchanged), both tiers pointed at the fake upstream through
  ``GATEWAY_POOL_<TIER>_URLS``. Requests say ``"model": "auto"``, so they go the normal way:
  parse, classify (chat), route (default rule, highspeed), dispatch, quality checks.
  A gateway response counts as an error unless it carries ``x-gateway-tier: highspeed``
  and no ``x-gateway-fallback``.

Method (the team's peer harness): the system under test (relay, gateway) runs alone on CPU 0;
the load generator and the fake upstream share CPU 1; servers and load run at ``nice -10``
when root. Scenarios: non-streaming and 50-chunk streaming requests at 1, 8 and 64
closed-loop keep-alive clients. A non-streamed request asks for ``max_tokens: 14``, the
fake answer's length: direct and relay get it as one JSON object, the gateway (which asks
engines for a stream even when the client did not) as the same 14 tokens streamed, so
both sides carry the same answer and the cost of upstream streaming is in the figure
(before round 5, the gateway read a 50-token stream against the others' 14-token
object). Load: ``evals.bench.loadgen`` (latency p50/p95/p99, TTFB of streams, req/s;
every response verified). Each cell is measured ``--repeats`` times,
round-robin over scenarios and targets (all servers stay up, so targets see the same
machine state); before each run the harness waits (bounded) for an idle machine, and a run
during which processes outside the harness took more than ``--max-foreign-pct`` of a core,
or with errors, is not clean and is redone (at most ``--max-retries`` extra rounds). Tables
show the median over clean runs with min-max.

Output: the tables on stdout; ``raw.json`` (every run, rewritten after each round),
``table.md``, the rules file used and one log per server under ``--out``
(default ``results/bench-<UTC stamp>/``). Every child process has its own process group,
is stopped at the end (also on Ctrl-C / SIGTERM) and dies with the harness.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import time
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from evals.bench import report
from evals.bench.common import CHAT_PATH, chat_body, free_port
from evals.bench.peers import router_argv, router_python
from evals.bench.procs import ROOT, Service, http, log, wait_ready
from evals.bench.rounds import Target, run_rounds, scenarios, warm_up
from gateway.settings import REPO_RULES

TARGETS = ("direct", "relay", "gateway", "sglang-router")
GATEWAY_LOADGEN_ARGS = (
    "--expect-header",
    "x-gateway-tier=highspeed",
    "--forbid-header",
    "x-gateway-fallback",
    "--collect-header",
    "x-gateway-overhead-ms",
)


def probe(target: Target) -> None:
    """One non-streaming and one streaming request, checked as the load generator will."""
    for stream in (False, True):
        status, headers, body = http("POST", target.url, chat_body(stream), timeout=10)
        problem = None
        if status != 200:
            problem = f"status {status}"
        elif stream and b"data: [DONE]" not in body[-64:]:
            problem = "stream does not end in [DONE]"
        elif target.name == "gateway" and (
            headers.get("x-gateway-tier") != "highspeed" or "x-gateway-fallback" in headers
        ):
            problem = (
                f"x-gateway-tier={headers.get('x-gateway-tier')!r} "
                f"x-gateway-fallback={headers.get('x-gateway-fallback')!r}"
            )
        if problem:
            raise RuntimeError(
                f"{target.name} probe (stream={stream}): {problem}; "
                f"headers={headers} body={body[:500]!r}"
            )


# ----------------------------------------------------------------------------- targets
def _gateway_env(upstream: str, extra: list[str]) -> dict[str, str]:
    """The gateway's environment: none of the caller's GATEWAY_* settings, both tiers on the
    fake upstream, then ``--gateway-env`` pairs (e.g. GATEWAY_ACCESS_LOG=false)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    env["GATEWAY_POOL_HIGHSPEED_URLS"] = upstream
    env["GATEWAY_POOL_STANDARD_URLS"] = upstream
    for pair in extra:
        key, _, value = pair.partition("=")
        env[key] = value
    return env


def start_target(
    name: str, upstream: str, a: argparse.Namespace, outdir: Path, services: list[Service]
) -> Target:
    """Start ``name``'s server (appended to ``services`` at once, for cleanup) and probe it."""
    if name == "direct":
        target = Target(name, upstream + CHAT_PATH)
    else:
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        if name == "relay":
            argv = [
                sys.executable,
                "-m",
                "evals.bench.relay",
                "--port",
                str(port),
                "--upstream",
                upstream,
                "--max-seconds",
                str(a.max_server_s),
            ]
            svc = Service(name, argv, cpus=a.sut_cpus, nice=a.nice, logdir=outdir / "logs")
            ready = base + "/health"  # the relay forwards it to the upstream
            extra: tuple[str, ...] = ()
        elif name == "sglang-router":
            argv = router_argv(router_python(), port, [upstream], metrics_port=free_port())
            svc = Service(name, argv, cpus=a.sut_cpus, nice=a.nice, logdir=outdir / "logs")
            ready, extra = base + "/readiness", ()  # ready once its worker is registered
        else:
            rules = outdir / "routing_rules.yaml"
            shutil.copyfile(a.rules, rules)
            argv = [
                sys.executable,
                "-m",
                "gateway.cli",
                "serve",
                "--rules",
                str(rules),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
            ]
            svc = Service(
                name,
                argv,
                cpus=a.sut_cpus,
                nice=a.nice,
                logdir=outdir / "logs",
                env=_gateway_env(upstream, a.gateway_env),
            )
            ready, extra = base + "/healthz", GATEWAY_LOADGEN_ARGS
        services.append(svc)
        wait_ready(ready, svc)
        target = Target(name, base + CHAT_PATH, [svc], extra)
    probe(target)
    return target


def _version(dist: str) -> str:
    try:
        return version(dist)
    except PackageNotFoundError:
        return "unknown"


def _placement(a: argparse.Namespace) -> None:
    """Check the CPU placement can be honoured; degrade (with a warning) when it cannot."""
    if not shutil.which("taskset"):
        log("taskset not found (util-linux): processes are not pinned")
        a.sut_cpus = a.load_cpus = None
        return
    avail = os.sched_getaffinity(0)
    wanted = {int(c) for spec in (a.sut_cpus, a.load_cpus) for c in spec.split(",")}
    if not wanted <= avail:
        first = str(min(avail))
        log(f"CPUs {sorted(wanted)} not all available ({sorted(avail)}): everything on {first}")
        a.sut_cpus = a.load_cpus = first
    os.sched_setaffinity(0, {int(c) for c in a.load_cpus.split(",")})  # keep CPU 0 for the SUT


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m evals.bench.proxy", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--duration", type=float, default=3.0, help="measured seconds per run")
    ap.add_argument("--warmup", type=float, default=0.5, help="unrecorded seconds per run")
    ap.add_argument("--repeats", type=int, default=3, help="clean runs per cell")
    ap.add_argument("--max-retries", type=int, default=2, help="extra rounds for unclean runs")
    ap.add_argument("--targets", default=",".join(TARGETS))
    ap.add_argument("--clients", default="1,8,64", help="concurrent clients per scenario")
    ap.add_argument("--chunks", type=int, default=50, help="content chunks per stream")
    ap.add_argument("--chunk-delay-ms", type=float, default=0.0)
    ap.add_argument("--sut-cpus", default="0", help="CPUs of the relay and the gateway")
    ap.add_argument("--load-cpus", default="1", help="CPUs of the load generator and upstream")
    ap.add_argument(
        "--no-nice",
        dest="nice",
        action="store_false",
        help="do not run servers and load at nice -10 (default when root)",
    )
    ap.add_argument(
        "--max-foreign-pct",
        type=float,
        default=10.0,
        help="a run is clean if outside processes took <= this %% of a core",
    )
    ap.add_argument(
        "--quiet-wait",
        type=float,
        default=15.0,
        help="longest wait for an idle machine before a run, seconds",
    )
    ap.add_argument(
        "--time-budget",
        type=float,
        default=8.0,
        help="minutes after which unclean runs are no longer redone",
    )
    ap.add_argument("--max-requests", type=int, default=2_000_000, help="hard cap per run")
    ap.add_argument(
        "--max-server-s",
        type=float,
        default=3600.0,
        help="helper servers exit by themselves after this long",
    )
    ap.add_argument("--rules", type=Path, default=REPO_RULES)
    ap.add_argument(
        "--gateway-env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra environment for the gateway, e.g. GATEWAY_ACCESS_LOG=false",
    )
    ap.add_argument(
        "--out", type=Path, default=None, help="output folder (default results/bench-<UTC stamp>/)"
    )
    ap.add_argument(
        "--summarize", type=Path, metavar="DIR", help="only re-print the tables of DIR/raw.json"
    )
    a = ap.parse_args(argv)
    a.nice = a.nice and os.geteuid() == 0
    a.targets = [t for t in a.targets.split(",") if t]
    unknown = set(a.targets) - set(TARGETS)
    if unknown:
        ap.error(f"unknown targets {sorted(unknown)}; choose from {','.join(TARGETS)}")
    a.clients = [int(c) for c in a.clients.split(",") if c]
    if bad := [p for p in a.gateway_env if "=" not in p]:
        ap.error(f"--gateway-env expects KEY=VALUE, got {bad}")
    return a


def write_report(outdir: Path, meta: dict[str, Any], results: dict[str, Any]) -> str:
    summary = report.summarize(results)
    text = report.render(summary, meta)
    raw = {
        "meta": meta,
        "results": results,
        "summary": summary,
        "verdicts": report.verdicts(summary, meta["scenarios"]),
    }
    (outdir / "raw.json").write_text(json.dumps(raw, indent=1))
    (outdir / "table.md").write_text(text + "\n")
    return text


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    if a.summarize:
        raw = json.loads((a.summarize / "raw.json").read_text())
        print(report.render(report.summarize(raw["results"]), raw["meta"]))
        return 0
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # all clean up as Ctrl-C does
        signal.signal(sig, signal.default_int_handler)  # (SIGINT too: a background job
        # started by a non-interactive shell inherits it ignored)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    outdir = a.out or ROOT / "results" / f"bench-{stamp}"
    (outdir / "logs").mkdir(parents=True, exist_ok=True)
    _placement(a)
    scens = scenarios(a.clients)
    meta: dict[str, Any] = {
        "started_utc": stamp,
        "python": sys.version.split()[0],
        "aiohttp": _version("aiohttp"),
        "gateway": _version("llm-gateway"),
        "nproc": os.cpu_count(),
        "targets": [],
        "failed_targets": {},
        "scenarios": scens,
        "duration_s": a.duration,
        "warmup_s": a.warmup,
        "repeats": a.repeats,
        "sut_cpus": a.sut_cpus,
        "load_cpus": a.load_cpus,
        "nice": a.nice,
        "chunks": a.chunks,
        "chunk_delay_ms": a.chunk_delay_ms,
        "max_foreign_pct": a.max_foreign_pct,
        "rules": str(a.rules),
        "gateway_env": a.gateway_env,
        "loadgen": "evals.bench.loadgen (python)",
    }
    estimate = len(scens) * len(a.targets) * a.repeats * (a.duration + a.warmup + 0.8)
    log(f"output {outdir}; about {estimate / 60:.1f} min of measurement")
    services: list[Service] = []
    results: dict[str, dict[str, list[dict[str, Any]]]] = {}
    interrupted = False
    t0 = time.monotonic()

    def save() -> None:
        (outdir / "raw.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1))

    try:
        port = free_port()
        upstream = f"http://127.0.0.1:{port}"
        up = Service(
            "upstream",
            [
                sys.executable,
                "-m",
                "evals.bench.fake_upstream",
                "--port",
                str(port),
                "--chunks",
                str(a.chunks),
                "--chunk-delay-ms",
                str(a.chunk_delay_ms),
                "--max-seconds",
                str(a.max_server_s),
            ],
            cpus=a.load_cpus,
            nice=a.nice,
            logdir=outdir / "logs",
        )
        services.append(up)
        wait_ready(upstream + "/health", up)
        targets = []
        for name in a.targets:
            try:
                targets.append(start_target(name, upstream, a, outdir, services))
                meta["targets"].append(name)
            except RuntimeError as e:  # reported; the other targets still run
                log(f"target {name} could not start: {e}")
                meta["failed_targets"][name] = str(e)[:2000]
        warm_up(targets, scens, a)
        run_rounds(targets, scens, a, [s.pid for s in services], results, save)
    except KeyboardInterrupt:
        interrupted = True
        log("interrupted: stopping the servers; reporting what was measured")
    finally:
        for s in reversed(services):
            s.stop()
    meta["elapsed_s"] = round(time.monotonic() - t0, 1)
    if not any(any(cells.values()) for cells in results.values()):
        save()
        log(f"nothing measured; logs in {outdir / 'logs'}")
        return 130 if interrupted else 1
    print(write_report(outdir, meta, results))
    print(f"\nresults: {outdir} ({meta['elapsed_s'] / 60:.1f} min)")
    return 130 if interrupted else 0


if __name__ == "__main__":
    raise SystemExit(main())
