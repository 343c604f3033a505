"""The processes of a headline run: the engines (two simulators, or the local llama.cpp
ones) and the gateways in front of them, with the rules each gateway gets.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import yaml

from evals.bench.common import free_port
from evals.bench.procs import Service, wait_ready
from gateway.settings import REPO_RULES


def _rules(out: Path, hedge: bool, engines: str) -> Path:
    """The repository's rules; hedging off for the second gateway; on the simulator (which
    speaks SGLang's API) its way of continuing an assistant text, as an SGLang deployment's
    rules would say (the repository's rules name llama.cpp's, for the local engines)."""
    data = yaml.safe_load(REPO_RULES.read_text())
    if engines == "sim":
        for tier in data["tiers"].values():
            tier["continuation"] = "continue_final_message"
    if not hedge:
        for route in (data["default"], *data["rules"]):
            route["hedge_after"] = None
    path = out / f"rules-{'hedge' if hedge else 'nohedge'}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def start_engines(a: argparse.Namespace, out: Path, services: list[Any]) -> dict[str, str]:
    """The two engines (``--engines``), ready; appended to ``services`` as they start."""
    urls: dict[str, str] = {}
    if a.engines == "local":
        from engines.launcher import LocalEngines

        engines = LocalEngines(out)
        ports = {"highspeed": free_port(), "standard": free_port()}
        engines.start(list(ports.items()))
        services.append(engines)
        return {t: f"http://127.0.0.1:{p}" for t, p in ports.items()}
    for tier in ("highspeed", "standard"):
        port = free_port()
        argv = [
            sys.executable,
            "-m",
            "engines.sim",
            "--port",
            str(port),
            "--profile",
            tier,
            "--seed",
            str(a.seed),
            "--time-scale",
            str(a.time_scale),
        ]
        if tier == "highspeed":
            for f in filter(None, a.faults.split(",")):
                argv += ["--fault", f]
            argv += ["--fault-draw", a.fault_draw]
        service = Service(f"sim-{tier}", argv, cpus=None, nice=False, logdir=out)
        services.append(service)
        urls[tier] = f"http://127.0.0.1:{port}"
        wait_ready(urls[tier] + "/health", service)
    return urls


def start_gateway(
    a: argparse.Namespace, out: Path, urls: dict[str, str], hedge: bool, services: list[Any]
) -> str:
    """A gateway over ``urls`` (hedging on or off), ready; appended to ``services``."""
    port = free_port()
    env = {**os.environ, "GATEWAY_LOCAL_ENGINES": "off", "GATEWAY_ADMIN_PORT": str(free_port())}
    env.update({f"GATEWAY_POOL_{t.upper()}_URLS": u for t, u in urls.items()})
    argv = [
        sys.executable,
        "-m",
        "gateway.cli",
        "serve",
        "--rules",
        str(_rules(out, hedge, a.engines)),
        "--port",
        str(port),
    ]
    name = "gateway" if hedge else "gateway-nohedge"
    service = Service(name, argv, cpus=None, nice=False, logdir=out, env=env)
    services.append(service)
    url = f"http://127.0.0.1:{port}"
    wait_ready(url + "/healthz", service)
    return url
