"""The faults ``python -m evals fleet`` injects, one at a time, each a blocking function run
in a thread beside the load. Each returns what it measured (seconds) for the report."""

from __future__ import annotations

import json
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evals.fleet.procs import (
    ADMIN_TOKEN,
    Gateway,
    Proc,
    admin_json,
    http,
    redis_role,
    replica_in_sync,
    sentinel_master,
    sentinel_view,
    sentinels_acquainted,
    wait_for,
)


@dataclass
class Fleet:
    gateways: list[Gateway]
    redis: dict[int, Proc]  # port -> redis-server (master and replica)
    sentinels: list[int]  # ports
    engines: dict[str, list[Proc]]  # tier -> sim replicas
    engine_ports: dict[str, list[int]]
    rules_text: str
    drain_s: float
    probe_key: tuple[str, str] = ("", "")  # key id, plaintext: revoked by one fault
    notes: list[str] = field(default_factory=list)
    logdir: Path | None = None  # where the processes' logs are (the sentinels' for a report)


def redis_failover(f: Fleet) -> dict[str, Any]:
    """``kill -9`` the Redis master; Sentinel promotes the replica; the old master comes
    back as a replica."""
    old = sentinel_master(f.sentinels[0])
    assert old is not None, "no master known to the sentinels"
    for port in (p for p in f.redis if p != old):
        wait_for("the replica in sync", lambda p=port: replica_in_sync(old, p), 30)
    wait_for(
        "the sentinels to know each other and the replica",
        lambda: sentinels_acquainted(f.sentinels, len(f.redis) - 1),
        30,
    )
    f.redis[old].signal(signal.SIGKILL)
    f.redis[old].wait(5)
    t0 = time.monotonic()
    try:
        # a split vote is retried after twice the failover timeout: 60 s is several elections
        wait_for("a new master", lambda: sentinel_master(f.sentinels[0]) not in (None, old), 60)
    except TimeoutError as e:
        raise TimeoutError(f"{e}; {sentinels_state(f)}") from None
    failover = time.monotonic() - t0
    new = sentinel_master(f.sentinels[0])
    assert new is not None and new != old, "the sentinels lost the new master"
    wait_for(
        "every sentinel on the new master",
        lambda: all(sentinel_master(s) == new for s in f.sentinels),
        30,
    )
    # back as the new master's replica, as an orchestrator restarts a node without
    # persistence: restarted as a master, its empty data set could win and be synced over
    # the promoted replica's (Redis's Sentinel docs warn of exactly that)
    argv = [*f.redis[old].argv, "--replicaof", "127.0.0.1", str(new)]
    f.redis[old] = Proc(f.redis[old].name, argv, f.redis[old].logdir).start()
    wait_for("the old master back as a replica", lambda: redis_role(old) == "slave", 30)
    return {"failover_s": round(failover, 2)}


def sentinels_state(f: Fleet) -> str:
    """What each sentinel thinks of the master, and the end of its log: for a failover that
    did not happen."""
    parts = []
    for i, port in enumerate(f.sentinels):
        try:
            v = sentinel_view(port)
            seen = {
                k: v.get(k)
                for k in (
                    "ip",
                    "port",
                    "flags",
                    "failover-state",
                    "num-other-sentinels",
                    "num-slaves",
                )
            }
        except (OSError, subprocess.SubprocessError) as e:
            seen = {"error": repr(e)}
        log = f.logdir / f"sentinel-{i}.log" if f.logdir else None
        tail = log.read_text(errors="replace").splitlines()[-12:] if log and log.exists() else []
        parts.append(f"sentinel-{i} {seen}: " + " | ".join(tail))
    return "; ".join(parts)


def gateway_kill(f: Fleet) -> dict[str, Any]:
    """``kill -9`` one gateway replica (its own in-flight requests are lost), restart it."""
    gw = f.gateways[-1]
    gw.proc.signal(signal.SIGKILL)
    gw.proc.wait(5)
    time.sleep(2.0)  # the fault: the replica is gone for a while
    gw.restart()
    t = wait_for(f"{gw.name} ready", gw.ready, 60)
    return {"restart_to_ready_s": round(t, 2)}


def rolling_restart(f: Fleet) -> dict[str, Any]:
    """Every replica in turn: SIGTERM (it drains), wait for its exit, start it, wait ready."""
    exits = []
    for gw in f.gateways:
        t0 = time.monotonic()
        gw.proc.signal(signal.SIGTERM)
        code = gw.proc.wait(f.drain_s + 10)
        exits.append(round(time.monotonic() - t0, 2))
        if code is None:
            f.notes.append(f"{gw.name} did not exit {f.drain_s + 10:.0f} s after SIGTERM")
            gw.proc.signal(signal.SIGKILL)
        gw.restart()
        wait_for(f"{gw.name} ready", gw.ready, 60)
    return {"exit_after_sigterm_s": exits}


def engine_kill(f: Fleet) -> dict[str, Any]:
    """``kill -9`` one fast-tier engine replica; it comes back 3 s later."""
    proc, port = f.engines["highspeed"][0], f.engine_ports["highspeed"][0]
    proc.signal(signal.SIGKILL)
    proc.wait(5)
    time.sleep(3.0)
    f.engines["highspeed"][0] = Proc(proc.name, proc.argv, proc.logdir).start()
    t = wait_for(
        "the engine back",
        lambda: http("GET", f"http://127.0.0.1:{port}/health", timeout=1)[0] == 200,
        30,
    )
    return {"engine_back_s": round(t, 2)}


def rules_change(f: Fleet) -> dict[str, Any]:
    """Upload new rules on one replica; the time until every replica runs that version."""
    f.rules_text += f"\n# fleet change at {time.time():.0f}\n"
    status, out = http(
        "PUT", f.gateways[0].admin + "/admin/rules", f.rules_text.encode(), token=ADMIN_TOKEN
    )
    assert status == 200, f"rules upload: {status} {out[:300]!r}"
    version = int(json.loads(out)["version"])
    t0 = time.monotonic()
    for gw in f.gateways:
        wait_for(
            f"{gw.name} on rules v{version}",
            lambda gw=gw: admin_json(gw, "GET", "/admin/rules")[1]["version"] == version,
            30,
            every=0.005,
        )
    return {"version": version, "reached_every_replica_s": round(time.monotonic() - t0, 3)}


def key_revoke(f: Fleet) -> dict[str, Any]:
    """Revoke a key on one replica; the time until every replica refuses it."""
    key_id, plain = f.probe_key
    status, _ = admin_json(f.gateways[1], "DELETE", f"/admin/keys/{key_id}")
    assert status in (200, 204), f"revoke: {status}"
    t0 = time.monotonic()
    body = b'{"model":"auto","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}'
    for gw in f.gateways:
        wait_for(
            f"{gw.name} refusing the key",
            lambda gw=gw: _status(gw, body, plain) == 401,
            30,
            every=0.005,
        )
    return {"refused_everywhere_s": round(time.monotonic() - t0, 3)}


def _status(gw: Gateway, body: bytes, key: str) -> int:
    req = urllib.request.Request(
        gw.url + "/v1/chat/completions",
        data=body,
        method="POST",
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"},
    )
    try:
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(req, timeout=5) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


FAULTS: dict[str, Callable[[Fleet], dict[str, Any]]] = {
    "redis_failover": redis_failover,
    "gateway_kill9": gateway_kill,
    "rolling_restart": rolling_restart,
    "engine_kill9": engine_kill,
    "rules_change": rules_change,
    "key_revoke": key_revoke,
}
