"""The fleet's processes: Redis with a replica and three Sentinels, simulated SGLang
replicas, gateway replicas; each on its own free port, started and killed by the harness.

Every process runs in its own session and dies with the harness (``PR_SET_PDEATHSIG``,
from :mod:`evals.bench.procs`). Logs go to ``<out>/logs/<name>.log``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evals.bench.procs import ROOT, _die_with_parent

MASTER = "gwmaster"
ADMIN_TOKEN = "fleet-admin-token"
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http(
    method: str,
    url: str,
    body: bytes | None = None,
    token: str | None = None,
    timeout: float = 5.0,
) -> tuple[int, bytes]:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with _NO_PROXY.open(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def wait_for(what: str, ok: Any, timeout: float = 30.0, every: float = 0.1) -> float:
    """Poll ``ok()`` until it is true; the seconds it took. Raises after ``timeout``."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        try:
            if ok():
                return time.monotonic() - t0
        except (OSError, subprocess.SubprocessError):  # a redis-cli slow on a busy machine
            pass
        time.sleep(every)
    raise TimeoutError(f"{what}: not within {timeout:.0f} s")


@dataclass
class Proc:
    name: str
    argv: list[str]
    logdir: Path
    env: dict[str, str] = field(default_factory=dict)
    p: subprocess.Popen[bytes] | None = None

    def start(self) -> Proc:
        self.logdir.mkdir(parents=True, exist_ok=True)
        log = (self.logdir / f"{self.name}.log").open("ab")
        self.p = subprocess.Popen(
            self.argv,
            cwd=ROOT,
            env={**os.environ, **self.env},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        log.close()
        return self

    def alive(self) -> bool:
        return self.p is not None and self.p.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            assert self.p is not None
            os.killpg(self.p.pid, sig)

    def wait(self, timeout: float) -> int | None:
        assert self.p is not None
        try:
            return self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self) -> None:
        if self.alive():
            self.signal(signal.SIGTERM)
            if self.wait(10) is None:
                self.signal(signal.SIGKILL)
                self.wait(5)


def redis_server(name: str, port: int, datadir: Path, logdir: Path, *extra: str) -> Proc:
    argv = [
        "redis-server",
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        str(datadir),
        "--dbfilename",
        f"{name}.rdb",
        "--repl-diskless-sync-delay",
        "0",
        *extra,
    ]
    return Proc(name, argv, logdir)


def sentinel(name: str, port: int, master_port: int, confdir: Path, logdir: Path) -> Proc:
    """One Sentinel of three (quorum 2). ``failover-timeout`` is also how soon a sentinel may
    try again after an election nobody won (twice it): 4 s here, as the tests' rig has it,
    so a split vote costs 8 s; it also bounds the promotion, so not shorter."""
    conf = confdir / f"{name}.conf"
    conf.write_text(
        f"port {port}\nbind 127.0.0.1\nsentinel monitor {MASTER} 127.0.0.1 {master_port} 2\n"
        f"sentinel down-after-milliseconds {MASTER} 1000\n"
        f"sentinel failover-timeout {MASTER} 4000\nsentinel parallel-syncs {MASTER} 1\n"
    )
    return Proc(name, ["redis-server", str(conf), "--sentinel"], logdir)


def redis_role(port: int) -> str:
    out = subprocess.run(
        ["redis-cli", "-p", str(port), "ROLE"], capture_output=True, text=True, timeout=2
    )
    return out.stdout.split("\n", 1)[0].strip()


def replica_in_sync(master: int, replica: int) -> bool:
    """Whether ``replica`` is linked to ``master`` and has applied all it has written (a
    failover before the first sync would promote an empty replica)."""

    def info(port: int) -> dict[str, str]:
        out = subprocess.run(
            ["redis-cli", "-p", str(port), "INFO", "replication"],
            capture_output=True,
            text=True,
            timeout=2,
        )
        return dict(ln.strip().split(":", 1) for ln in out.stdout.splitlines() if ":" in ln)

    m, r = info(master), info(replica)
    if r.get("master_link_status") != "up" or "master_repl_offset" not in m:
        return False
    return int(r.get("slave_repl_offset", "-1")) >= int(m["master_repl_offset"])


def sentinel_view(port: int) -> dict[str, str]:
    """``SENTINEL MASTER``'s fields as one sentinel sees the master (flags, num-slaves,
    num-other-sentinels, failover-state, ...)."""
    out = subprocess.run(
        ["redis-cli", "-p", str(port), "SENTINEL", "MASTER", MASTER],
        capture_output=True,
        text=True,
        timeout=2,
    )
    words = out.stdout.split("\n")
    return dict(zip(words[0::2], words[1::2], strict=False))


def sentinels_acquainted(ports: list[int], replicas: int) -> bool:
    """Whether every sentinel knows the others and the replicas. Sentinels find each other
    through the master's hello channel (every 2 s): one that has not met the others yet
    cannot reach the quorum, nor win the election a failover needs."""
    for port in ports:
        v = sentinel_view(port)
        if v.get("num-other-sentinels") != str(len(ports) - 1) or v.get("num-slaves") != str(
            replicas
        ):
            return False
    return True


def sentinel_master(port: int) -> int | None:
    out = subprocess.run(
        ["redis-cli", "-p", str(port), "SENTINEL", "get-master-addr-by-name", MASTER],
        capture_output=True,
        text=True,
        timeout=2,
    )
    lines = out.stdout.split()
    return int(lines[1]) if len(lines) == 2 else None


def sim(name: str, port: int, profile: str, seed: int, logdir: Path) -> Proc:
    argv = [
        sys.executable,
        "-m",
        "engines.sim",
        "--port",
        str(port),
        "--profile",
        profile,
        "--seed",
        str(seed),
        "--model",
        f"sim-{profile}",
    ]
    return Proc(name, argv, logdir)


@dataclass
class Gateway:
    """One gateway replica: its data and admin ports, and the process (restartable)."""

    name: str
    port: int
    admin_port: int
    proc: Proc

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def admin(self) -> str:
        return f"http://127.0.0.1:{self.admin_port}"

    def ready(self) -> bool:
        return http("GET", self.url + "/readyz", timeout=1)[0] == 200

    def restart(self) -> None:
        self.proc = Proc(self.proc.name, self.proc.argv, self.proc.logdir, self.proc.env)
        self.proc.start()


def gateway(name: str, rules: Path, env: dict[str, str], logdir: Path) -> Gateway:
    port, admin = free_port(), free_port()
    argv = [
        sys.executable,
        "-m",
        "gateway.cli",
        "serve",
        "--rules",
        str(rules),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    env = {**env, "GATEWAY_ADMIN_PORT": str(admin), "GATEWAY_ADMIN_TOKEN": ADMIN_TOKEN}
    return Gateway(name, port, admin, Proc(name, argv, logdir, env))


def admin_json(gw: Gateway, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    raw = None if body is None else json.dumps(body).encode()
    status, out = http(method, gw.admin + path, raw, token=ADMIN_TOKEN)
    try:
        return status, json.loads(out) if out else None
    except ValueError:
        return status, out.decode(errors="replace")
