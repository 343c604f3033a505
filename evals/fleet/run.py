"""``python -m evals fleet``: three gateway replicas, Redis with a replica and three
Sentinels, four simulated SGLang replicas per tier — real processes on this machine —
under steady mixed load (streamed and not, three tenants), with faults injected one at a
time:

* ``redis_failover``   the Redis master ``kill -9``-ed; Sentinel promotes the replica
* ``gateway_kill9``    one gateway replica ``kill -9``-ed, restarted 2 s later
* ``rolling_restart``  every replica in turn: SIGTERM (drain), exit, start, ready
* ``engine_kill9``     one fast-tier engine replica ``kill -9``-ed, back 3 s later
* ``rules_change``     new rules uploaded through the admin API of one replica
* ``key_revoke``       a key revoked through the admin API of one replica

Per fault: requests that ended in its window (from the fault to its end plus a settle time),
answered, failed by outcome, streams cut, latency p50/p99 in the window, the time from
the fault to the end of the last failed request, and what the fault measured itself
(failover time, time for a rules change or a revocation to reach every replica). After the
faults: each tenant's full concurrency is available again (no slot leaked). Writes
``report.md``, ``results.json`` and ``timeline.png`` to ``--out``
(default ``docs/reports/fleet``).

    python -m evals fleet [--clients 12] [--settle 3] [--faults a,b,...] [--out DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from evals.bench.common import percentile
from evals.fleet.faults import FAULTS, Fleet
from evals.fleet.load import Balancer, Load, Sample, run_load, samples_json
from evals.fleet.procs import (
    MASTER,
    Proc,
    admin_json,
    free_port,
    gateway,
    http,
    redis_role,
    redis_server,
    sentinel,
    sentinel_master,
    sentinels_acquainted,
    sim,
    wait_for,
)
from evals.report import ROOT, md_table, shown_path

TENANTS = ("acme", "globex", "initech")
CONCURRENCY = 16  # each tenant's max_concurrent_requests


def start_fleet(a: argparse.Namespace, tmp: Path) -> Fleet:
    logs = a.out / "logs"
    master, replica = free_port(), free_port()
    redis = {
        master: redis_server("redis-a", master, tmp, logs).start(),
        replica: redis_server(
            "redis-b", replica, tmp, logs, "--replicaof", "127.0.0.1", str(master)
        ).start(),
    }
    wait_for("the Redis master", lambda: redis_role(master) == "master", 30)
    wait_for("the Redis replica", lambda: redis_role(replica) == "slave", 30)
    sentinels = [free_port() for _ in range(3)]
    for i, port in enumerate(sentinels):
        sentinel(f"sentinel-{i}", port, master, tmp, logs).start()
    for port in sentinels:
        wait_for("a sentinel", lambda port=port: sentinel_master(port) == master, 30)
    wait_for(
        "the sentinels to know each other and the replica",
        lambda: sentinels_acquainted(sentinels, replicas=1),
        30,
    )
    engines: dict[str, list[Proc]] = {}
    ports: dict[str, list[int]] = {}
    for tier in ("highspeed", "standard"):
        for i in range(a.engines):
            port = free_port()
            ports.setdefault(tier, []).append(port)
            engines.setdefault(tier, []).append(sim(f"{tier}-{i}", port, tier, i, logs).start())
    for tier_ports in ports.values():
        for port in tier_ports:
            wait_for(
                f"engine {port}",
                lambda port=port: (
                    http("GET", f"http://127.0.0.1:{port}/health", timeout=1)[0] == 200
                ),
                60,
            )
    rules_text = (ROOT / "routing_rules.yaml").read_text()
    rules = tmp / "routing_rules.yaml"
    rules.write_text(rules_text)
    hosts = ",".join(f"127.0.0.1:{p}" for p in sentinels)
    url = (
        f"redis+sentinel://{hosts}/{MASTER}/0"
        if a.redis == "sentinel"
        else f"redis://127.0.0.1:{master}/0"
    )
    env = {
        "GATEWAY_REDIS_URL": url,
        "GATEWAY_DRAIN_SECONDS": str(a.drain),
        "GATEWAY_KEY_SECRET": "fleet-key-secret",
        **{
            f"GATEWAY_POOL_{t.upper()}_URLS": ",".join(f"http://127.0.0.1:{p}" for p in ps)
            for t, ps in ports.items()
        },
    }
    gws = [gateway(f"gateway-{i}", rules, env, logs) for i in range(a.replicas)]
    for gw in gws:
        gw.proc.start()
    for gw in gws:
        wait_for(f"{gw.name} ready", gw.ready, 60)
    return Fleet(gws, redis, sentinels, engines, ports, rules_text, a.drain, logdir=logs)


def make_tenants(f: Fleet) -> dict[str, str]:
    keys = {}
    for name in TENANTS:
        policy = {"max_concurrent_requests": CONCURRENCY, "requests_per_minute": 100_000}
        status, t = admin_json(
            f.gateways[0], "POST", "/admin/tenants", {"name": name, "policy": policy}
        )
        assert status in (200, 201), f"tenant {name}: {status} {t}"
        status, k = admin_json(f.gateways[0], "POST", f"/admin/tenants/{t['id']}/keys", {})
        assert status in (200, 201), f"key for {name}: {status} {k}"
        keys[name] = k["key"]
        if name == TENANTS[-1]:
            status, probe = admin_json(
                f.gateways[0],
                "POST",
                f"/admin/tenants/{t['id']}/keys",
                {"name": "revoked by the key_revoke fault"},
            )
            f.probe_key = (probe["id"], probe["key"])
    return keys


def schedule(f: Fleet, load: Load, a: argparse.Namespace) -> list[dict[str, Any]]:
    """The load runs on its own event loop in a thread; the faults run here, in the main
    thread, because a process's parent-death signal follows the thread that started it."""
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    thread = threading.Thread(
        target=lambda: loop.run_until_complete(run_load(load, a.clients, stop)), daemon=True
    )
    thread.start()
    events = []
    time.sleep(a.settle)
    for name in a.faults:
        t0 = load.now()
        print(f"[{t0:6.1f}s] fault {name}", file=sys.stderr)
        try:
            measured = FAULTS[name](f)
        except (AssertionError, TimeoutError) as e:
            measured = {"error": str(e)}
        t1 = load.now()
        time.sleep(a.settle)
        events.append({"fault": name, "t0": t0, "t1": t1, "t_settled": load.now(), **measured})
    loop.call_soon_threadsafe(stop.set)
    thread.join()
    loop.close()
    return events


async def leaked_slots(f: Fleet, keys: dict[str, str]) -> dict[str, int]:
    """Per tenant: how many of ``CONCURRENCY`` simultaneous requests were refused (429)."""
    import aiohttp

    out = {}
    body = {"model": "auto", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}
    async with aiohttp.ClientSession() as s:
        for tenant, key in keys.items():

            async def one(i: int, key: str = key) -> int:
                gw = f.gateways[i % len(f.gateways)]
                async with s.post(
                    gw.url + "/v1/chat/completions",
                    json=body,
                    headers={"Authorization": f"Bearer {key}"},
                ) as r:
                    await r.read()
                    return r.status

            statuses = await asyncio.gather(*(one(i) for i in range(CONCURRENCY)))
            out[tenant] = sum(st == 429 for st in statuses)
    return out


def window_stats(samples: list[Sample], ev: dict[str, Any]) -> dict[str, Any]:
    """A request counts in the window it *ended* in: one sent just before a fault and cut
    by it is that fault's loss, not the previous fault's."""
    inside = [x for x in samples if ev["t0"] <= x.t1 < ev["t_settled"]]
    failed = [x for x in inside if x.outcome != "ok"]
    by: dict[str, int] = {}
    for x in failed:
        by[x.outcome] = by.get(x.outcome, 0) + 1
    lat = sorted((x.t1 - x.t0) * 1000 for x in inside if x.outcome == "ok")
    p50, p99 = percentile(lat, 50), percentile(lat, 99)
    return {
        "sent": len(inside),
        "answered": len(inside) - len(failed),
        "failed": by,
        "streams_cut": sum(x.outcome in ("cut", "error_event") for x in failed if x.stream),
        "rerouted": sum(x.rerouted for x in inside),
        "p50_ms": None if p50 is None else round(p50, 1),
        "p99_ms": None if p99 is None else round(p99, 1),
        "recovered_after_s": round(max((x.t1 for x in failed), default=ev["t0"]) - ev["t0"], 2),
    }


def report(
    events: list[dict[str, Any]],
    samples: list[Sample],
    slots: dict[str, int],
    f: Fleet,
    a: argparse.Namespace,
) -> str:
    rows = []
    for ev in events:
        st = ev["stats"] = window_stats(samples, ev)
        own = {k: v for k, v in ev.items() if k not in ("fault", "t0", "t1", "t_settled", "stats")}
        rows.append(
            [
                ev["fault"],
                st["sent"],
                st["answered"],
                ", ".join(f"{k} {v}" for k, v in st["failed"].items()) or "0",
                st["streams_cut"],
                st["rerouted"],
                st["p50_ms"],
                st["p99_ms"],
                st["recovered_after_s"] if st["failed"] else "-",
                ", ".join(f"{k} {v}" for k, v in own.items()) or "-",
            ]
        )
    steady = [x for x in samples if x.t0 < (events[0]["t0"] if events else 1e9)]
    lat = sorted((x.t1 - x.t0) * 1000 for x in steady if x.outcome == "ok")
    table = md_table(
        [
            "fault",
            "sent",
            "answered",
            "failed (by outcome)",
            "streams cut",
            "rerouted",
            "p50 ms",
            "p99 ms",
            "recovered after s",
            "measured",
        ],
        rows,
    )
    total_failed = sum(x.outcome != "ok" for x in samples)
    cmd = "python -m evals fleet " + " ".join(sys.argv[2:] if sys.argv[1:2] == ["fleet"] else [])
    text = (
        "# The fleet under faults\n\n"
        f"{len(f.gateways)} gateway replicas (processes), Redis master + replica + 3 Sentinels "
        f"(the gateways use {'`redis+sentinel://`' if a.redis == 'sentinel' else 'the master'}"
        f"), {a.engines} simulated SGLang replicas per tier; "
        f"{a.clients} closed-loop clients (half streamed), {len(TENANTS)} tenants "
        f"(max {CONCURRENCY} concurrent each), `GATEWAY_DRAIN_SECONDS={a.drain:g}`. "
        "A client-side balancer sends to replicas whose `/readyz` is 200 and retries a refused "
        "connection elsewhere (nothing of the request was sent); nothing else is retried "
        "(aiohttp, like httpx, drops a pooled connection the server already closed before "
        "reusing it). A request counts in the fault window its end falls in. "
        f"Steady state before the first fault: {len(steady)} requests, p50 "
        f"{percentile(lat, 50):.0f} ms, p99 {percentile(lat, 99):.0f} ms.\n\n"
        f"{table}\n\n"
        f"All requests: {len(samples)}, failed {total_failed}. After the faults, simultaneous "
        f"requests refused per tenant at its full concurrency ({CONCURRENCY}): {slots} "
        "(0: no slot leaked).\n\n"
        + ("Notes: " + "; ".join(f.notes) + "\n\n" if f.notes else "")
        + f"Command: `{cmd.strip()}`. Machine: {os.cpu_count()} CPU cores, "
        f"{platform.system()} {platform.release()}, Python {platform.python_version()}; "
        "every process of the fleet (and the load) shares those cores, so latencies are "
        "the noisy machine's, not a deployment's.\n"
    )
    return text


def plot(events: list[dict[str, Any]], samples: list[Sample], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    end = max((x.t1 for x in samples), default=1.0)
    bins = [i * 0.5 for i in range(int(end / 0.5) + 2)]
    ok = [x.t1 for x in samples if x.outcome == "ok"]
    bad = [x.t1 for x in samples if x.outcome != "ok"]
    fig, ax = plt.subplots(figsize=(11, 3.6))
    ax.hist(
        [ok, bad],
        bins=bins,
        stacked=True,
        label=["answered", "failed"],
        color=["#4c9a2a", "#c0392b"],
    )
    for ev in events:
        ax.axvspan(ev["t0"], ev["t1"], color="#f0c419", alpha=0.25)
        ax.text(ev["t0"], ax.get_ylim()[1] * 0.92, ev["fault"], fontsize=8, rotation=0)
    ax.set_xlabel("seconds since the start of the load")
    ax.set_ylabel("requests ended per 0.5 s")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m evals fleet", description=__doc__)
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "reports" / "fleet")
    p.add_argument("--faults", default=",".join(FAULTS))
    p.add_argument("--replicas", type=int, default=3)
    p.add_argument("--engines", type=int, default=4)
    p.add_argument("--clients", type=int, default=12)
    p.add_argument("--settle", type=float, default=3.0)
    p.add_argument("--drain", type=float, default=5.0)
    p.add_argument(
        "--redis",
        choices=("sentinel", "plain"),
        default="sentinel",
        help="plain: the gateways talk to the first master directly",
    )
    a = p.parse_args(argv)
    a.faults = a.faults.split(",")
    unknown = set(a.faults) - set(FAULTS)
    if unknown:
        p.error(f"unknown faults {sorted(unknown)}; choose from {','.join(FAULTS)}")
    return a


def main(argv: list[str]) -> int:
    a = parse(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="fleet-") as tmp:
        f = start_fleet(a, Path(tmp))
        procs: list[Proc] = [*f.redis.values(), *(p for ps in f.engines.values() for p in ps)]
        try:
            keys = make_tenants(f)
            load = Load(Balancer(f.gateways), keys, time.monotonic())
            events = schedule(f, load, a)
            slots = asyncio.run(leaked_slots(f, keys))
        finally:
            for gw in f.gateways:
                gw.proc.stop()
            for proc in procs:
                proc.stop()
    text = report(events, load.samples, slots, f, a)
    (a.out / "report.md").write_text(text)
    (a.out / "results.json").write_text(
        json.dumps(
            {"events": events, "slots_refused": slots, "samples": samples_json(load.samples)},
            indent=1,
        )
        + "\n"
    )
    plot(events, load.samples, a.out / "timeline.png")
    print(text)
    print(f"wrote {shown_path(a.out)}/report.md, results.json, timeline.png", file=sys.stderr)
    return 0
