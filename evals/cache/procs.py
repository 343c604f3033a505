"""The processes of the response-cache benchmark (the simulator, a gateway with and one
without a cache) and the two ways it talks to them: a chat request, the engine's counters.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from evals.bench.common import CHAT_PATH, free_port
from evals.bench.procs import Service, wait_ready
from gateway.settings import REPO_RULES


def start_sim(outdir: Path, services: list[Service], time_scale: float) -> str:
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "engines.sim",
        "--port",
        str(port),
        "--profile",
        "highspeed",
        "--seed",
        "7",
        "--time-scale",
        str(time_scale),
    ]
    svc = Service("sim", argv, cpus=None, nice=False, logdir=outdir)
    services.append(svc)
    url = f"http://127.0.0.1:{port}"
    wait_ready(url + "/health", svc)
    return url


def rules_file(outdir: Path, cache: bool, semantic: bool) -> Path:
    data = yaml.safe_load(REPO_RULES.read_text())
    for tier in data["tiers"].values():
        tier["continuation"] = "continue_final_message"  # the simulator speaks SGLang's API
    if cache:
        c: dict[str, Any] = {"ttl": 3600}
        if semantic:
            c["semantic"] = {"embedder": "local"}
        for route in (data["default"], *data["rules"]):
            route["cache"] = c
    path = outdir / f"rules-{'cache' if cache else 'plain'}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def start_gateway(
    outdir: Path, services: list[Service], sim: str, cache: bool, semantic: bool
) -> str:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    env.update(
        {
            "GATEWAY_LOCAL_ENGINES": "off",
            "GATEWAY_ADMIN_PORT": str(free_port()),
            "GATEWAY_POOL_HIGHSPEED_URLS": sim,
            "GATEWAY_POOL_STANDARD_URLS": sim,
        }
    )
    argv = [
        sys.executable,
        "-m",
        "gateway.cli",
        "serve",
        "--rules",
        str(rules_file(outdir, cache, semantic)),
        "--port",
        str(port),
    ]
    name = "gateway-cache" if cache else "gateway"
    svc = Service(name, argv, cpus=None, nice=False, logdir=outdir, env=env)
    services.append(svc)
    url = f"http://127.0.0.1:{port}"
    wait_ready(url + "/healthz", svc)
    return url


def post(url: str, body: dict[str, Any], timeout: float = 60) -> tuple[dict[str, str], bytes]:
    req = urllib.request.Request(
        url + CHAT_PATH,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return {k.lower(): v for k, v in r.headers.items()}, r.read()


def sim_counters(sim: str) -> tuple[float, float]:
    """The simulator's own (requests, generated tokens) counters."""
    with urllib.request.urlopen(sim + "/metrics", timeout=5) as r:
        text = r.read().decode()
    out = {"sglang:num_requests_total": 0.0, "sglang:generation_tokens_total": 0.0}
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in out:
            out[name] += float(line.rsplit(" ", 1)[1])
    return out["sglang:num_requests_total"], out["sglang:generation_tokens_total"]
