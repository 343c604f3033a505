"""The processes of ``python -m evals routing``: the engines, and each router in front of
them, started for one cell and stopped after it.

Engines: ``--engines`` simulated SGLang replicas (``python -m engines.sim``, one process
each, one seed, so every router gets the same answers), and the oracle: one engine with the
whole fleet's cache, its batch slots and its speed (its clock runs ``engines`` times
faster), so that its hit rate is what one cache holding everything would give. Between
cells every engine's radix cache is flushed (``POST /flush_cache``, as on SGLang).

Routers (:data:`ROUTERS`): the gateway with one replica or four (each its own process, no
shared state, the client spreading requests over them as a load balancer would), the SGLang
Model Gateway (``sglang-router``, its own venv) with ``cache_aware`` at its defaults and as
its documentation tunes it, ``power_of_two`` and ``round_robin``, and ``oracle`` (no router).
Each router's CPU time is read from ``/proc`` for its whole process group.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

import yaml

from evals.bench.common import free_port
from evals.bench.peers import router_argv, router_python
from evals.bench.procs import Service, http, log, wait_ready
from gateway.settings import REPO_RULES

# The SGLang Model Gateway's documented tuning of cache_aware (docs/advanced_features/
# sgl_model_gateway.md, "Cache-Aware Policy Tuning"); its defaults are 0.3 / 64 / 1.5 / 60.
SMG_TUNED = (
    "--cache-threshold", "0.5", "--balance-abs-threshold", "32", "--balance-rel-threshold",
    "1.5", "--eviction-interval-secs", "120", "--max-tree-size", "67108864",
)  # fmt: skip
_TICK = os.sysconf("SC_CLK_TCK")


@dataclass
class Engines:
    urls: list[str]
    oracle: str
    services: list[Service] = field(default_factory=list)

    def stop(self) -> None:
        for s in self.services:
            s.stop()


@dataclass
class Router:
    """One router as the client sees it: its entry URLs, the model name to send, and the
    process groups whose CPU time it costs."""

    name: str
    entries: list[str]
    model: str
    engines: list[str]  # the engines it routes to (their metrics are the cell's figures)
    services: list[Service] = field(default_factory=list)

    def cpu_s(self) -> float:
        return sum(group_cpu_s(s.pid) for s in self.services)

    def stop(self) -> None:
        for s in self.services:
            s.stop()


def group_cpu_s(pgid: int) -> float:
    """User + system CPU seconds of every live process in process group ``pgid``."""
    total = 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        rest = stat[stat.rfind(")") + 2 :].split()
        if int(rest[2]) == pgid:
            total += int(rest[11]) + int(rest[12])
    return total / _TICK


def _sim(name: str, a: argparse.Namespace, out: Path, scale: int) -> tuple[Service, str]:
    port = free_port()
    argv = [
        sys.executable, "-m", "engines.sim", "--port", str(port), "--seed", str(a.seed),
        "--model", "sim", "--time-scale", str(a.time_scale / scale),
        "--max-running-requests", str(a.max_running * scale),
        "--max-total-tokens", str(a.cache_tokens * scale),
    ]  # fmt: skip
    return Service(name, argv, cpus=None, nice=False, logdir=out), f"http://127.0.0.1:{port}"


def start_engines(a: argparse.Namespace, out: Path) -> Engines:
    """The fleet's engines and the oracle engine, ready."""
    eng = Engines([], "")
    try:
        for i in range(a.engines):
            svc, url = _sim(f"engine-{i}", a, out, 1)
            eng.services.append(svc)
            eng.urls.append(url)
        svc, eng.oracle = _sim("oracle", a, out, a.engines)
        eng.services.append(svc)
        for svc, url in zip(eng.services, [*eng.urls, eng.oracle], strict=True):
            wait_ready(url + "/health", svc)
    except BaseException:
        eng.stop()
        raise
    return eng


def flush(urls: list[str], timeout_s: float = 30.0) -> None:
    """Empty every engine's radix cache (retried while an engine still runs requests)."""
    deadline = time.monotonic() + timeout_s
    for url in urls:
        while http("POST", url + "/flush_cache")[0] != 200:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url} did not flush its cache within {timeout_s:.0f} s")
            time.sleep(0.2)


COUNTERS = ("prompt_tokens", "cached_tokens", "generation_tokens", "num_requests")


def counters(url: str) -> dict[str, float]:
    """One engine's cumulative counters (``sglang:<name>_total``)."""
    status, _, body = http("GET", url + "/metrics")
    if status != 200:
        raise RuntimeError(f"{url}/metrics answered {status}")
    out = dict.fromkeys(COUNTERS, 0.0)
    for line in body.decode().splitlines():
        for name in COUNTERS:
            if line.startswith(f"sglang:{name}_total"):
                out[name] = float(line.rsplit(" ", 1)[1])
    return out


def rules_file(out: Path) -> Path:
    """The repository's rules with one tier (the fleet, model ``sim``) and no fallback,
    hedge or hold-back: every request is routed once, to an engine of that tier. The
    engines' ``/metrics`` are scraped every second (the load signal beside in-flight)."""
    data = yaml.safe_load(REPO_RULES.read_text())
    data["tiers"].pop("standard")
    tier = data["tiers"]["highspeed"]
    tier.update(model="sim", endpoints=["http://127.0.0.1:9"])
    tier.update(continuation="continue_final_message")
    tier["timeouts"] = {"connect": 2.0, "ttft": 120.0, "total": 600.0, "stall": 120.0}
    tier["health"]["interval"] = 1.0
    data["aliases"] = {"auto": None}
    data["rules"] = []
    data["default"] = {"tier": "highspeed", "fallback": [], "checks": ["non_empty"]}
    data["default"]["hedge_after"] = "off"
    for sla in data["sla_classes"].values():
        sla.update(deadline=900.0, ttft_budget=600.0)
    path = out / "routing-rules.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _gateways(n: int) -> Callable[[Engines, argparse.Namespace, Path], Router]:
    def start(eng: Engines, a: argparse.Namespace, out: Path) -> Router:
        router = Router(f"gateway-{n}", [], "auto", eng.urls)
        env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
        env.update(GATEWAY_LOCAL_ENGINES="off", GATEWAY_POOL_HIGHSPEED_URLS=",".join(eng.urls))
        env.update(a.gateway_env)
        serve = [sys.executable, "-m", "gateway.cli", "serve", "--rules", str(rules_file(out))]
        serve += ["--host", "127.0.0.1"]
        try:
            for i in range(n):
                port = free_port()
                argv = [*serve, "--port", str(port)]
                env["GATEWAY_ADMIN_PORT"] = str(free_port())
                svc = Service(f"gateway-{n}-{i}", argv, cpus=None, nice=False, logdir=out, env=env)
                router.services.append(svc)
                router.entries.append(f"http://127.0.0.1:{port}")
                wait_ready(router.entries[-1] + "/healthz", svc)
        except BaseException:
            router.stop()
            raise
        return router

    return start


def _smg(name: str, policy: str, extra: tuple[str, ...] = ()) -> Callable[..., Router]:
    def start(eng: Engines, a: argparse.Namespace, out: Path) -> Router:
        port = free_port()
        argv = [*router_argv(router_python(), port, eng.urls, policy, free_port()), *extra]
        svc = Service(name, argv, cpus=None, nice=False, logdir=out)
        router = Router(name, [f"http://127.0.0.1:{port}"], "sim", eng.urls, [svc])
        try:
            _router_ready(router.entries[0], svc, len(eng.urls))
        except BaseException:
            router.stop()
            raise
        return router

    return start


def _router_ready(url: str, svc: Service, workers: int, timeout_s: float = 60.0) -> None:
    """The router's ``/readiness`` counts every worker healthy."""
    import json

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and svc.alive():
        try:
            status, _, body = http("GET", url + "/readiness", timeout=2)
            if status == 200 and json.loads(body).get("healthy_workers") == workers:
                return
        except (OSError, ValueError):
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{svc.name} not ready within {timeout_s:.0f} s:\n{svc.log_tail()}")


def _oracle(eng: Engines, a: argparse.Namespace, out: Path) -> Router:
    return Router("oracle", [eng.oracle], "sim", [eng.oracle])


ROUTERS: MappingProxyType[str, Callable[[Engines, argparse.Namespace, Path], Router]] = (
    MappingProxyType(
        {
            "gateway-1": _gateways(1),
            "gateway-4": _gateways(4),
            "smg-cache_aware": _smg("smg-cache_aware", "cache_aware"),
            "smg-cache_aware-tuned": _smg("smg-cache_aware-tuned", "cache_aware", SMG_TUNED),
            "smg-power_of_two": _smg("smg-power_of_two", "power_of_two"),
            "smg-round_robin": _smg("smg-round_robin", "round_robin"),
            "oracle": _oracle,
        }
    )
)


def start_router(name: str, eng: Engines, a: argparse.Namespace, out: Path) -> Router:
    t0 = time.monotonic()
    router = ROUTERS[name](eng, a, out)
    log(f"{name} ready in {time.monotonic() - t0:.1f} s")
    return router
