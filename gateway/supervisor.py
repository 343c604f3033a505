"""``gateway serve --workers N``: N data-plane processes sharing the data and admin ports.

The supervisor starts the local engines once (if any), then N worker processes, each a
full gateway (``gateway serve`` with ``GATEWAY_WORKERS=1``) binding the same ports with
``SO_REUSEPORT`` so the kernel spreads connections over them. A worker that dies is
replaced (a crash loop stops the whole thing). SIGTERM or SIGINT is passed on: each
worker stops accepting, finishes its in-flight requests and streams for up to
``GATEWAY_DRAIN_SECONDS``, then exits; stragglers are killed a little later.

Tenants, keys and rules versions must be shared: the workers share the embedded store's
file (``GATEWAY_STORE_PATH``, created and migrated here once, before they start) or Redis
(``GATEWAY_REDIS_URL``); an in-memory store (``:memory:``) cannot serve N > 1.
``/metrics`` on any worker reports every worker (:mod:`gateway.telemetry.merge`).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import FrameType

from gateway.settings import Settings

_CRASHES = 10  # this many worker exits within _CRASH_WINDOW: give up
_CRASH_WINDOW = 60.0
DRAIN_MARGIN = 3.0  # seconds past the drain a worker may take to exit before it is killed


class Supervisor:
    def __init__(self, settings: Settings, serve_argv: list[str]):
        self.settings = settings
        self.argv = [sys.executable, "-m", "gateway.cli", "serve", *serve_argv]
        self.metrics = Path(tempfile.mkdtemp(prefix="gateway-metrics-"))
        self.children: dict[int, subprocess.Popen[bytes]] = {}
        self.stopping = False
        self.crashes: list[float] = []

    def _env(self, index: int) -> dict[str, str]:
        return {
            **os.environ,
            "GATEWAY_WORKERS": "1",
            "GATEWAY_LOCAL_ENGINES": "off",  # started once, here
            "GATEWAY_REUSE_PORT": "1",
            "GATEWAY_METRICS_DIR": str(self.metrics),
            "GATEWAY_WORKER_ID": str(index),
        }

    def _spawn(self, index: int) -> None:
        self.children[index] = subprocess.Popen(self.argv, env=self._env(index))

    def _stop(self, signum: int, frame: FrameType | None) -> None:
        self.stopping = True

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._stop)
        signal.signal(signal.SIGINT, self._stop)
        n = self.settings.worker_count()
        print(f"gateway: supervising {n} workers (pid {os.getpid()})", flush=True)
        for i in range(n):
            self._spawn(i)
        try:
            rc = self._watch()
        finally:
            self._drain()
            shutil.rmtree(self.metrics, ignore_errors=True)
        return rc

    def _watch(self) -> int:
        while not self.stopping:
            time.sleep(0.2)
            for i, p in list(self.children.items()):
                if p.poll() is None or self.stopping:
                    continue
                now = time.monotonic()
                self.crashes = [t for t in self.crashes if now - t < _CRASH_WINDOW] + [now]
                if len(self.crashes) >= _CRASHES:
                    print("gateway: workers keep dying; stopping", file=sys.stderr, flush=True)
                    return 1
                print(f"gateway: worker {i} exited ({p.returncode}); replacing it", flush=True)
                self._spawn(i)
        return 0

    def _drain(self) -> None:
        for p in self.children.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        until = time.monotonic() + self.settings.drain_seconds + DRAIN_MARGIN
        for p in self.children.values():
            try:
                p.wait(max(0.1, until - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def check_workers(settings: Settings) -> str | None:
    """Why N workers cannot run with these settings, or None."""
    memory = not settings.redis_url and settings.store_path == ":memory:"
    if settings.worker_count() > 1 and memory and settings.admin_token is not None:
        return (
            "--workers > 1 needs a store the workers share: the embedded store's file "
            "(GATEWAY_STORE_PATH, not :memory:) or GATEWAY_REDIS_URL; in memory each worker "
            "would keep its own tenants, keys and rate limits"
        )
    return None
