"""``python -m evals headline`` end to end on the simulator pair (a tiny, fast run)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = [pytest.mark.processes, pytest.mark.slow]


def test_headline_runs_and_reports_every_target(tmp_path: Path) -> None:
    argv = [
        sys.executable,
        "-m",
        "evals",
        "headline",
        "--requests",
        "3",
        "--clients",
        "2",
        "--modes",
        "stream,plain",
        "--time-scale",
        "0.05",
        "--faults",
        "loop=1.0",
        "--out",
        str(tmp_path),
    ]
    r = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr[-2000:]
    raw = json.loads((tmp_path / "headline.json").read_text())
    cells = raw["cells"]
    assert set(cells) == {"stream c=2", "plain c=2"}
    for by_target in cells.values():
        assert set(by_target) == {"fast (raw)", "standard (raw)", "gateway", "gateway, no hedging"}
        # every fast answer loops; the gateway delivers none of them
        assert by_target["fast (raw)"]["defects"]["loop"] == 3
        assert by_target["gateway"]["defects"] == {"loop": 0, "leak": 0, "cut": 0}
        assert by_target["gateway"]["errors"] == 0
        assert by_target["gateway"]["fallbacks"] == 3  # streams: the comment after [DONE]
    assert set(raw["standard_load"]) == set(cells)  # the standard engine's counters, per cell
    for requests, tokens in raw["standard_load"].values():
        assert requests >= 3 + 2 * 3 and tokens > 0  # its raw target's, and every gateway's
    md = (tmp_path / "headline.md").read_text()
    assert "| stream c=2 | gateway |" in md and "latency p99 <= standard's" in md


def test_the_task_mix_runs_and_judges_each_kind(tmp_path: Path) -> None:
    argv = [
        sys.executable,
        "-m",
        "evals",
        "headline",
        "--mix",
        "tasks",
        "--requests",
        "6",  # one prompt of each kind
        "--clients",
        "2",
        "--modes",
        "plain",
        "--time-scale",
        "0.05",
        "--faults",
        "bad_json=1.0,bad_tool=1.0",
        "--no-hedge-target",
        "--out",
        str(tmp_path),
    ]
    r = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr[-2000:]
    raw = json.loads((tmp_path / "headline.json").read_text())
    kinds = {s["kind"] for s in raw["samples"]}
    assert kinds == {"chat", "code", "tools", "json", "summary", "reasoning"}
    cell = raw["cells"]["plain c=2"]
    # the fast tier's JSON and tool call are broken; the gateway delivers neither
    assert cell["fast (raw)"]["defects"]["bad_json"] == 1
    assert cell["fast (raw)"]["defects"]["bad_tool"] == 1
    assert sum(cell["gateway"]["defects"].values()) == 0 and cell["gateway"]["errors"] == 0
    assert "Per kind of request" in (tmp_path / "headline.md").read_text()
