"""Peers the proxy benchmark measures beside the gateway, installed into its own venv.

The SGLang Model Gateway (``sglang-router`` on PyPI, a Rust binary behind a Python entry
point) is what SGLang users put in front of their workers. It is installed from PyPI into
``.cache/bench-venv`` (not the gateway's environment: it pins its own dependencies), once;
the stamp names the version so a change of pin reinstalls.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from evals.bench.procs import ROOT, log

SGLANG_ROUTER = "sglang-router==0.3.2"
VENV = ROOT / ".cache" / "bench-venv"


def router_python(venv: Path = VENV, requirement: str = SGLANG_ROUTER) -> Path:
    """The venv's python with ``requirement`` installed (created on first use)."""
    python = venv / "bin" / "python"
    stamp = venv / f".installed-{requirement.replace('==', '-')}"
    if stamp.exists():
        return python
    log(f"installing {requirement} into {venv} (once)")
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", requirement], check=True)
    stamp.touch()
    return python


def router_argv(
    python: Path,
    port: int,
    workers: list[str],
    policy: str = "round_robin",
    metrics_port: int | None = None,
) -> list[str]:
    """The router over ``workers``. The benchmark gives it one worker, the fake upstream,
    round-robin (no choice to make, so no policy cost is charged to it); its own retries and
    breaker stay on as shipped; logs at warn (an info line a request would be its cost).
    Its Prometheus listener is its own port (``metrics_port``; default: ``port + 1``), so
    several routers can run side by side."""
    return [
        str(python),
        "-m",
        "sglang_router.launch_router",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--worker-urls",
        *workers,
        "--policy",
        policy,
        "--log-level",
        "warn",
        "--prometheus-host",
        "127.0.0.1",
        "--prometheus-port",
        str(metrics_port or port + 1),
    ]
