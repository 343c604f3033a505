"""What a large rules upload costs the requests in flight.

    python -m evals.bench.rules_push [--rules 3000] [--clients 4] [--seconds 8]

Starts the fake engine (CPU 1) and a gateway (CPU 0, in-process store, an admin token),
keeps ``--clients`` closed-loop clients on it, and after two seconds uploads the shipped
rules with ``--rules`` extra rules (3,000 make about 560 KB) through ``PUT /admin/rules``.
Prints one JSON line: how long the upload took, the slowest request, how many waited over
100 ms, and the p99. A replica that parses on its event loop holds every request in flight
for the whole parse.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from evals.bench.common import free_port, percentile, tenant_key
from evals.bench.procs import Service, wait_ready
from gateway.settings import REPO_RULES, usable_cpus

ADMIN_TOKEN = "bench-admin-token-0123456789"
CHAT = {"model": "auto", "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 14}


def big_rules(extra: int) -> str:
    """The shipped rules with ``extra`` more rules at the head of the list."""
    base = REPO_RULES.read_text()
    at = base.index("\nrules:\n") + len("\nrules:\n")
    more = "".join(
        f"  - name: tenant-rule-{k}\n"
        "    when: {task: [code], sla: [interactive]}\n"
        "    tier: highspeed\n"
        "    fallback: [standard]\n"
        "    checks: [non_empty, not_truncated, repetition, template_leak]\n"
        for k in range(extra)
    )
    return base[:at] + more + base[at:]


async def measure(
    port: int, admin: int, rules: str, clients: int, seconds: float
) -> dict[str, Any]:
    base, adm = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{admin}"
    auth = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    lat: list[float] = []
    async with aiohttp.ClientSession() as s:
        head = {"Authorization": f"Bearer {await tenant_key(s, adm, ADMIN_TOKEN)}"}
        stop = time.monotonic() + seconds

        async def client() -> None:
            while time.monotonic() < stop:
                t = time.perf_counter()
                async with s.post(f"{base}/v1/chat/completions", json=CHAT, headers=head) as r:
                    await r.read()
                    if r.status != 200:
                        raise RuntimeError(f"status {r.status}")
                lat.append(time.perf_counter() - t)

        async def upload() -> tuple[int, float]:
            await asyncio.sleep(2.0)
            t = time.perf_counter()
            async with s.put(
                f"{adm}/admin/rules",
                data=rules.encode(),
                headers={**auth, "Content-Type": "application/yaml"},
            ) as r:
                await r.read()
                return r.status, time.perf_counter() - t

        uploaded = asyncio.create_task(upload())
        await asyncio.gather(*(client() for _ in range(clients)), uploaded)
        status, took = uploaded.result()
    lat.sort()
    return {
        "rules_bytes": len(rules.encode()),
        "upload_status": status,
        "upload_ms": round(took * 1000, 1),
        "requests": len(lat),
        "max_ms": round(lat[-1] * 1000, 1),
        "over_100ms": sum(v > 0.1 for v in lat),
        "p99_ms": round((percentile(lat, 99) or 0) * 1000, 2),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rules", type=int, default=3000, help="extra rules in the upload")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=8.0)
    a = ap.parse_args(argv)
    cpus = "0" if usable_cpus() > 1 else None
    fake, port, admin = free_port(), free_port(), free_port()
    engine = f"http://127.0.0.1:{fake}"
    env = {
        "GATEWAY_STORE_PATH": ":memory:",  # a fresh store each run, not .gateway/ of the user
        **os.environ,
        "GATEWAY_ADMIN_TOKEN": ADMIN_TOKEN,
        "GATEWAY_ADMIN_PORT": str(admin),
        "GATEWAY_POOL_HIGHSPEED_URLS": engine,
        "GATEWAY_POOL_STANDARD_URLS": engine,
    }
    py = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        logs = Path(tmp)
        services = [
            Service(
                "fake",
                [py, "-m", "evals.bench.fake_upstream", "--port", str(fake)],
                cpus="1" if cpus else None,
                nice=False,
                logdir=logs,
            ),
            Service(
                "gateway",
                [
                    py,
                    "-m",
                    "gateway.cli",
                    "serve",
                    "--rules",
                    str(REPO_RULES),
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                ],
                cpus=cpus,
                nice=False,
                logdir=logs,
                env=env,
            ),
        ]
        try:
            wait_ready(f"http://127.0.0.1:{port}/healthz", services[1])
            out = asyncio.run(measure(port, admin, big_rules(a.rules), a.clients, a.seconds))
        finally:
            for svc in services:
                svc.stop()
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
