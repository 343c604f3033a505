"""``gateway serve --workers N`` scaling: requests/s and streams/s for N = 1 .. ``--max-workers``,
one prepared run that writes everything under ``--out``.

    python -m evals.bench.workers [--max-workers 8] [--out DIR] [--duration 4] [--repeats 3]

For each N the gateway runs with ``GATEWAY_WORKERS=N`` pinned to the first N CPUs this
process may use (``taskset``); the fake upstream (``--upstreams`` processes sharing one port)
and the load generators (``evals.bench.loadgen``, several processes, their connections
split between them) run on the CPUs left. Where no CPU is left (N equal to the machine's
CPUs), everything shares them and the row says so: that figure is a floor. Scenarios as in
the proxy benchmark (``python -m evals bench``): non-streamed requests and 50-chunk streams,
``--clients-per-worker`` x N keep-alive clients (64 at least), the repository's rules, open
access (no tenant keys: the in-process store, which N workers may share without an admin
token). Each cell is measured ``--repeats`` times; the table has the median and the range,
the efficiency against N x the one-worker figure, and how busy the gateway's CPUs were.

Writes ``results.json`` and ``report.md`` to ``--out`` (default
``results/workers-<UTC stamp>/``), with one log per server. About 35 s per N.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from evals.bench.common import CHAT_PATH, free_port
from evals.bench.procs import Service, http, log, run_json, wait_ready
from evals.bench.sysstat import cpu_lines
from evals.report import default_out, md_table
from gateway.settings import REPO_RULES

CHUNKS = 50
EXPECT = ("--expect-header", "x-gateway-tier=highspeed", "--forbid-header", "x-gateway-fallback")


def _cpus(spec: list[int]) -> str:
    return ",".join(map(str, spec))


def layout(n: int, cpus: list[int]) -> tuple[list[int], list[int], bool]:
    """(gateway CPUs, load CPUs, shared): the first ``n`` for the gateway, the rest for the
    upstream and the load; all of them for everything where none are left."""
    if len(cpus) > n:
        return cpus[:n], cpus[n:], False
    return cpus, cpus, True


def _start(
    a: argparse.Namespace, n: int, sut: list[int], load: list[int], out: Path
) -> tuple[list[Service], str]:
    services: list[Service] = []
    port = free_port()
    for i in range(a.upstreams or max(1, len(load) // 3)):
        argv = [sys.executable, "-m", "evals.bench.fake_upstream", "--port", str(port),
                "--chunks", str(CHUNKS), "--reuse-port", "--max-seconds", "900"]  # fmt: skip
        services.append(
            Service(f"upstream-{n}-{i}", argv, cpus=_cpus(load), nice=False, logdir=out)
        )
    wait_ready(f"http://127.0.0.1:{port}/health", services[0])
    rules = out / "routing_rules.yaml"
    shutil.copyfile(REPO_RULES, rules)
    gw_port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    env.update(
        GATEWAY_WORKERS=str(n),
        GATEWAY_LOCAL_ENGINES="off",
        GATEWAY_ADMIN_PORT=str(free_port()),
        GATEWAY_STORE_PATH=str(out / f"store-{n}.db"),
        GATEWAY_POOL_HIGHSPEED_URLS=f"http://127.0.0.1:{port}",
        GATEWAY_POOL_STANDARD_URLS=f"http://127.0.0.1:{port}",
    )
    argv = [sys.executable, "-m", "gateway.cli", "serve", "--rules", str(rules),
            "--host", "127.0.0.1", "--port", str(gw_port)]  # fmt: skip
    gw = Service(f"gateway-{n}", argv, cpus=_cpus(sut), nice=False, logdir=out, env=env)
    services.append(gw)
    url = f"http://127.0.0.1:{gw_port}"
    wait_ready(url + "/healthz", gw, timeout_s=60)
    for _ in range(20):  # every worker's first requests (imports, connections) unmeasured
        http(
            "POST", url + CHAT_PATH, b'{"model":"auto","messages":[{"role":"user","content":"hi"}]}'
        )
    return services, url


def _one_run(
    a: argparse.Namespace, url: str, stream: bool, clients: int, load: list[int], sut: list[int]
) -> dict[str, Any]:
    """One measured run: ``--loadgens`` load generators at once, their figures summed."""
    ups = a.upstreams or max(1, len(load) // 3)
    gens = max(1, min(a.loadgens or len(load) - ups, clients))
    per = [clients // gens + (1 if i < clients % gens else 0) for i in range(gens)]
    argvs = []
    for c in per:
        argv = [sys.executable, "-m", "evals.bench.loadgen", url + CHAT_PATH, "-c", str(c),
                "-d", str(a.duration), "-w", str(a.warmup), *EXPECT]  # fmt: skip
        if stream:
            argv += ["--stream", "--expect-events", str(CHUNKS + 3)]
        argvs.append(argv)
    before = cpu_lines()
    timeout = a.duration + a.warmup + 60
    with ThreadPoolExecutor(len(argvs)) as pool:
        outs = list(
            pool.map(lambda v: run_json(v, cpus=_cpus(load), nice=False, timeout=timeout), argvs)
        )
    after = cpu_lines()
    busy = [
        100.0 * (1 - (after[f"cpu{c}"].idle - before[f"cpu{c}"].idle)
                 / max(1, after[f"cpu{c}"].total - before[f"cpu{c}"].total))
        for c in sut
    ]  # fmt: skip
    return {
        "rps": sum(o["rps"] for o in outs),
        "errors": sum(sum(o["errors"].values()) for o in outs),
        "p50_ms": statistics.median(o["total_ms"]["p50"] for o in outs),
        "sut_busy_pct": round(sum(busy) / len(busy), 1),
    }


def measure(a: argparse.Namespace, n: int, cpus: list[int], out: Path) -> dict[str, Any]:
    sut, load, shared = layout(n, cpus)
    clients = max(64, a.clients_per_worker * n)
    services, url = _start(a, n, sut, load, out)
    row: dict[str, Any] = {"workers": n, "sut_cpus": sut, "load_cpus": load, "shared": shared}
    try:
        for stream in (False, True):
            runs = [_one_run(a, url, stream, clients, load, sut) for _ in range(a.repeats)]
            rps = [r["rps"] for r in runs]
            row["stream" if stream else "non_stream"] = {
                "clients": clients,
                "rps_median": statistics.median(rps),
                "rps_range": [min(rps), max(rps)],
                "errors": sum(r["errors"] for r in runs),
                "p50_ms": statistics.median(r["p50_ms"] for r in runs),
                "sut_busy_pct": statistics.median(r["sut_busy_pct"] for r in runs),
            }
            kind = "stream" if stream else "non-stream"
            log(f"workers={n} {kind}: {statistics.median(rps):,.0f}/s")
    finally:
        for s in reversed(services):
            s.stop()
    return row


def report(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    base = {k: rows[0][k]["rps_median"] for k in ("non_stream", "stream")} if rows else {}
    table = []
    for r in rows:
        cells = []
        for k in ("non_stream", "stream"):
            c = r[k]
            eff = c["rps_median"] / (r["workers"] * base[k]) if base.get(k) else None
            cells += [
                f"{c['rps_median']:,.0f} ({c['rps_range'][0]:,.0f}-{c['rps_range'][1]:,.0f})",
                "-" if eff is None else f"{eff:.2f}",
                f"{c['sut_busy_pct']:.0f} %",
            ]
        where = f"{_cpus(r['sut_cpus'])} / {_cpus(r['load_cpus'])}" + (
            " (shared)" if r["shared"] else ""
        )
        table.append([r["workers"], where, r["non_stream"]["clients"], *cells])
    busy = "gateway CPUs busy"
    head = ["N", "gateway / load CPUs", "clients", "non-streamed req/s", "efficiency", busy,
            "50-chunk streams/s", "efficiency", busy]  # fmt: skip
    return (
        f"# `gateway serve --workers N` scaling\n\n{meta['cpus']} CPUs usable, Python "
        f"{meta['python']}, {meta['repeats']} x {meta['duration']} s per cell (median and range), "
        f"started {meta['started']}.\n\n    {meta['command']}\n\n{md_table(head, table)}\n\n"
        "Efficiency: requests/s over N x the one-worker figure. A row marked shared ran the load "
        "generators and the upstream on the gateway's own CPUs: a floor, not the gateway's "
        "capacity.\n"
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m evals.bench.workers", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--max-workers", type=int, default=8)
    ap.add_argument("--duration", type=float, default=4.0, help="measured seconds per run")
    ap.add_argument("--warmup", type=float, default=0.5)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--clients-per-worker", type=int, default=32)
    ap.add_argument(
        "--upstreams", type=int, default=0, help="fake upstreams (0: a third of the load CPUs)"
    )
    ap.add_argument(
        "--loadgens", type=int, default=0, help="load generators (0: the other load CPUs)"
    )
    ap.add_argument("--out", type=Path, default=None)
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    out: Path = a.out or default_out("workers")
    out.mkdir(parents=True, exist_ok=True)
    cpus = sorted(os.sched_getaffinity(0))
    meta = {
        "cpus": len(cpus),
        "python": sys.version.split()[0],
        "repeats": a.repeats,
        "duration": a.duration,
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": "python -m evals.bench.workers "
        + " ".join(argv if argv is not None else sys.argv[1:]),
    }
    rows = []
    for n in range(1, min(a.max_workers, len(cpus)) + 1):
        rows.append(measure(a, n, cpus, out))
        (out / "results.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    (out / "report.md").write_text(report(rows, meta))
    log(f"wrote {out / 'report.md'}")
    return 0 if all(r[k]["errors"] == 0 for r in rows for k in ("non_stream", "stream")) else 1


if __name__ == "__main__":
    raise SystemExit(main())
