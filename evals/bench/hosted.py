"""What a hosted tier through LiteLLM adds, next to a raw OpenAI-compatible tier.

    python -m evals.bench.hosted [--requests 300] [--warmup 30]

Starts, on loopback only: the benchmark's fake OpenAI-compatible engine
(:mod:`evals.bench.fake_upstream`), a fake Anthropic Messages API
(:mod:`evals.bench.fake_anthropic`) and a gateway with two tiers: ``highspeed`` raw (the
fake engine) and ``standard`` through LiteLLM (``anthropic/claude-haiku-4-5`` at the fake's
address). One client sends the same one-message chat, one request at a time, in
interleaved rounds to four targets: each fake directly, and the gateway pinned to each
tier (``x-gateway-tier``). The added latency of a tier is the gateway's time minus its
fake's direct time; prints p50 and p90 of each, non-streamed and streamed (to the end).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from evals.bench.common import PROMPT, chat_body, free_port, percentile
from evals.bench.procs import ROOT, Service

KEY = "sk-ant-bench-0000"
HOSTED_MODEL = "anthropic/claude-haiku-4-5"
TARGETS = ("raw direct", "raw via gateway", "anthropic direct", "litellm via gateway")


def rules(raw: str, anthropic: str, upstream_stream: bool = True) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "routing_rules.yaml").read_text())
    data["tiers"] = {
        "highspeed": {"model": "fake-model", "endpoints": [raw]},
        "standard": {
            "provider": "litellm",
            "litellm_params": {
                "model": HOSTED_MODEL,
                "api_base": anthropic,
                "api_key": "os.environ/BENCH_ANTHROPIC_KEY",
            },
            "upstream_stream": upstream_stream,
        },
    }
    data["default"]["hedge_after"] = None
    return data


def wait_ready(url: str, service: Service, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not service.alive():
            raise SystemExit(f"{service.name} exited:\n{service.log_tail()}")
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"{service.name} not ready after {timeout}s:\n{service.log_tail()}")


def requests_for(
    ports: dict[str, int], stream: bool
) -> dict[str, tuple[str, bytes, dict[str, str]]]:
    """Each target's URL, body and headers."""
    gw = f"http://127.0.0.1:{ports['gateway']}/v1/chat/completions"
    anthropic: dict[str, Any] = {
        "model": HOSTED_MODEL.split("/", 1)[1],
        "max_tokens": 64,
        "messages": [{"role": "user", "content": PROMPT}],
    }
    if stream:
        anthropic["stream"] = True
    json_h = {"Content-Type": "application/json"}
    return {
        "raw direct": (
            f"http://127.0.0.1:{ports['raw']}/v1/chat/completions",
            chat_body(stream, "fake-model"),
            json_h,
        ),
        "raw via gateway": (gw, chat_body(stream), {**json_h, "x-gateway-tier": "highspeed"}),
        "anthropic direct": (
            f"http://127.0.0.1:{ports['anthropic']}/v1/messages",
            json.dumps(anthropic).encode(),
            {**json_h, "x-api-key": KEY, "anthropic-version": "2023-06-01"},
        ),
        "litellm via gateway": (gw, chat_body(stream), {**json_h, "x-gateway-tier": "standard"}),
    }


async def measure(
    ports: dict[str, int], stream: bool, n: int, warmup: int
) -> dict[str, list[float]]:
    """Seconds per request of each target, rounds interleaved (they share the noise)."""
    reqs = requests_for(ports, stream)
    times: dict[str, list[float]] = {t: [] for t in TARGETS}
    async with aiohttp.ClientSession() as s:
        for i in range(warmup + n):
            for target in TARGETS:
                url, body, headers = reqs[target]
                t0 = time.perf_counter()
                async with s.post(url, data=body, headers=headers) as r:
                    await r.read()
                    if r.status != 200:
                        raise SystemExit(f"{target}: HTTP {r.status}")
                if i >= warmup:
                    times[target].append(time.perf_counter() - t0)
    return times


def report(times: dict[str, list[float]], stream: bool) -> str:
    def p(target: str, q: float) -> float:
        v = percentile(sorted(times[target]), q)
        return (v or 0.0) * 1000

    lines = [f"{'streamed' if stream else 'non-streamed'} (ms, n={len(times[TARGETS[0]])})"]
    lines.append(f"  {'target':22} {'p50':>8} {'p90':>8}")
    for t in TARGETS:
        lines.append(f"  {t:22} {p(t, 50):8.2f} {p(t, 90):8.2f}")
    for tier, via, direct in (
        ("raw tier", "raw via gateway", "raw direct"),
        ("litellm tier", "litellm via gateway", "anthropic direct"),
    ):
        lines.append(
            f"  added by the gateway, {tier:13} p50 {p(via, 50) - p(direct, 50):7.2f}"
            f"  p90 {p(via, 90) - p(direct, 90):7.2f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=300, help="per target and mode")
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument(
        "--no-upstream-stream",
        action="store_true",
        help="the LiteLLM tier's upstream_stream: false (non-streamed clients get LiteLLM's "
        "non-stream call)",
    )
    a = ap.parse_args(argv)
    ports = {"raw": free_port(), "anthropic": free_port(), "gateway": free_port()}
    tmp = Path(tempfile.mkdtemp(prefix="bench-hosted-"))
    rules_path = tmp / "rules.yaml"
    rules_path.write_text(
        yaml.safe_dump(
            rules(
                f"http://127.0.0.1:{ports['raw']}",
                f"http://127.0.0.1:{ports['anthropic']}",
                not a.no_upstream_stream,
            )
        )
    )
    py = sys.executable
    raw_argv = [
        py,
        "-m",
        "evals.bench.fake_upstream",
        "--port",
        str(ports["raw"]),
        "--chunks",
        "10",
    ]
    env = {
        "BENCH_ANTHROPIC_KEY": KEY,
        "GATEWAY_LOCAL_ENGINES": "off",
        "GATEWAY_ADMIN_PORT": str(free_port()),
    }
    gw_argv = [py, "-m", "gateway.cli", "serve", "--rules", str(rules_path)]
    services = [
        Service("fake-raw", raw_argv, cpus=None, nice=False, logdir=tmp),
        Service(
            "fake-anthropic",
            [py, "-m", "evals.bench.fake_anthropic", "--port", str(ports["anthropic"])],
            cpus=None,
            nice=False,
            logdir=tmp,
        ),
        Service(
            "gateway",
            [*gw_argv, "--port", str(ports["gateway"])],
            cpus=None,
            nice=False,
            logdir=tmp,
            env={**os.environ, **env},
        ),
    ]
    try:
        wait_ready(f"http://127.0.0.1:{ports['raw']}/health", services[0])
        wait_ready(f"http://127.0.0.1:{ports['anthropic']}/health", services[1])
        wait_ready(f"http://127.0.0.1:{ports['gateway']}/healthz", services[2])
        for stream in (False, True):
            times = asyncio.run(measure(ports, stream, a.requests, a.warmup))
            print(report(times, stream), flush=True)
    finally:
        for s in services:
            s.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
