"""Run a long install step and say how it goes: ``python engines/progress.py --what TEXT
--key NAME --usual TEXT -- COMMAND...``.

A cold ``make serve`` builds llama.cpp from source (minutes on two cores) and installs the
gateway's packages; quiet, that looks like a hang. This runs the command with its whole
output going to a log file (``--log``), and prints one line when it starts and then every
``--every`` seconds (30 by default): what is being built, how long it has run, how far it
is (the build's own ``[k/n]`` steps when it prints them; else the last thing it said), and
how long it took the last time on this machine (kept in ``.cache/install-times.json``),
else ``--usual``. When the command fails, its last lines and the log's path are printed:
a build error is never hidden.

Standard library only: it runs before anything else is installed.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

TIMES = Path(".cache") / "install-times.json"
_STEP = re.compile(r"\[(\d+)/(\d+)\]")
TAIL_LINES = 60
MEASURED_S = 20.0  # a run this long is remembered as how long the step takes here


def _clock(s: float) -> str:
    m, s = divmod(int(s), 60)
    return f"{m}m{s:02d}s" if m else f"{s}s"


def _said_before(key: str) -> float | None:
    try:
        v = json.loads(TIMES.read_text())[key]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return float(v) if isinstance(v, int | float) else None


def _remember(key: str, took: float) -> None:
    try:
        seen = json.loads(TIMES.read_text()) if TIMES.is_file() else {}
        seen[key] = round(took)
        TIMES.parent.mkdir(parents=True, exist_ok=True)
        TIMES.write_text(json.dumps(seen, indent=1) + "\n")
    except (OSError, ValueError):
        pass  # the figure is a courtesy; the install is what matters


class _Watch:
    """The latest step and line of the command's output, read as it is written."""

    def __init__(self) -> None:
        self.step: tuple[int, int] | None = None
        self.last = ""

    def feed(self, line: str) -> None:
        m = _STEP.search(line)
        if m:
            self.step = (int(m.group(1)), int(m.group(2)))
        if line.strip():
            self.last = line.strip()[:100]

    def where(self) -> str:
        if self.step is not None:
            k, n = self.step
            return f"step {k}/{n} ({100 * k // max(n, 1)} %)"
        return f"last: {self.last}" if self.last else "starting"


def run(what: str, key: str, usual: str, log: Path, every: float, cmd: list[str]) -> int:
    before = _said_before(key)
    expect = f"the last time here it took {_clock(before)}" if before else f"usually {usual}"
    print(f"==> {what}: {expect}; output in {log}", flush=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    watch, t0 = _Watch(), time.monotonic()
    with log.open("w", encoding="utf-8", errors="replace") as out:
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
        )
        assert proc.stdout is not None

        def pump() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                out.write(line)
                out.flush()
                watch.feed(line)

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        while proc.poll() is None:
            reader.join(every)
            if proc.poll() is None:
                so_far = _clock(time.monotonic() - t0)
                print(f"    {what}: {so_far} so far, {watch.where()}; {expect}", flush=True)
        reader.join()
    took = time.monotonic() - t0
    if proc.returncode != 0:
        lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
        print(
            f"==> {what} FAILED after {_clock(took)} (exit {proc.returncode}); its last "
            f"{min(TAIL_LINES, len(lines))} lines (all of it: {log}):",
            file=sys.stderr,
        )
        for line in lines[-TAIL_LINES:]:
            print(f"    {line}", file=sys.stderr)
        return proc.returncode
    if took >= MEASURED_S:  # a real build, not "already installed"
        _remember(key, took)
    print(f"==> {what}: done in {_clock(took)}", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--what", required=True, help="what is being built, for people")
    p.add_argument("--key", required=True, help="its name in .cache/install-times.json")
    p.add_argument("--usual", default="a few minutes", help="how long it takes, if not seen")
    p.add_argument("--log", type=Path, default=None)
    p.add_argument("--every", type=float, default=30.0, help="seconds between progress lines")
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="-- then the command")
    a = p.parse_args(argv)
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    if not cmd:
        p.error("no command given (after --)")
    log = a.log or Path(".cache") / f"{a.key}.log"
    return run(a.what, a.key, a.usual, log, a.every, cmd)


if __name__ == "__main__":
    raise SystemExit(main())
