"""The processes of a drill: two simulated engines (the fast tier and the standard one),
and gateway replicas in front of them (on one Redis, with a tenant's key, or one replica
with open access), each on a free port, stopped with the drill.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import uuid
from pathlib import Path
from typing import Any

import yaml

from evals.bench.common import free_port
from evals.bench.procs import Service, http, wait_ready
from gateway.settings import REPO_RULES

ADMIN_TOKEN = "drill-admin-token-0123456789"


def rules(out: Path, quality: dict[str, Any]) -> Path:
    """The repository's rules, as an SGLang deployment's would say how its tiers continue a
    text (the simulator speaks SGLang's API), with the quality circuit's settings changed by
    ``quality`` (none: the shipped defaults)."""
    data = yaml.safe_load(REPO_RULES.read_text())
    for tier in data["tiers"].values():
        tier["continuation"] = "continue_final_message"
        tier.pop("request_defaults", None)  # the drill's clients send their max_tokens
    if quality:
        data["quality"] = {**data.get("quality", {}), **quality}
    path = out / "rules.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def start_engines(a: argparse.Namespace, out: Path, services: list[Service]) -> dict[str, str]:
    """The two simulated tiers, ready; appended to ``services`` as they start."""
    urls: dict[str, str] = {}
    for tier in ("highspeed", "standard"):
        port = free_port()
        argv = [sys.executable, "-m", "engines.sim", "--port", str(port), "--profile", tier]
        argv += ["--seed", str(a.seed), "--time-scale", str(a.time_scale)]
        service = Service(f"sim-{tier}", argv, cpus=None, nice=False, logdir=out)
        services.append(service)
        urls[tier] = f"http://127.0.0.1:{port}"
        wait_ready(urls[tier] + "/health", service)
    return urls


def set_faults(engine: str, faults: dict[str, float]) -> None:
    """A bad deploy (``{"loop": 1.0}``: every answer loops) or its fix (``{}``)."""
    status, _, body = http("POST", f"{engine}/sim/faults", json.dumps({"faults": faults}).encode())
    if status != 200:
        raise RuntimeError(f"the simulator refused the faults: {status} {body[:200]!r}")


class Gateways:
    """The gateway replicas: their data and admin URLs, and the key requests carry."""

    def __init__(self) -> None:
        self.urls: list[str] = []
        self.admins: list[str] = []
        self.key: str | None = None

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"} if self.key else {}


def start_gateways(
    a: argparse.Namespace, out: Path, engines: dict[str, str], services: list[Service]
) -> Gateways:
    """``a.replicas`` gateways over ``engines``: on ``a.redis`` (a prefix of the drill's
    own) with a tenant and its key, or (no Redis) one replica with open access."""
    path = rules(out, dict(kv.split("=", 1) for kv in a.quality))
    env = {**os.environ, "GATEWAY_LOCAL_ENGINES": "off", "GATEWAY_LOG_LEVEL": "warning"}
    env.update({f"GATEWAY_POOL_{t.upper()}_URLS": u for t, u in engines.items()})
    if a.redis:
        env.update(
            GATEWAY_REDIS_URL=a.redis,
            GATEWAY_REDIS_PREFIX=f"drill:{uuid.uuid4().hex[:8]}:",
            GATEWAY_ADMIN_TOKEN=ADMIN_TOKEN,
            GATEWAY_KEY_SECRET="drill-key-secret-0123456789",
        )
    gws = Gateways()
    for i in range(a.replicas):
        port, admin = free_port(), free_port()
        argv = [sys.executable, "-m", "gateway.cli", "serve", "--rules", str(path)]
        argv += ["--port", str(port)]
        service = Service(
            f"gateway-{i}",
            argv,
            cpus=None,
            nice=False,
            logdir=out,
            env={**env, "GATEWAY_ADMIN_PORT": str(admin)},
        )
        services.append(service)
        gws.urls.append(f"http://127.0.0.1:{port}")
        gws.admins.append(f"http://127.0.0.1:{admin}")
        wait_ready(gws.urls[-1] + "/healthz", service)
    if a.redis:
        gws.key = _tenant_key(gws.admins[0])
    return gws


def _admin(base: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    import urllib.request

    req = urllib.request.Request(
        base + path,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}", "Content-Type": "application/json"},
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(req, timeout=10) as r:
        doc: dict[str, Any] = json.loads(r.read())
    return doc


def _tenant_key(admin: str) -> str:
    t = _admin(admin, "/admin/tenants", {"name": "drill"})
    return str(_admin(admin, f"/admin/tenants/{t['id']}/keys", {"name": "drill"})["key"])


def demoted_gauge(base: str) -> bool | None:
    """Whether ``gateway_tier_demoted{tier="highspeed", rule="default"}`` is 1 on a replica
    (None: it does not say, or did not answer)."""
    try:
        status, _, body = http("GET", f"{base}/metrics", timeout=2)
    except OSError:
        return None
    if status != 200:
        return None
    for line in body.decode(errors="replace").splitlines():
        if line.startswith('gateway_tier_demoted{tier="highspeed",rule="default"}'):
            return line.rsplit(" ", 1)[-1].strip() not in ("0", "0.0")
    return False
