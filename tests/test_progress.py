"""``engines/progress.py``, which runs a cold ``make serve``'s long steps: a line at least
every ``--every`` seconds (what, how far, how long it took here last time), and a failed
build's own error lines, never hidden."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "engines" / "progress.py"


def _run(tmp: Path, shell: str, every: float = 0.3) -> subprocess.CompletedProcess[str]:
    args = ["--what", "llama.cpp", "--key", "k", "--usual", "5 min", "--every", str(every)]
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args, "--", "bash", "-c", shell],
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_long_step_says_how_far_it_is_while_it_runs(tmp_path: Path) -> None:
    build = 'for i in 1 2 3 4; do echo "[$i/4] Building CXX object x$i.o"; sleep 0.4; done'
    r = _run(tmp_path, build)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("==> llama.cpp: usually 5 min; output in .cache/k.log")
    ticks = [line for line in lines if " so far, step " in line]
    assert len(ticks) >= 3 and "/4 (" in ticks[-1]
    assert lines[-1].startswith("==> llama.cpp: done in")
    assert "[4/4] Building" in (tmp_path / ".cache" / "k.log").read_text()


def test_the_time_it_took_here_is_said_the_next_time(tmp_path: Path) -> None:
    (tmp_path / ".cache").mkdir()
    (tmp_path / ".cache" / "install-times.json").write_text(json.dumps({"k": 412}))
    r = _run(tmp_path, "echo quick")
    assert "the last time here it took 6m52s" in r.stdout
    assert json.loads((tmp_path / ".cache" / "install-times.json").read_text()) == {"k": 412}


def test_a_failed_build_shows_its_own_errors(tmp_path: Path) -> None:
    r = _run(tmp_path, 'echo "[1/9] cc x.c"; echo "x.c:3: error: expected ;" >&2; exit 7')
    assert r.returncode == 7
    assert "FAILED" in r.stderr and "x.c:3: error: expected ;" in r.stderr
    assert ".cache/k.log" in r.stderr
