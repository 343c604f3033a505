"""A tiny ``python -m evals fleet``: two gateway replicas on ``redis+sentinel://``, one
simulated engine per tier, under load through a Sentinel failover and a key revocation.
The full run (every fault, three replicas) is ``python -m evals fleet``; this one keeps the
harness and the fleet's promises from rotting: a failover fails no request, no slot leaks,
a revocation reaches every replica."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = [pytest.mark.processes, pytest.mark.slow]


def test_a_tiny_fleet_survives_a_sentinel_failover(tmp_path: Path) -> None:
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server)")
    out = tmp_path / "fleet"
    flags = "--replicas 2 --engines 1 --clients 4 --settle 1.5 --faults redis_failover,key_revoke"
    argv = [sys.executable, "-m", "evals", "fleet", *flags.split(), "--out", str(out)]
    r = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr[-4000:]
    results = json.loads((out / "results.json").read_text())
    events = {e["fault"]: e for e in results["events"]}
    failover = events["redis_failover"]
    assert "error" not in failover, failover["error"]
    assert failover["stats"]["sent"] > 0
    assert failover["stats"]["failed"] == {}, failover["stats"]
    assert "error" not in events["key_revoke"], events["key_revoke"]["error"]
    assert events["key_revoke"]["refused_everywhere_s"] >= 0
    assert set(results["slots_refused"].values()) == {0}, results["slots_refused"]
    assert (out / "report.md").read_text().startswith("# The fleet under faults")
    assert (out / "timeline.png").stat().st_size > 0
