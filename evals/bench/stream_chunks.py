"""``python -m evals.bench.stream_chunks``: what the gateway's live stream phase costs.

Two measurements, side by side in one run, against the fake upstream:

1. **CPU per chunk** (robust on a shared machine): the gateway's own CPU time (from
   ``/proc``) spent relaying N streams of 500 chunks, minus N streams of 10 chunks, over
   N x 490 chunks — the fixed per-request cost cancels, what is left is the cost of one
   more chunk, with the default rules' live checks (template leak on every batch,
   repetition every 128 characters) on. The upstream sends each chunk in its own write
   (``--chunk-delay-ms``), so every chunk is a separate read, as from a real engine.
2. **Time to first byte outside the hold-back window**: the first SSE event through the
   gateway (model ``standard``: a tier with no hold-back) minus direct, at one client.

Targets (issue #4): under 20 us per chunk; TTFB overhead under 1 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from evals.bench.common import chat_body, free_port, run
from evals.bench.loadgen import Expect, load
from evals.bench.procs import Service, wait_ready
from gateway.settings import REPO_RULES

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime + stime


def upstream(chunks: int, delay_ms: float, logdir: Path) -> tuple[Service, str]:
    port = free_port()
    svc = Service(
        f"upstream-{chunks}",
        [
            sys.executable,
            "-m",
            "evals.bench.fake_upstream",
            "--port",
            str(port),
            "--chunks",
            str(chunks),
            "--chunk-delay-ms",
            str(delay_ms),
        ],
        cpus="1",
        nice=False,
        logdir=logdir,
    )
    url = f"http://127.0.0.1:{port}"
    wait_ready(f"{url}/health", svc)
    return svc, url


def gateway(up: str, logdir: Path) -> tuple[Service, str]:
    port = free_port()
    env = {
        **os.environ,
        "GATEWAY_POOL_HIGHSPEED_URLS": up,
        "GATEWAY_POOL_STANDARD_URLS": up,
        "GATEWAY_ACCESS_LOG": "false",
        "GATEWAY_LOCAL_ENGINES": "off",
    }
    svc = Service(
        "gateway",
        [
            sys.executable,
            "-m",
            "gateway.cli",
            "serve",
            "--rules",
            str(REPO_RULES),
            "--port",
            str(port),
        ],
        cpus="0",
        nice=False,
        logdir=logdir,
        env=env,
    )
    url = f"http://127.0.0.1:{port}"
    wait_ready(f"{url}/healthz", svc)
    return svc, url


def relay_cpu(
    gw: Service, url: str, model: str, conns: int, seconds: float, chunks: int
) -> tuple[float, int, int]:
    """CPU seconds the gateway spent, streams it finished and the events each carried, in a
    closed-loop run of streams asking for ``chunks`` tokens (the fake engine's every chunk:
    it sends no more than ``max_tokens``)."""
    before = cpu_seconds(gw.pid)
    res = run(
        load(
            f"{url}/v1/chat/completions",
            connections=conns,
            duration=seconds,
            warmup=0.5,
            stream=True,
            expect=Expect(),
            body=chat_body(True, model, max_tokens=chunks),
        )
    )
    after = cpu_seconds(gw.pid)
    if res["errors"]:
        raise SystemExit(f"errors through the gateway: {res['errors']}")
    seen = sorted(res["events"])  # type: ignore[call-overload]
    if len(seen) != 1 or seen[0] < chunks:
        raise SystemExit(f"streams of {chunks} chunks carried {seen} events")
    return after - before, int(res["ok"]), int(seen[0])  # type: ignore[call-overload]


def per_chunk(long_: tuple[float, int, int], short: tuple[float, int, int]) -> float:
    """Microseconds of gateway CPU per extra event, from the events the streams carried."""
    (c1, s1, e1), (c2, s2, e2) = long_, short
    return ((c1 / s1) - (c2 / s2)) / (e1 - e2) * 1e6


def ttfb(url: str, model: str, seconds: float) -> float:
    res = run(
        load(
            f"{url}/v1/chat/completions",
            connections=1,
            duration=seconds,
            warmup=0.5,
            stream=True,
            expect=Expect(),
            body=chat_body(True, model),
        )
    )
    return float(res["ttfb_ms"]["p50"])  # type: ignore[index]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m evals.bench.stream_chunks", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--seconds", type=float, default=4.0, help="per measurement")
    ap.add_argument("--chunk-delay-ms", type=float, default=0.2)
    ap.add_argument("--connections", type=int, default=4)
    a = ap.parse_args(argv)
    logdir = Path(tempfile.mkdtemp(prefix="stream-chunks-"))
    out: dict[str, object] = {}
    services: list[Service] = []
    try:
        for model in ("auto", "standard"):  # highspeed (hold-back) / standard (none)
            cpu = {}
            for n in (500, 10):
                up, up_url = upstream(n, a.chunk_delay_ms, logdir)
                gw, gw_url = gateway(up_url, logdir)
                services += [up, gw]
                cpu[n] = relay_cpu(gw, gw_url, model, a.connections, a.seconds, n)
                gw.stop()
                up.stop()
            out[f"us_per_chunk[{model}]"] = round(per_chunk(cpu[500], cpu[10]), 2)
        up, up_url = upstream(50, 0.0, logdir)
        gw, gw_url = gateway(up_url, logdir)
        services += [up, gw]
        direct = ttfb(up_url, "auto", a.seconds)
        through = ttfb(gw_url, "standard", a.seconds)
        out["ttfb_ms[direct]"] = direct
        out["ttfb_ms[gateway, no hold-back]"] = through
        out["ttfb_overhead_ms"] = round(through - direct, 3)
    finally:
        for s in services:
            s.stop()
    print(json.dumps(out, indent=1))
    print(
        f"per chunk, live checks on: highspeed {out['us_per_chunk[auto]']} us, standard "
        f"{out['us_per_chunk[standard]']} us (target < 20); TTFB overhead "
        f"{out['ttfb_overhead_ms']} ms (target < 1)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
