"""Real Redis processes for the store tests, each on free ports of its own: one Redis, a
master with a replica watched by three Sentinels, a three-master Cluster.

Every process is ``redis-server`` (a Sentinel is ``redis-server CONF --sentinel``), started
by the test and stopped by it (``kill -9`` where a test needs a crash).
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from tests.conftest import free_port


def wait_for(pred: Callable[[], object], timeout: float = 15.0, every: float = 0.05) -> bool:
    """Poll ``pred`` until it is true or ``timeout`` passed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            if pred():
                return True
        time.sleep(every)
    return False


def cli(port: int, *args: str, timeout: float = 5.0) -> str:
    r = subprocess.run(
        ["redis-cli", "-p", str(port), *args], capture_output=True, text=True, timeout=timeout
    )
    return r.stdout.strip()


class RedisProc:
    """One ``redis-server``; ``args`` are more of its flags. ``restart`` keeps its port and
    directory (so an AOF or a cluster's nodes.conf comes back with it)."""

    def __init__(self, folder: Path, *args: str, port: int | None = None, sentinel: bool = False):
        self.port = port or free_port()
        self.dir = folder / f"redis-{self.port}"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.args = args
        self.sentinel = sentinel
        self.p: subprocess.Popen[bytes] | None = None
        self.start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        argv = ["redis-server"]
        if self.sentinel:
            argv += [str(self.dir / "sentinel.conf"), "--sentinel"]
        argv += ["--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir)]
        argv += ["--save", "", *self.args]
        self.p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if not wait_for(lambda: cli(self.port, "ping") == "PONG", timeout=10):
            self.stop()
            raise RuntimeError(f"redis-server on {self.port} did not start")

    def cli(self, *args: str) -> str:
        return cli(self.port, *args)

    def kill(self) -> None:
        """``kill -9``: no shutdown, no last write."""
        if self.p is not None and self.p.poll() is None:
            self.p.send_signal(signal.SIGKILL)
            self.p.wait()

    def stop(self) -> None:
        if self.p is not None and self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(5)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()

    def restart(self) -> None:
        self.stop()
        self.start()


@contextlib.contextmanager
def redis_procs() -> Iterator[list[RedisProc]]:
    """A list to put started processes in; all stopped at the end, whatever happened."""
    procs: list[RedisProc] = []
    try:
        yield procs
    finally:
        for p in procs:
            p.stop()


def sentinel_conf(folder: Path, port: int, master_port: int) -> None:
    d = folder / f"redis-{port}"
    d.mkdir(parents=True, exist_ok=True)
    (d / "sentinel.conf").write_text(
        f"port {port}\n"
        f"sentinel monitor mymaster 127.0.0.1 {master_port} 2\n"
        "sentinel down-after-milliseconds mymaster 1000\n"
        "sentinel failover-timeout mymaster 4000\n"
        "sentinel parallel-syncs mymaster 1\n"
    )


def start_sentinel_rig(folder: Path, procs: list[RedisProc]) -> tuple[RedisProc, RedisProc, str]:
    """A master, its replica and three Sentinels (quorum 2) that know both:
    (master, replica, the ``redis+sentinel://`` URL)."""
    master = RedisProc(folder, "--appendonly", "yes", "--appendfsync", "always")
    procs.append(master)
    replica = RedisProc(folder, "--replicaof", "127.0.0.1", str(master.port), "--appendonly", "yes")
    procs.append(replica)
    assert wait_for(lambda: "master_link_status:up" in replica.cli("info", "replication"))
    ports = [free_port() for _ in range(3)]
    for port in ports:
        sentinel_conf(folder, port, master.port)
        procs.append(RedisProc(folder, port=port, sentinel=True))

    def all_know_everyone() -> bool:
        for port in ports:
            info = cli(port, "sentinel", "master", "mymaster")
            fields = dict(zip(info.splitlines()[::2], info.splitlines()[1::2], strict=False))
            if fields.get("num-slaves") != "1" or fields.get("num-other-sentinels") != "2":
                return False
        return True

    assert wait_for(all_know_everyone, timeout=20), "the sentinels did not find each other"
    nodes = ",".join(f"127.0.0.1:{p}" for p in ports)
    return master, replica, f"redis+sentinel://{nodes}/mymaster/0"


def sentinel_master(url: str) -> int:
    """The port the sentinels name as master now."""
    port = int(url.split("//")[1].split(",")[0].split(":")[1])
    return int(cli(port, "sentinel", "get-master-addr-by-name", "mymaster").splitlines()[1])


def start_cluster(folder: Path, procs: list[RedisProc]) -> tuple[list[RedisProc], str]:
    """Three masters, no replicas, every slot assigned: (nodes, ``redis+cluster://`` URL)."""
    nodes = []
    for _ in range(3):
        node = RedisProc(
            folder,
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-port",  # the bus port: its own free port (not port + 10000)
            str(free_port()),
            "--cluster-node-timeout",
            "3000",
            "--appendonly",
            "yes",
        )
        procs.append(node)
        nodes.append(node)
    addrs = [f"127.0.0.1:{n.port}" for n in nodes]
    r = subprocess.run(
        ["redis-cli", "--cluster", "create", *addrs, "--cluster-yes"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert wait_for(lambda: all(cluster_ok(n) for n in nodes), timeout=20)
    return nodes, "redis+cluster://" + ",".join(addrs)


def cluster_ok(node: RedisProc) -> bool:
    return "cluster_state:ok" in node.cli("cluster", "info")
