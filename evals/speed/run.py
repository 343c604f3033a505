"""``python -m evals speed``: TTFT, TPOT, throughput and latency of OpenAI-compatible targets.

    python -m evals speed \
        --target fast=http://127.0.0.1:8080/v1,x-gateway-tier:highspeed \
        --target std=http://127.0.0.1:8080/v1,x-gateway-tier:standard \
        [--concurrency 1,4,16] [--requests 32 | --duration 20] [--prompts FILE.jsonl] \
        [--replay TRAFFIC.jsonl] [--model auto] [--api-key KEY] [--rounds 2] [--out DIR]

Every request is a streamed chat (or text) completion with
``stream_options.include_usage``. Per request: TTFT = time to the first content token
(content, reasoning content, tool-call arguments or completion text), TPOT = (last token
time - first token time) / (tokens - 1), latency = time to the end of the stream. Tokens
are the final usage chunk's ``completion_tokens``, else the number of content chunks. A
request is an error when the status is not 200, the stream carries an error event, ends
without ``[DONE]`` or has no content, or the connection fails or times out.

**Closed loop** (default): for each concurrency C of the sweep, C workers send requests
back to back, ``--requests`` per target (or for ``--duration`` seconds). The targets are
interleaved within each cell: the cell is split into ``--rounds`` slices that alternate
between the targets (A, B, A, B), so drifting machine noise hits all of them. All targets
get the same prompt sequence (``--prompts``: one ``{"messages": [...], "max_tokens": N}``
per line, other fields pass through to the body; ``{"prompt": ...}`` goes to
``/completions``).

**Open loop** (``--replay``): recorded traffic, one ``{"t": seconds_since_start, "body":
{...}}`` per line, is sent with its original timing to each target in turn, whatever the
answers' speed; the recorded model is kept unless ``--model`` is given.

Prints one Markdown table per cell (TTFT p50/p95/p99, TPOT p50/p95, latency p50/p95/p99,
aggregate output tokens/s, requests/s, errors) with the ratio of the first target over the
second, and writes ``report.md``, ``raw.json`` (every request, with its ``x-gateway-*`` and
``x-sim-*`` response headers) and ``latency.png`` / ``throughput.png`` to ``--out``
(default ``results/speed-<UTC stamp>/``).
"""

from __future__ import annotations

import argparse
import os
import platform
from dataclasses import asdict
from pathlib import Path
from typing import Any

import aiohttp

from evals import data
from evals import report as ru
from evals.bench.common import run as run_loop
from evals.speed.load import Runner, replay, sweep, warm_up
from evals.speed.report import plot, render, summaries
from evals.speed.targets import Body, load_prompts, load_replay, parse_concurrency, parse_target

PROMPTS = data.DIR / "prompts_speed.jsonl"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m evals speed", description="TTFT, TPOT, throughput and latency percentiles."
    )
    ap.add_argument(
        "--target",
        type=parse_target,
        action="append",
        required=True,
        metavar="NAME=BASE_URL[,header:value...]",
    )
    ap.add_argument("--model", default=None, help="model field (default auto; replay: recorded)")
    ap.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY"))
    ap.add_argument("--concurrency", type=parse_concurrency, default=[1, 4, 16])
    amount = ap.add_mutually_exclusive_group()
    amount.add_argument("--requests", type=int, default=32, help="per target and cell")
    amount.add_argument("--duration", type=float, default=None, help="seconds per target and cell")
    ap.add_argument("--rounds", type=int, default=2, help="slices per cell alternating targets")
    ap.add_argument("--prompts", type=Path, default=PROMPTS)
    ap.add_argument("--replay", type=Path, default=None, help="traffic .jsonl (open loop)")
    ap.add_argument("--warmup", type=int, default=1, help="unrecorded requests per target")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per request")
    ap.add_argument(
        "--out", type=Path, default=None, help="output folder (default results/speed-<UTC stamp>/)"
    )
    ap.add_argument("--no-progress", action="store_true")
    a = ap.parse_args(argv)
    names = [t.name for t in a.target]
    if len(set(names)) != len(names):
        ap.error(f"target names must be unique: {names}")
    if a.requests < 1 or a.rounds < 1 or (a.duration is not None and a.duration <= 0):
        ap.error("--requests, --rounds and --duration must be positive")
    return a


def metadata(a: argparse.Namespace, replay_entries: int | None) -> dict[str, Any]:
    return {
        "started_utc": ru.utc_stamp(),
        "host": f"{platform.node()} ({os.cpu_count()} CPUs)",
        "targets": [
            {"name": t.name, "base_url": t.base_url, "headers": [f"{k}:{v}" for k, v in t.headers]}
            for t in a.target
        ],
        "model": a.model or ("as recorded" if a.replay else "auto"),
        "prompts": ru.shown_path(a.replay or a.prompts),
        "concurrency": a.concurrency,
        "requests": a.requests,
        "duration": a.duration,
        "rounds": a.rounds,
        "replay_entries": replay_entries,
        "warmup": a.warmup,
        "timeout_s": a.timeout,
    }


async def measure(
    a: argparse.Namespace, prompts: list[Body], schedule: list[tuple[float, Body]] | None
) -> Runner:
    per_target = (
        len(schedule) if schedule else None if a.duration else a.requests * len(a.concurrency)
    )
    total = None if per_target is None else per_target * len(a.target)
    timeout = aiohttp.ClientTimeout(total=a.timeout)
    # idle connections go before an engine's own 5 s keep-alive closes them under us
    connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=4)
    async with aiohttp.ClientSession(
        timeout=timeout, connector=connector, read_bufsize=1 << 20
    ) as session:
        with ru.progress(total, "speed", not a.no_progress) as bar:
            r = Runner(session, a.api_key, bar)
            await warm_up(r, a.target, (schedule[0][1] if schedule else prompts[0]), a.warmup)
            if schedule:
                await replay(r, a.target, schedule)
            else:
                await sweep(r, a.target, prompts, a)
    return r


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    out = a.out or ru.default_out("speed")
    schedule = load_replay(a.replay, a.model) if a.replay else None
    prompts = [] if schedule else load_prompts(a.prompts, a.model)
    r = run_loop(measure(a, prompts, schedule))
    cells = ["replay"] if schedule else [f"c={c}" for c in a.concurrency]
    sums = summaries(r, a.target, cells)
    meta = metadata(a, len(schedule) if schedule else None)
    report = render(sums, meta)
    raw = {"meta": meta, "cells": sums, "samples": [asdict(s) for s in r.samples]}
    ru.write_outputs(out, report, raw)
    plot(sums, [t.name for t in a.target], out)
    print(report)
    print(f"written to {out}")
    return 0 if any(s.ok for s in r.samples) else 1


if __name__ == "__main__":
    raise SystemExit(main())
