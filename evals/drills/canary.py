"""``python -m evals drill-canary``: a judged rollout acted out on the simulator, twice.

Three simulated engines (the stable arm's tier ``highspeed``, the canary's tier ``canary``,
the fallback ``standard``) and gateway replicas (two on one Redis by default) whose rules
split the default rule between ``stable`` and ``canary`` with an ``analysis:``. A steady
load of distinct users (so the arms split by weight) runs until the rollout is decided;
nobody acts. Run ``bad``: the canary's engine answers HTTP 500 to ``--factor`` times as
many requests as the stable one (``--fault 500=RATE``), each costing a retry or a
fallback; it must be rolled back (its weight 0, a rules version by ``analysis``). Run
``good``: the same rate as the stable one; it must be promoted through every step to
100 %. Reported per run: the time to each step and to the decision, the requests the
canary served (and those that paid for its failure) before it, each arm's fallback rate as
the clients saw it, the deciding test's p-value, the rules versions made. Exit status 1
when a run ends otherwise.

    python -m evals drill-canary [--runs bad,good] [--replicas 2]
        [--redis redis://127.0.0.1:6379/0] [--rate 60] [--base-rate 0.05] [--factor 3]
        [--steps 20,50,100] [--interval 5] [--min-samples 100] [--timeout 180] [--out DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import yaml

from evals.bench.common import free_port
from evals.bench.procs import Service, log, wait_ready
from evals.drills.canary_report import RunResult, Sample, markdown, summarize
from gateway.settings import REPO_RULES

ROOT = Path(__file__).resolve().parents[2]
ADMIN_TOKEN = "drill-canary-admin-token-0123"
TIERS = ("highspeed", "canary", "standard")


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m evals drill-canary", description=__doc__)
    p.add_argument("--runs", default="bad,good", help="bad (3x the failures), good, or both")
    p.add_argument("--replicas", type=int, default=2)
    p.add_argument("--redis", default="redis://127.0.0.1:6379/0", help="'': one replica")
    p.add_argument("--rate", type=float, default=60.0, help="requests per second, all replicas")
    p.add_argument("--base-rate", type=float, default=0.05, help="the stable arm's HTTP 500s")
    p.add_argument("--factor", type=float, default=3.0, help="the bad canary's, times that")
    p.add_argument("--steps", default="20,50,100", help="the canary's shares, percent")
    p.add_argument("--interval", type=float, default=5.0, help="seconds a step is held at least")
    p.add_argument("--min-samples", type=int, default=100, help="requests an arm before judging")
    p.add_argument("--timeout", type=float, default=180.0, help="seconds a run may take")
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--time-scale", type=float, default=0.05, help="the simulators' (wall/model s)")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--out", type=Path, default=ROOT / ".cache" / "drills")
    a = p.parse_args(argv)
    if not a.redis:
        a.replicas = 1  # each replica's embedded store is its own: one judges alone
    return a


def _steps(a: argparse.Namespace) -> list[float]:
    return [float(s) for s in a.steps.split(",")]


def rules(a: argparse.Namespace, out: Path) -> Path:
    """The repository's rules with a tier ``canary`` (the fast tier's settings) and the
    default rule split between ``stable`` and ``canary`` at the first step, analysed."""
    data = yaml.safe_load(REPO_RULES.read_text())
    for tier in data["tiers"].values():
        tier["continuation"] = "continue_final_message"  # the simulator speaks SGLang's API
        tier.pop("request_defaults", None)
    data["tiers"]["canary"] = dict(data["tiers"]["highspeed"])
    first = _steps(a)[0]
    d = data["default"]
    d["hedge_after"] = None  # a fallback is a failure, never a hedge that won: clean counts
    d["split"] = [
        {"tier": "highspeed", "weight": 100 - first, "name": "stable"},
        {"tier": "canary", "weight": first, "name": "canary"},
    ]
    d["analysis"] = {
        "baseline": "stable",
        "canary": "canary",
        "steps": _steps(a),
        "interval": a.interval,
        "min_samples": a.min_samples,
    }
    path = out / "rules-canary.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def start_engines(
    a: argparse.Namespace, out: Path, canary_rate: float, services: list[Service]
) -> dict[str, str]:
    urls = {}
    rates = {"highspeed": a.base_rate, "canary": canary_rate, "standard": 0.0}
    for i, tier in enumerate(TIERS):
        port = free_port()
        profile = "standard" if tier == "standard" else "highspeed"
        argv = [sys.executable, "-m", "engines.sim", "--port", str(port), "--profile", profile]
        argv += ["--seed", str(a.seed + i), "--time-scale", str(a.time_scale)]
        if rates[tier]:
            argv += ["--fault", f"500={rates[tier]}"]
        service = Service(f"sim-{tier}", argv, cpus=None, nice=False, logdir=out)
        services.append(service)
        urls[tier] = f"http://127.0.0.1:{port}"
        wait_ready(urls[tier] + "/health", service)
    return urls


def _admin(base: str, method: str, path: str, body: Any = None) -> Any:
    import urllib.request

    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(
        base + path,
        data=data,
        method=method,
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}", "Content-Type": "application/json"},
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(req, timeout=10) as r:
        return json.loads(r.read())


def start_gateways(
    a: argparse.Namespace, out: Path, engines: dict[str, str], services: list[Service]
) -> tuple[list[str], list[str], str]:
    """The replicas' data and admin URLs, and a tenant's key (its admin API needs a token)."""
    path = rules(a, out)
    env = {**os.environ, "GATEWAY_LOCAL_ENGINES": "off", "GATEWAY_LOG_LEVEL": "warning"}
    env.update({f"GATEWAY_POOL_{t.upper()}_URLS": u for t, u in engines.items()})
    env["GATEWAY_ADMIN_TOKEN"] = ADMIN_TOKEN
    if a.redis:
        env.update(
            GATEWAY_REDIS_URL=a.redis,
            GATEWAY_REDIS_PREFIX=f"drill:{uuid.uuid4().hex[:8]}:",
            GATEWAY_KEY_SECRET="drill-key-secret-0123456789",
        )
    else:
        env["GATEWAY_STORE_PATH"] = str(out / f"canary-{uuid.uuid4().hex[:8]}.db")
    urls, admins = [], []
    for i in range(a.replicas):
        port, admin = free_port(), free_port()
        argv = [sys.executable, "-m", "gateway.cli", "serve", "--rules", str(path)]
        argv += ["--port", str(port)]
        env_i = {**env, "GATEWAY_ADMIN_PORT": str(admin)}
        service = Service(f"gateway-{i}", argv, cpus=None, nice=False, logdir=out, env=env_i)
        services.append(service)
        urls.append(f"http://127.0.0.1:{port}")
        admins.append(f"http://127.0.0.1:{admin}")
        wait_ready(urls[-1] + "/healthz", service)
    t = _admin(admins[0], "POST", "/admin/tenants", {"name": "drill"})
    key = _admin(admins[0], "POST", f"/admin/tenants/{t['id']}/keys", {"name": "drill"})["key"]
    return urls, admins, str(key)


async def _load(
    a: argparse.Namespace, urls: list[str], key: str, t0: float, stop: asyncio.Event
) -> list[Sample]:
    """Open loop at ``a.rate``: request ``i`` is sent at ``t0 + i / rate`` whatever the
    answers before it did, each from a user of its own, round-robin over the replicas."""
    import aiohttp

    samples: list[Sample] = []
    headers = {"Authorization": f"Bearer {key}"}
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(timeout=timeout) as session:

        async def one(i: int) -> None:
            body = {
                "model": "auto",
                "messages": [{"role": "user", "content": f"Tell me about the sea, briefly ({i})."}],
                "max_tokens": a.max_tokens,
                "user": f"drill-user-{i}",
            }
            sent = time.monotonic()
            s = Sample(at=sent - t0)
            try:
                async with session.post(
                    f"{urls[i % len(urls)]}/v1/chat/completions", json=body, headers=headers
                ) as r:
                    await r.read()
                    s.status = r.status
                    route = r.headers.get("x-gateway-route", "")
                    s.arm = route.split("arm=", 1)[1].split()[0] if "arm=" in route else ""
                    s.fallback = r.headers.get("x-gateway-fallback", "")
            except (aiohttp.ClientError, TimeoutError) as e:
                s.error = type(e).__name__
            s.latency_s = time.monotonic() - sent
            samples.append(s)

        tasks: set[asyncio.Task[None]] = set()
        i = 0
        while not stop.is_set():
            await asyncio.sleep(max(0.0, t0 + i / a.rate - time.monotonic()))
            task = asyncio.create_task(one(i))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            i += 1
        await asyncio.gather(*tasks)
    return samples


async def _watch(
    a: argparse.Namespace, admin: str, t0: float, stop: asyncio.Event
) -> list[dict[str, Any]]:
    """The rollout's share and decision, polled until it is decided (or the run times out)."""
    loop = asyncio.get_running_loop()
    seen: list[dict[str, Any]] = []
    last: tuple[Any, ...] = ()
    while time.monotonic() - t0 < a.timeout:
        try:
            doc = await loop.run_in_executor(None, _admin, admin, "GET", "/admin/rollouts")
        except OSError:
            await asyncio.sleep(0.25)
            continue
        r = doc["data"][0]
        now = (r["share"], r["last_decision"])
        if now != last:
            last = now
            seen.append({"t": time.monotonic() - t0, "share": r["share"], **_brief(r)})
            log(f"t={seen[-1]['t']:.1f}s share {r['share']:g} % decision {r['last_decision']}")
        if r["last_decision"] in ("rolled_back", "complete"):
            break
        await asyncio.sleep(0.25)
    stop.set()
    return seen


def _brief(r: dict[str, Any]) -> dict[str, Any]:
    return {"decision": r["last_decision"], "reason": r["last_reason"], "history": r["history"]}


async def _drive(
    a: argparse.Namespace, urls: list[str], admins: list[str], key: str
) -> tuple[list[Sample], list[dict[str, Any]]]:
    t0 = time.monotonic()
    stop = asyncio.Event()
    load = asyncio.create_task(_load(a, urls, key, t0, stop))
    seen = await _watch(a, admins[-1], t0, stop)
    return await load, seen


def run_once(a: argparse.Namespace, name: str, out: Path) -> RunResult:
    canary_rate = a.base_rate * (a.factor if name == "bad" else 1.0)
    log(f"run {name}: stable 500s {a.base_rate:.0%}, canary {canary_rate:.0%}")
    services: list[Service] = []
    try:
        engines = start_engines(a, out / "logs", canary_rate, services)
        urls, admins, key = start_gateways(a, out / "logs", engines, services)
        samples, seen = asyncio.run(_drive(a, urls, admins, key))
        audit = _admin(admins[0], "GET", "/admin/audit?limit=50")["data"]
        versions = _admin(admins[0], "GET", "/admin/rules/versions")["data"]
    finally:
        for s in reversed(services):
            s.stop()
    return summarize(name, canary_rate, a.base_rate, samples, seen, audit, versions)


def main(argv: list[str]) -> int:
    a = parse(argv)
    out: Path = a.out
    (out / "logs").mkdir(parents=True, exist_ok=True)
    results = [run_once(a, name, out) for name in a.runs.split(",")]
    setup = {
        "command": "python -m evals drill-canary " + shlex.join(argv),
        "replicas": a.replicas,
        "store": "redis" if a.redis else "sqlite",
        "rate": a.rate,
        "steps": _steps(a),
        "interval": a.interval,
        "min_samples": a.min_samples,
        "time_scale": a.time_scale,
    }
    doc = {"setup": setup, "runs": [r.doc for r in results]}
    (out / "drill-canary.json").write_text(json.dumps(doc, indent=2))
    text = markdown(setup, results)
    (out / "drill-canary.md").write_text(text)
    print(text)
    ok = all(r.ok for r in results)
    if not ok:
        print("drill failed: a run was not decided as it should be", file=sys.stderr)
    return 0 if ok else 1
