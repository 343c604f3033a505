"""Child processes of the benchmark: pinned to CPUs, optionally niced, each in its own
process group, bounded in time, and stopped by their own ids.

Every child gets ``PR_SET_PDEATHSIG``: if the harness dies (even by SIGKILL), the kernel
sends it SIGTERM, so no server outlives a run. On top, :class:`Service` stops its process
group (SIGTERM, then SIGKILL) and :func:`run_json` kills a load generator that overruns.
:func:`wait_ready` polls a started server until it answers (or says why it did not).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]  # the repository: `python -m evals...` works here
_PR_SET_PDEATHSIG = 1
_NICE = ("nice", "-n", "-10")
LOG_KEEP_BYTES = 256 * 1024  # of a server's log kept from its start, and as much from its end
READY_TIMEOUT_S = 30.0
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # ignore *_proxy env


def log(*parts: object) -> None:
    print(time.strftime("[%H:%M:%S]"), *parts, file=sys.stderr, flush=True)


def _die_with_parent() -> None:  # runs in the child between fork and exec
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM))


def command(argv: Sequence[str], cpus: str | None, nice: bool) -> list[str]:
    """``argv`` wrapped in ``nice -n -10`` and ``taskset -c CPUS`` as asked."""
    prefix = list(_NICE) if nice else []
    if cpus:
        prefix += ["taskset", "-c", cpus]
    return [*prefix, *argv]


def _spawn(argv: list[str], env: Mapping[str, str] | None, **kw: Any) -> subprocess.Popen[Any]:
    return subprocess.Popen(
        argv,
        env=dict(env) if env is not None else None,
        cwd=ROOT,
        start_new_session=True,
        preexec_fn=_die_with_parent,
        **kw,
    )


def _exited(p: subprocess.Popen[Any]) -> bool:
    """True once the child has exited; it is left a zombie (not reaped) so that its pid,
    which is also its process group id, cannot be reused while we may still signal it."""
    if p.returncode is not None:
        return True
    return os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


def _kill_group(p: subprocess.Popen[Any], grace_s: float) -> None:
    """SIGTERM the child's process group, SIGKILL what is left after ``grace_s``, reap.

    Only while the child is unreaped: then its group id is certainly still ours."""
    if p.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while not _exited(p) and time.monotonic() < deadline:
            time.sleep(0.05)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)  # the child if it lingers, and any stragglers
    with contextlib.suppress(subprocess.TimeoutExpired):
        p.wait(timeout=5)


class Service:
    """A long-running server process with its output in ``logdir/<name>.log``."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        cpus: str | None,
        nice: bool,
        logdir: Path,
        env: Mapping[str, str] | None = None,
    ):
        self.name = name
        self.logfile = logdir / f"{name}.log"
        full = command(argv, cpus, nice)
        with open(self.logfile, "wb") as out:
            self.p = _spawn(full, env, stdout=out, stderr=subprocess.STDOUT)
        log(f"started {name} pid={self.p.pid} cpus={cpus or 'any'}: {' '.join(argv)}")

    @property
    def pid(self) -> int:
        return self.p.pid

    def alive(self) -> bool:
        return not _exited(self.p)

    def log_tail(self, n: int = 2000) -> str:
        try:
            return self.logfile.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def stop(self) -> None:
        was_alive = self.alive()
        _kill_group(self.p, grace_s=10)
        if was_alive:
            log(f"stopped {self.name} pid={self.p.pid}")
        self._trim_log()

    def _trim_log(self) -> None:
        """Keep a long log's head and tail only (an access log grows by ~3 KB per 10 req)."""
        try:
            size = self.logfile.stat().st_size
            if size <= 2 * LOG_KEEP_BYTES:
                return
            with open(self.logfile, "rb") as f:
                head = f.read(LOG_KEEP_BYTES)
                f.seek(size - LOG_KEEP_BYTES)
                tail = f.read()
        except OSError:
            return
        cut = f"\n[... {size - 2 * LOG_KEEP_BYTES:,} bytes cut by the benchmark ...]\n"
        self.logfile.write_bytes(head + cut.encode() + tail)


def run_json(
    argv: Sequence[str], *, cpus: str | None, nice: bool, timeout: float
) -> dict[str, Any]:
    """Run a tool that prints one JSON object as its last stdout line; return that object.

    The tool runs in its own process group and is killed on timeout, error or Ctrl-C.
    """
    p = _spawn(
        command(argv, cpus, nice), None, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        out, err = p.communicate(timeout=timeout)
    except BaseException:  # timeout, Ctrl-C: the tool is unreaped, so its group is ours
        _kill_group(p, grace_s=1)
        raise
    if p.returncode != 0:
        raise RuntimeError(f"{argv[:3]} exited with {p.returncode}: {err[-2000:]}")
    lines = out.strip().splitlines()
    if not lines:
        raise RuntimeError(f"{argv[:3]} printed nothing: {err[-2000:]}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def http(
    method: str, url: str, body: bytes | None = None, timeout: float = 5.0
) -> tuple[int, dict[str, str], bytes]:
    """(status, lower-cased headers, body) of one request, ignoring any *_proxy setting."""
    headers = {"Content-Type": "application/json"} if body is not None else {}
    req = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with _NO_PROXY.open(req, timeout=timeout) as r:
            return r.status, {k.lower(): v for k, v in r.headers.items()}, r.read()
    except urllib.error.HTTPError as e:
        return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()


def wait_ready(url: str, service: Service, timeout_s: float = READY_TIMEOUT_S) -> None:
    """Poll ``url`` until it answers 200; raise with the log's tail if ``service`` exits
    first or ``timeout_s`` passes."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        if not service.alive():
            raise RuntimeError(f"{service.name} exited at start:\n{service.log_tail()}")
        try:
            if http("GET", url, timeout=2)[0] == 200:
                log(f"{service.name} ready after {time.monotonic() - t0:.1f}s")
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{service.name} not ready after {timeout_s:.0f}s:\n{service.log_tail()}")
