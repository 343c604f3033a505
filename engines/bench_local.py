"""Benchmark the local llama-server tiers (stdlib only).

Usage::

    python -m engines.bench_local --tier highspeed --port 8091 [--url http://...]

Starts the tier's server (unless ``--url`` is given), measures startup time and RSS, then
time to first token and output tokens/s for ~128-token answers, non-streamed and streamed,
at 1 and 4 concurrent clients, and for streams the fewest tokens any 1-second window got
(what the gateway's minimum-rate guard sees). ``--busy N`` runs N busy processes beside
the server (a neighbour's job, the gateway): ``--threads`` against contention. Prints one
JSON object per measurement.
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import subprocess
import sys
import threading
import time
from typing import Any
from urllib.parse import urlsplit

from engines.local import (
    MODEL_ALIAS,
    configured_threads,
    start_local_engine,
    stop_local_engine,
    wait_ready,
)

PROMPTS = [
    "Explain how a refrigerator works.",
    "Describe the water cycle in detail.",
    "Write a short story about a robot who learns to paint.",
    "What are the benefits of regular exercise?",
]


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def chat(url: str, prompt: str, *, stream: bool, max_tokens: int = 128) -> dict[str, Any]:
    """One chat completion; returns wall time, TTFT and completion token count."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=300)
    body: dict[str, Any] = {
        "model": MODEL_ALIAS,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,  # llama-server extension: always produce max_tokens tokens
        "stream": stream,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    t0 = time.perf_counter()
    conn.request(
        "POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"}
    )
    resp = conn.getresponse()
    ttft: float | None = None
    tokens = 0
    times: list[float] = []
    if not stream:
        data = json.loads(resp.read())
        total = time.perf_counter() - t0
        tokens = data["usage"]["completion_tokens"]
        ttft = data.get("timings", {}).get("prompt_ms", float("nan")) / 1000
    else:
        for raw in resp:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            has_text = bool(chunk.get("choices") and chunk["choices"][0]["delta"].get("content"))
            if has_text:
                times.append(time.perf_counter())
            if has_text and ttft is None:
                ttft = time.perf_counter() - t0
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
        total = time.perf_counter() - t0
    conn.close()
    return {"total_s": total, "ttft_s": ttft, "tokens": tokens, "worst_1s": worst_1s(times)}


def worst_1s(times: list[float]) -> int | None:
    """The fewest text chunks in any 1-second window that starts at a chunk (None: <1 s)."""
    last = times[-1] if times else 0.0
    counts = [sum(1 for t in times if a <= t < a + 1.0) for a in times if a + 1.0 <= last]
    return min(counts) if counts else None


def run_clients(url: str, clients: int, stream: bool, rounds: int) -> dict[str, Any]:
    results: list[dict[str, Any]] = []
    lock = threading.Lock()

    def worker(i: int) -> None:
        for r in range(rounds):
            res = chat(url, PROMPTS[(i + r) % len(PROMPTS)], stream=stream)
            with lock:
                results.append(res)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    tokens = sum(r["tokens"] for r in results)
    return {
        "clients": clients,
        "stream": stream,
        "requests": len(results),
        "ttft_ms_median": round(1000 * statistics.median(r["ttft_s"] for r in results), 1),
        "per_client_tok_s": round(
            statistics.median(r["tokens"] / r["total_s"] for r in results), 1
        ),
        "aggregate_tok_s": round(tokens / wall, 1),
        "latency_s_median": round(statistics.median(r["total_s"] for r in results), 2),
        **({"worst_1s_tokens": min(worst)} if (worst := worst_windows(results)) else {}),
    }


def worst_windows(results: list[dict[str, Any]]) -> list[int]:
    return [r["worst_1s"] for r in results if r["worst_1s"] is not None]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--tier", default="highspeed")
    ap.add_argument("--port", type=int, default=8091)
    ap.add_argument("--url", help="benchmark an already running server")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int)
    ap.add_argument("--busy", type=int, default=0, help="busy processes beside the server")
    args = ap.parse_args(argv)
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    proc = None
    url = args.url or f"http://127.0.0.1:{args.port}"
    if not args.url:
        t0 = time.perf_counter()
        proc = start_local_engine(args.tier, args.port, threads=args.threads)
        wait_ready(url, timeout=120, proc=proc, interval=0.02)
        startup = time.perf_counter() - t0
        print(
            json.dumps(
                {
                    "tier": args.tier,
                    "threads": args.threads or configured_threads(),
                    "busy": args.busy,
                    "startup_s": round(startup, 2),
                    "rss_mib_idle": round(rss_mib(proc.pid), 1),
                }
            ),
            flush=True,
        )
    try:
        chat(url, "Hi", stream=False, max_tokens=4)  # warm-up
        for clients in (1, 4):
            for stream in (False, True):
                res = run_clients(url, clients, stream, args.rounds)
                res["tier"] = args.tier
                print(json.dumps(res), flush=True)
        if proc is not None:
            print(json.dumps({"tier": args.tier, "rss_mib_after": round(rss_mib(proc.pid), 1)}))
    finally:
        for b in busy:
            b.kill()
        if proc is not None:
            stop_local_engine(proc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
