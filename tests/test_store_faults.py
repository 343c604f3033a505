"""A failing store under load, through a real gateway process: a Sentinel failover, a Cluster
node restart, a master that becomes a replica (role swap), a stalled Redis, Redis stopped
and started again, and a gateway killed while it holds slots. Every Redis is a process of
the test's own, on free ports; the load is real clients in a thread of their own.

What must hold: no 500, no request past its deadline, no leaked slot; ``/readyz`` and
``/metrics`` say the store is degraded while it is; known keys keep being served per
their policy's ``fail_closed``; the usage of the outage is written when the store returns.
"""

from __future__ import annotations

import contextlib
import json
import re
import signal
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Proc, rules_for_tests, start_gateway
from tests.load_clients import Load
from tests.redis_procs import (
    RedisProc,
    cluster_ok,
    redis_procs,
    sentinel_master,
    start_cluster,
    start_sentinel_rig,
    wait_for,
)
from tests.test_tenancy import ADMIN, call, chat, new_tenant, tenancy_env

pytestmark = [pytest.mark.processes, pytest.mark.slow]

DEADLINE = 30.0  # the interactive SLA's deadline: no request may take longer


def readyz(base: str) -> dict[str, Any]:
    """The detail, for the admin token (the public answer says ready or not)."""
    req = urllib.request.Request(f"{base}/readyz", headers={"Authorization": f"Bearer {ADMIN}"})
    with urllib.request.urlopen(req, timeout=5) as r:
        body: dict[str, Any] = json.loads(r.read())
        return body


def store_state(base: str) -> str:
    return str(readyz(base)["store"]["state"])


def metric(base: str, name: str) -> float:
    with urllib.request.urlopen(f"{base}/metrics", timeout=5) as r:
        text = r.read().decode()
    total = 0.0
    for m in re.finditer(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, re.M):
        total += float(m.group(1))
    return total


def inflight(redis: RedisProc, prefix: str, tenant: str) -> int:
    """Slots of ``tenant`` still leased (expired ones are not counted)."""
    now_ms = int(time.time() * 1000)
    return int(redis.cli("zcount", f"{prefix}{{{tenant}}}:inflight", str(now_ms), "+inf") or 0)


def tenant_eventually(proc: Proc, policy: dict[str, Any] | None = None) -> tuple[str, str, str]:
    """A new tenant, once the store takes writes: on this busy machine a starved event loop
    can time out a few calls in a row, which opens the breaker again for a moment."""
    out: list[tuple[str, str, str]] = []

    def created() -> bool:
        out.append(new_tenant(proc.admin, policy))
        return True

    assert wait_for(created, timeout=15), store_lines(proc)
    return out[0]


def store_lines(proc: Proc) -> list[str]:
    """What the gateway said of the store (for a failure's message)."""
    return [line for line in proc.log().splitlines() if "store" in line][-10:]


def assert_served(load: Load, proc: Proc) -> None:
    """No 500 and no hang: every answer came, in time, and the log has no stack trace."""
    statuses = load.statuses()
    assert 500 not in statuses and 0 not in statuses, statuses
    assert max(r.took for r in load.results) < DEADLINE
    assert "Traceback" not in proc.log()
    print("STORE LINES", store_lines(proc))


def test_sentinel_failover_under_load(engines: dict[str, str], tmp_path: Path) -> None:
    """The master killed: the sentinels promote the replica, the gateway follows it without a
    restart; meanwhile known keys are served from what this replica knows."""
    with redis_procs() as procs:
        master, replica, url = start_sentinel_rig(tmp_path, procs)
        prefix = "gwsent:"
        proc, base = start_gateway(tmp_path, rules_for_tests(), engines, tenancy_env(prefix, url))
        try:
            policy = {"max_concurrent_requests": 16, "requests_per_minute": 100_000}
            tenant, _, key = new_tenant(proc.admin, policy)
            with Load([base], [key], clients=8) as load:
                assert wait_for(lambda: load.count() >= 30)
                master.kill()
                assert wait_for(lambda: sentinel_master(url) == replica.port, timeout=20)
                assert wait_for(lambda: call(proc.admin, "GET", "/admin/tenants")[0] == 200, 20)
                back = time.monotonic()
                assert wait_for(lambda: load.count(since=back) >= 30, timeout=20)
            assert_served(load, proc)
            assert load.statuses() == {200: len(load.results)}
            assert wait_for(lambda: store_state(base) == "ok", timeout=10), store_lines(proc)
            fresh, _, key2 = tenant_eventually(proc, {"requests_per_minute": 3})
            assert replica.cli("exists", f"{prefix}{{{fresh}}}:tenant") == "1"  # the new master
            assert [chat(base, key2)[0] for _ in range(5)] == [200, 200, 200, 429, 429]
            assert wait_for(lambda: inflight(replica, prefix, tenant) == 0, timeout=15)
        finally:
            proc.stop()


def test_role_swap_is_degraded_not_500(engines: dict[str, str], tmp_path: Path) -> None:
    """The gateway's Redis becomes a replica under load (what a failover does to a client
    that still holds the old master): no 500, /readyz degraded while writes fail, one log
    line each way, normal again once the master is writable."""
    with redis_procs() as procs:
        a = RedisProc(tmp_path)
        procs.append(a)
        b = RedisProc(tmp_path, "--replicaof", "127.0.0.1", str(a.port))
        procs.append(b)
        assert wait_for(lambda: "master_link_status:up" in b.cli("info", "replication"))
        prefix = "gwswap:"
        proc, base = start_gateway(tmp_path, rules_for_tests(), engines, tenancy_env(prefix, a.url))
        try:
            policy = {"max_concurrent_requests": 64, "requests_per_minute": 100_000}
            tenant, _, key = new_tenant(proc.admin, policy)
            with Load([base], [key], clients=8) as load:
                assert wait_for(lambda: load.count() >= 30)
                b.cli("replicaof", "no", "one")
                a.cli("replicaof", "127.0.0.1", str(b.port))
                assert wait_for(lambda: store_state(base) == "degraded", timeout=10)
                reason = readyz(base)["store"]["reason"]
                st, body, _ = call(proc.admin, "POST", "/admin/tenants", {"name": "x"})
                assert st == 503 and body["error"]["code"] == "store_unavailable"
                assert "127.0.0.1" not in body["error"]["message"]
                assert str(a.port) not in body["error"]["message"]
                swapped = time.monotonic()
                assert wait_for(lambda: load.count(since=swapped) >= 30, timeout=20)
                a.cli("replicaof", "no", "one")
                b.cli("replicaof", "127.0.0.1", str(a.port))
                assert wait_for(lambda: store_state(base) == "ok", timeout=15)
                back = time.monotonic()
                assert wait_for(lambda: load.count(since=back) >= 30, timeout=20)
            assert_served(load, proc)
            assert load.statuses() == {200: len(load.results)}
            assert reason in ("read-only replica", "loading its data")
            log = proc.log()
            assert 1 <= log.count("store degraded:") <= 3 and log.count("store back after") >= 1
            assert wait_for(lambda: inflight(a, prefix, tenant) == 0, timeout=15)
        finally:
            proc.stop()


def test_a_stalled_store_is_skipped_not_waited_for(engines: dict[str, str], tmp_path: Path) -> None:
    """CLIENT PAUSE: the first calls time out and open the breaker; the requests after them
    do not wait for Redis (refused at once), /readyz says degraded; an admission Redis runs
    after the pause, when its caller has given up, takes no slot."""
    with redis_procs() as procs:
        r = RedisProc(tmp_path)
        procs.append(r)
        prefix = "gwstall:"
        proc, base = start_gateway(tmp_path, rules_for_tests(), engines, tenancy_env(prefix, r.url))
        try:
            tenant, _, key = new_tenant(proc.admin, {"max_concurrent_requests": 64})
            with Load([base], [key], clients=8) as load:
                assert wait_for(lambda: load.count() >= 30)
                r.cli("client", "pause", "4000", "ALL")
                paused = time.monotonic()
                assert wait_for(lambda: store_state(base) == "degraded", timeout=10)
                assert readyz(base)["store"]["reason"] == "timed out"
                assert wait_for(lambda: store_state(base) == "ok", timeout=15)
                back = time.monotonic()
                while_paused = load.count(since=paused) - load.count(since=back)
                assert wait_for(lambda: load.count(since=back) >= 30, timeout=20)
            assert_served(load, proc)
            timed_out = metric(base, "gateway_store_errors_total")
            refused = metric(base, "gateway_store_refused_total")
            assert refused > timed_out  # most calls never waited for the stalled Redis
            assert while_paused > timed_out  # requests went on while Redis stood still
            assert wait_for(lambda: inflight(r, prefix, tenant) == 0, timeout=5)  # < one lease
        finally:
            proc.stop()


def test_cluster_node_restart_under_load(engines: dict[str, str], tmp_path: Path) -> None:
    """A three-master Cluster, one node restarted under load: no 500, limits hold on every
    shard afterwards, no slot left behind."""
    with redis_procs() as procs:
        nodes, url = start_cluster(tmp_path, procs)
        prefix = "gwclu:"
        proc, base = start_gateway(tmp_path, rules_for_tests(), engines, tenancy_env(prefix, url))
        try:
            policy = {"max_concurrent_requests": 16, "requests_per_minute": 100_000}
            tenants = [new_tenant(proc.admin, policy) for _ in range(4)]
            with Load([base], [k for _, _, k in tenants], clients=8) as load:
                assert wait_for(lambda: load.count() >= 30)
                nodes[0].restart()
                assert wait_for(lambda: all(cluster_ok(n) for n in nodes), timeout=20)
                assert wait_for(lambda: store_state(base) == "ok", timeout=15)
                back = time.monotonic()
                assert wait_for(lambda: load.count(since=back) >= 30, timeout=20)
            assert_served(load, proc)
            assert set(load.statuses()) == {200}
            _, _, limited = tenant_eventually(proc, {"requests_per_minute": 3})
            assert [chat(base, limited)[0] for _ in range(5)] == [200, 200, 200, 429, 429]

            def leased() -> int:
                total = 0
                for tid, _, _ in tenants:
                    key = f"{prefix}{{{tid}}}:inflight"
                    slot = int(nodes[0].cli("cluster", "keyslot", key))
                    owner = next(n for n in nodes if _owns(n, slot))
                    total += inflight(owner, prefix, tid)
                return total

            assert wait_for(lambda: leased() == 0, timeout=15)
        finally:
            proc.stop()


def _owns(node: RedisProc, slot: int) -> bool:
    for line in node.cli("cluster", "nodes").splitlines():
        fields = line.split()
        if "myself" in fields[2]:
            for span in fields[8:]:
                lo, _, hi = span.partition("-")
                if lo.isdigit() and int(lo) <= slot <= int(hi or lo):
                    return True
    return False


def test_redis_stopped_under_load_serves_per_policy_and_reconciles(
    engines: dict[str, str], tmp_path: Path
) -> None:
    """Redis killed under load: known fail-open keys keep answering 200 (their limits are
    this replica's own), fail-closed and unknown keys get 503, admin calls 503 without the
    Redis address, no call waits; Redis back (from its AOF): everything works again and the
    usage of the outage is written, once."""
    with redis_procs() as procs:
        r = RedisProc(tmp_path, "--appendonly", "yes", "--appendfsync", "always")
        procs.append(r)
        prefix = "gwstop:"
        proc, base = start_gateway(tmp_path, rules_for_tests(), engines, tenancy_env(prefix, r.url))
        try:
            open_t, _, open_key = new_tenant(proc.admin, {"requests_per_minute": 100_000})
            closed_t, _, closed_key = new_tenant(proc.admin, {"fail_closed": True})
            _, _, limited = new_tenant(proc.admin, {"requests_per_minute": 4})
            _, _, strict = new_tenant(proc.admin, {"requests_per_minute": 4, "fail_closed": True})
            _, _, unseen = new_tenant(proc.admin)
            for k in (open_key, closed_key, limited, strict):
                assert chat(base, k)[0] == 200  # seen by this replica
            with Load([base], [open_key, closed_key], clients=8) as load:
                assert wait_for(lambda: load.count() >= 30)
                r.kill()
                assert wait_for(lambda: store_state(base) == "degraded", timeout=10)
                down = time.monotonic()
                assert wait_for(lambda: load.count(since=down) >= 40, timeout=20)
                assert set(load.statuses(open_key, since=down)) == {200}
                assert set(load.statuses(closed_key, since=down)) == {503}
                st, body, _ = chat(base, unseen)
                assert st == 503 and body["error"]["code"] == "store_unavailable"
                # fail-open: this replica's own limit, counted from the outage on (4 of 4);
                # fail-closed: 503
                assert [chat(base, limited)[0] for _ in range(5)] == [200] * 4 + [429]
                assert [chat(base, strict)[0] for _ in range(2)] == [503, 503]
                st, body, _ = call(proc.admin, "GET", "/admin/tenants")
                assert st == 503 and str(r.port) not in body["error"]["message"]
                assert metric(base, "gateway_store_degraded") == 1
                assert metric(base, "gateway_usage_unsettled") > 0
                r.start()
                assert wait_for(lambda: store_state(base) == "ok", timeout=15)
                back = time.monotonic()
                assert wait_for(lambda: load.count(since=back) >= 30, timeout=20)
            assert_served(load, proc)
            assert chat(base, unseen)[0] == 200 and chat(base, closed_key)[0] == 200
            # answered: the load's 200s, the first request of each, the closed key's last one
            answered = {
                open_t: load.statuses(open_key).get(200, 0) + 1,
                closed_t: load.statuses(closed_key).get(200, 0) + 2,
            }
            assert wait_for(
                lambda: {t: _requests(proc, t) for t in answered} == answered, timeout=10
            ), ({t: _requests(proc, t) for t in answered}, answered)
            assert metric(base, "gateway_usage_unsettled") == 0
        finally:
            proc.stop()


def test_during_an_outage_each_replica_admits_its_share_of_a_limit(
    engines: dict[str, str], tmp_path: Path
) -> None:
    """Two replicas share a fail-open tenant's 20 requests/minute. Redis killed: each
    replica's own limiter admits its share (10, the last count of processes kept), so the
    pair admits 20 over the outage, not 20 each."""
    with redis_procs() as procs:
        r = RedisProc(tmp_path)
        procs.append(r)
        env = tenancy_env("gwshare:", r.url)
        a, a_url = start_gateway(tmp_path, rules_for_tests(), engines, env)
        b, b_url = start_gateway(tmp_path, rules_for_tests(), engines, env)
        urls = (a_url, b_url)
        try:
            _, _, key = new_tenant(a.admin, {"requests_per_minute": 20})
            assert [chat(url, key)[0] for url in urls] == [200, 200]  # the key known to both
            assert wait_for(
                lambda: [metric(url, "gateway_fleet_processes") for url in urls] == [2, 2],
                timeout=15,
            )
            r.kill()
            got = [[chat(url, key)[0] for _ in range(12)] for url in urls]
            assert got == [[200] * 10 + [429] * 2] * 2
            assert [metric(url, "gateway_fleet_processes") for url in urls] == [2, 2]
        finally:
            a.stop()
            b.stop()


def _requests(proc: Proc, tenant: str) -> int:
    st, body, _ = call(proc.admin, "GET", f"/admin/tenants/{tenant}/usage")
    return int(body.get("requests", 0)) if st == 200 else -1


def test_a_killed_gateways_slots_come_back_within_a_lease(
    engines: dict[str, str], tmp_path: Path
) -> None:
    """kill -9 of a gateway holding all of a tenant's slots: nobody renews them, and the
    tenant has its full concurrency again on another replica within one lease (10 s)."""
    with redis_procs() as procs:
        r = RedisProc(tmp_path)
        procs.append(r)
        prefix = "gwkill:"
        rules = rules_for_tests(total=20.0, ttft=20.0, stall=20.0)
        env = tenancy_env(prefix, r.url)
        doomed, doomed_url = start_gateway(tmp_path, rules, engines, env)
        other, other_url = start_gateway(tmp_path, rules, engines, env)
        try:
            tenant, _, key = new_tenant(other.admin, {"max_concurrent_requests": 4})
            threads = [
                threading.Thread(target=_quietly, args=(doomed_url, key), daemon=True)
                for _ in range(4)
            ]
            for t in threads:
                t.start()
            assert wait_for(lambda: inflight(r, prefix, tenant) == 4, timeout=10)
            assert chat(other_url, key)[0] == 429  # all four held by the doomed replica
            doomed.p.send_signal(signal.SIGKILL)
            doomed.p.wait()
            killed = time.monotonic()
            assert wait_for(lambda: inflight(r, prefix, tenant) == 0, timeout=30)
            freed_after = time.monotonic() - killed
            assert _at_once(other_url, key, 4) == [200] * 4
            assert freed_after < 30
        finally:
            doomed.stop()
            other.stop()


def _quietly(base: str, key: str) -> None:
    """A long request to a gateway that will be killed under it."""
    with contextlib.suppress(OSError):
        chat(base, key, "[[*: delay=15]]")


def _at_once(base: str, key: str, n: int) -> list[int]:
    out: list[int] = []
    threads = [
        threading.Thread(target=lambda: out.append(chat(base, key, "[[*: delay=0.5]]")[0]))
        for _ in range(n)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return sorted(out)
