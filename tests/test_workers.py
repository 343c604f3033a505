"""``gateway serve --workers 2``: two processes on one port, sharing Redis limits, one
``/metrics`` for both, a drain on SIGTERM; and a clear refusal without Redis."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT, Proc, rules_for_tests, start_gateway
from tests.test_tenancy import chat, new_tenant, tenancy_env
from tests.waiting import until

pytestmark = pytest.mark.processes


@pytest.fixture(scope="module")
def workers(
    engines: dict[str, str], prefix: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Proc, str]]:
    env = {**tenancy_env(prefix), "GATEWAY_WORKERS": "2", "GATEWAY_DRAIN_SECONDS": "10"}
    proc, url = start_gateway(tmp_path_factory.mktemp("gw"), rules_for_tests(), engines, env)
    yield proc, url
    proc.stop()


def _metrics_workers(url: str) -> set[str]:
    conn = http.client.HTTPConnection(url.removeprefix("http://"), timeout=5)
    try:
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
    finally:
        conn.close()
    return {
        line.split('worker="', 1)[1].split('"', 1)[0]
        for line in text.splitlines()
        if 'worker="' in line
    }


def test_both_workers_serve_and_report_metrics(workers: tuple[Proc, str]) -> None:
    proc, url = workers
    _, _, key = new_tenant(proc.admin)
    for _ in range(12):  # a new connection each: the kernel spreads them over the workers
        assert chat(url, key, "hello")[0] == 200
    # any worker's /metrics has both (each shares its own every second)
    assert until(lambda: _metrics_workers(url) == {"0", "1"}, timeout=15.0)


def test_workers_share_one_rate_limit(workers: tuple[Proc, str]) -> None:
    proc, url = workers
    _, _, key = new_tenant(proc.admin, {"requests_per_minute": 5})
    codes = [chat(url, key, "count me")[0] for _ in range(9)]  # a new connection each
    assert codes.count(200) == 5 and codes.count(429) == 4


def test_in_process_store_refuses_many_workers(tmp_path: Path) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump(rules_for_tests()))
    r = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "serve", "--rules", str(rules), "--workers", "2"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        env={
            "PATH": "/usr/bin:/bin",
            "GATEWAY_LOCAL_ENGINES": "off",
            "GATEWAY_ADMIN_TOKEN": "t" * 16,
            "GATEWAY_STORE_PATH": ":memory:",
        },
    )
    assert r.returncode == 2
    assert "--workers > 1 needs a store the workers share" in r.stderr


def test_sigterm_drains_a_stream_in_flight(
    engines: dict[str, str], prefix: str, tmp_path: Path
) -> None:
    env = {**tenancy_env(prefix + "drain:"), "GATEWAY_WORKERS": "2"}
    proc, url = start_gateway(tmp_path, rules_for_tests(total=10.0, stall=3.0), engines, env)
    got: dict[str, Any] = {}
    under_way = threading.Event()
    _, _, key = new_tenant(proc.admin)
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {key}"}
    words = "[[*: text=a b c d e f g h; per=1; gap=0.25]]"

    def stream() -> None:
        conn = http.client.HTTPConnection(url.removeprefix("http://"), timeout=20)
        body = {"model": "auto", "stream": True, "messages": [{"role": "user", "content": words}]}
        conn.request("POST", "/v1/chat/completions", json.dumps(body), headers)
        resp = conn.getresponse()
        got["status"], lines = resp.status, []
        while line := resp.readline():
            lines.append(line)
            if line.startswith(b"data: "):  # the first event is here: the stream is under way
                under_way.set()
        got["body"] = b"".join(lines).decode()
        conn.close()

    try:
        t = threading.Thread(target=stream)
        t.start()
        assert under_way.wait(20), "the stream's first event"
        proc.p.send_signal(signal.SIGTERM)
        t.join(20)
        assert got["status"] == 200
        assert "data: [DONE]" in got["body"] and '"h"' in got["body"]
        assert proc.p.wait(20) == 0
    finally:
        proc.stop()


@pytest.mark.skipif(
    len(getattr(os, "sched_getaffinity", lambda _pid: ())(0)) < 2,
    reason="needs the affinity call and two CPUs to tell one from all",
)
def test_auto_workers_are_the_cpus_the_process_may_run_on() -> None:
    """``--workers auto`` under ``taskset -c 0`` is one worker, not one per CPU of the machine."""
    code = (
        "import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); "
        "from gateway.settings import Settings; print(Settings(workers='auto').worker_count())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=ROOT, check=True)  # fmt: skip
    assert out.stdout.strip() == "1"


def test_auto_workers_fall_back_to_the_cpu_count(monkeypatch: pytest.MonkeyPatch) -> None:
    from gateway.settings import Settings

    monkeypatch.delattr(os, "sched_getaffinity", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 3)
    assert Settings(workers="auto").worker_count() == 3
    monkeypatch.setattr(os, "cpu_count", lambda: None)
    assert Settings(workers="auto").worker_count() == 1
