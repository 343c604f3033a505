"""Scheduling under load: the gateway's queue (priority bands, tenant fair share, shedding)
and rendezvous affinity; end to end through a gateway in front of an engine that lets only
N requests generate at once (tests/slot_engine.py)."""

from __future__ import annotations

import asyncio
import sys
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest

from gateway.rules.schema import Tier
from gateway.upstream.failures import QueueTimeout, Shed
from gateway.upstream.pools import Pool
from gateway.upstream.scheduler import Gate, Ticket
from tests.conftest import ROOT, Proc, free_port, rules_for_tests, start_gateway
from tests.test_tenancy import ADMIN, call, new_tenant, tenancy_env
from tests.waiting import wait_until, wait_until_async

A, B = Ticket("a", 0), Ticket("b", 0)


# -- the gate, in memory ---------------------------------------------------------------------
async def _hold(gate: Gate, t: Ticket, order: list[str], name: str, hold: float = 0.01) -> None:
    await gate.acquire(t, time.monotonic() + 5)
    order.append(name)
    await asyncio.sleep(hold)  # a request holding its slot while it is served
    gate.release(hold)


async def _queued(g: Gate, n: int) -> None:
    """Until ``n`` requests wait at the gate (each task has run up to its queueing)."""
    await wait_until_async(lambda: g.waiting == n, f"{n} waiting at the gate")


def test_unlimited_gate_never_waits() -> None:
    async def go() -> None:
        g = Gate(None)
        waits = [await g.acquire(A, time.monotonic() + 1) for _ in range(100)]
        assert waits == [0.0] * 100 and g.waiting == 0

    asyncio.run(go())


def test_tenants_share_a_band_round_robin_and_interactive_overtakes_batch() -> None:
    async def go() -> None:
        g = Gate(1)
        await g.acquire(A, time.monotonic() + 1)  # the one slot, held
        order: list[str] = []
        tasks = [asyncio.create_task(_hold(g, Ticket("a", 2), order, f"a{i}")) for i in range(5)]
        await _queued(g, 5)
        tasks += [asyncio.create_task(_hold(g, Ticket("b", 2), order, f"b{i}")) for i in range(2)]
        await _queued(g, 7)
        tasks.append(asyncio.create_task(_hold(g, Ticket("c", 0), order, "urgent")))
        await _queued(g, 8)
        assert g.saturated
        g.release(0.01)
        await asyncio.gather(*tasks)
        assert order == ["urgent", "a0", "b0", "a1", "b1", "a2", "a3", "a4"]
        assert g.busy == 0 and g.waiting == 0

    asyncio.run(go())


def test_fair_share_is_weighted_by_the_tenants_policy() -> None:
    """A tenant with share_weight 3 is served three requests per turn to another's one."""

    async def go() -> None:
        g = Gate(1)
        await g.acquire(A, time.monotonic() + 1)
        order: list[str] = []
        heavy, light = Ticket("heavy", 1, weight=3), Ticket("light", 1)
        tasks = [asyncio.create_task(_hold(g, heavy, order, f"h{i}")) for i in range(6)]
        await _queued(g, 6)
        tasks += [asyncio.create_task(_hold(g, light, order, f"l{i}")) for i in range(3)]
        await _queued(g, 9)
        g.release(0.01)
        await asyncio.gather(*tasks)
        assert order == ["h0", "h1", "h2", "l0", "h3", "h4", "h5", "l1", "l2"]
        assert g.busy == 0 and g.waiting == 0 and not g._turn

    asyncio.run(go())


def test_a_ticket_takes_the_policy_weight() -> None:
    assert Ticket.of("t", "batch", 0, 4) == Ticket("t", 2, 4)
    assert Ticket.of("t", "interactive", -1, 0).weight == 1  # never below one


def test_an_engine_that_queues_itself_makes_the_gateway_queue_instead() -> None:
    async def go() -> None:
        g = Gate(8)
        g.engine_backlog = True  # SGLang's num_queue_reqs > 0 at the last scrape
        assert await g.acquire(A, time.monotonic() + 1) == 0.0  # nothing in flight: it goes
        waiter = asyncio.create_task(g.acquire(B, time.monotonic() + 5))
        await _queued(g, 1)
        assert not waiter.done()  # 7 slots free, but the engine queues
        g.release(0.02)  # the slot passes to the waiter
        assert await waiter >= 0.0 and g.busy == 1
        g.engine_backlog = False
        assert await g.acquire(A, time.monotonic() + 1) == 0.0 and g.busy == 2

    asyncio.run(go())


def test_a_waiter_that_leaves_leaves_the_queue_and_slots_are_never_lost() -> None:
    async def go() -> None:
        g = Gate(1)
        await g.acquire(A, time.monotonic() + 1)
        gone = asyncio.create_task(g.acquire(B, time.monotonic() + 5))
        await _queued(g, 1)
        gone.cancel()
        await asyncio.gather(gone, return_exceptions=True)
        assert g.waiting == 0
        # handed the slot and cancelled before it ran: the slot passes on
        late = asyncio.create_task(g.acquire(B, time.monotonic() + 5))
        nxt = asyncio.create_task(g.acquire(A, time.monotonic() + 5))
        await _queued(g, 2)
        g.release(None)
        late.cancel()
        await asyncio.gather(late, return_exceptions=True)
        assert await nxt >= 0 and g.busy == 1 and g.waiting == 0
        with pytest.raises(QueueTimeout):  # bounded by its budget
            await g.acquire(B, time.monotonic() + 0.05)
        assert g.waiting == 0
        g.release(None)
        assert g.busy == 0

    asyncio.run(go())


def test_shedding_refuses_at_once_and_batch_goes_first() -> None:
    async def go() -> None:
        g = Gate(2, max_queue=3)
        g.service_s = 1.0
        for _ in range(2):
            await g.acquire(A, time.monotonic() + 1)
        t0 = time.monotonic()
        with pytest.raises(Shed) as e:  # ~1 s ahead, 0.5 s left
            await g.acquire(A, time.monotonic() + 0.5)
        assert e.value.retry_after == 1.0
        # at once: waiting first would take the 0.5 s budget (and end as a queue_timeout)
        assert time.monotonic() - t0 < 0.25
        batch = [
            asyncio.create_task(g.acquire(Ticket("x", 2), time.monotonic() + 60)) for _ in "xyz"
        ]
        await _queued(g, 3)  # full: an interactive arrival sheds the newest batch waiter
        urgent = asyncio.create_task(g.acquire(B, time.monotonic() + 60))
        await wait_until_async(batch[2].done, "the newest batch waiter shed")
        assert isinstance(batch[2].exception(), Shed)
        with pytest.raises(Shed):  # a batch arrival into a full queue: refused
            await g.acquire(Ticket("y", 2), time.monotonic() + 60)
        assert g.shed == 3
        g.release(1.0)
        await urgent  # the interactive one got the first free slot
        for t in batch[:2]:
            t.cancel()
        await asyncio.gather(*batch, return_exceptions=True)
        assert g.waiting == 0

    asyncio.run(go())


# -- rendezvous affinity ---------------------------------------------------------------------
def _pool(n: int) -> Pool:
    urls = tuple(f"http://engine-{i}:30000" for i in range(n))
    return Pool.create("hs", Tier(endpoints=urls, model="m"))


def test_rendezvous_is_the_same_everywhere_and_moves_only_a_leavers_share() -> None:
    one, two = _pool(8), _pool(8)
    keys = range(0, 4000 * 7919, 7919)
    first = {k: one.choose(k).url for k in keys}
    assert first == {k: two.choose(k).url for k in keys}  # another gateway replica agrees
    spread = Counter(first.values())
    assert len(spread) == 8 and min(spread.values()) > 4000 / 8 * 0.8
    seven = _pool(8)
    seven.replicas[3].up = False
    moved = [k for k in keys if seven.choose(k).url != first[k]]
    assert all(first[k].endswith("engine-3:30000") for k in moved)
    assert len(moved) == spread["http://engine-3:30000"]


def test_bounded_load_skips_a_replica_over_its_share() -> None:
    p = _pool(4)
    home = p.choose(42)
    home.in_flight = 10
    moved = p.choose(42)
    assert moved is not home  # 10 + 1 > 2 x (1 + 1.0) x (0 + 1): far over the others' load
    home.in_flight = 1
    # Since the prefix index (issue 44) both engines hold the prompt's head: it goes to
    # the less loaded of them, never a third; a gateway replica that never routed it
    # still sends it home.
    assert p.choose(42) is moved
    # From its fourth request the key is known to come back: it follows where it last
    # went (its cache) while that replica stays within its bound, then leaves it.
    home.in_flight, moved.in_flight = 0, 1
    assert p.choose(42) is moved
    moved.in_flight = 10
    assert p.choose(42) is home
    assert _pool(4).choose(42).url == home.url


# -- end to end ------------------------------------------------------------------------------
SLOTS, SERVICE = 4, 0.1
TIGHT = 0.4  # a deadline A's queue (~1.1 s) cannot meet: refused at once


@pytest.fixture(scope="module")
def slot_engine() -> Iterator[str]:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    argv = [sys.executable, str(ROOT / "tests" / "slot_engine.py"), "--port", str(port)]
    proc = Proc([*argv, "--slots", str(SLOTS), "--service", str(SERVICE)], f"{base}/health")
    yield base
    proc.stop()


@pytest.fixture(scope="module")
def gw(slot_engine: str, prefix: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    rules = rules_for_tests(ttft=3.0, total=5.0)
    rules["rules"] = []
    rules["default"] = {"tier": "highspeed", "fallback": [], "checks": ["non_empty"]}
    rules["tiers"]["highspeed"]["max_concurrency"] = SLOTS
    rules["sla_classes"]["tight"] = {"deadline": TIGHT, "ttft_budget": TIGHT}
    urls = {"highspeed": slot_engine, "standard": slot_engine}
    env = {**tenancy_env(prefix), "GATEWAY_UNREADY_WHEN_SATURATED": "true"}
    proc, url = start_gateway(tmp_path_factory.mktemp("gw"), rules, urls, env)
    yield proc, url
    proc.stop()


async def _post(s: aiohttp.ClientSession, url: str, key: str, tag: str, sla: str) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {key}", "x-gateway-sla": sla}
    body = {"model": "auto", "messages": [{"role": "user", "content": tag}]}
    t0 = time.monotonic()
    async with s.post(f"{url}/v1/chat/completions", json=body, headers=headers) as r:
        await r.read()
        return {"status": r.status, "s": time.monotonic() - t0, "h": dict(r.headers)}


async def _flood(gw: Any, key_a: str, key_b: str, sla_a: str, sla_b: str) -> dict[str, Any]:
    """Tenant A keeps 48 requests in flight; meanwhile B sends 12 one after another, then
    one request that cannot meet its deadline."""
    from tests.test_tenancy import ADMIN

    proc, url = gw
    done_a: list[dict[str, Any]] = []
    stop = asyncio.Event()
    async with aiohttp.ClientSession() as s:

        async def a_worker(i: int) -> None:
            n = 0
            while not stop.is_set():
                done_a.append(await _post(s, url, key_a, f"a{i}-{n}", sla_a))
                n += 1

        async def a_queued() -> bool:
            async with s.get(f"{proc.admin}/admin/pools", headers=_bearer(ADMIN)) as r:
                waiting: int = (await r.json())["tiers"]["highspeed"]["queue"]["waiting"]
            return waiting >= 32  # most of A's 48 (4 generate, the rest queue)

        workers = [asyncio.create_task(a_worker(i)) for i in range(48)]
        await wait_until_async(a_queued, "A's queue built up", interval=0.02)
        b = [await _post(s, url, key_b, f"b{i}", sla_b) for i in range(12)]
        tight = await _post(s, url, key_b, "tight", "tight")
        stop.set()
        await asyncio.gather(*workers)
        async with s.get(f"{url}/metrics") as r:
            metrics = await r.text()
    return {"a": done_a, "b": b, "tight": tight, "metrics": metrics}


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _queue_ms(replies: list[dict[str, Any]]) -> list[float]:
    """The gateway's own count of each reply's time in its queue, sorted."""
    return sorted(float(r["h"].get("x-gateway-queue-ms", 0)) for r in replies)


@pytest.mark.processes
def test_b_is_not_stuck_behind_a_and_hopeless_requests_are_refused(gw: Any) -> None:
    proc, _ = gw
    _, _, key_a = new_tenant(proc.admin)
    _, _, key_b = new_tenant(proc.admin)
    out = asyncio.run(_flood(gw, key_a, key_b, "interactive", "interactive"))
    a, b = out["a"], out["b"]
    assert a and all(r["status"] == 200 for r in a), Counter(r["status"] for r in a)
    assert all(r["status"] == 200 for r in b)
    b_queue, a_queue = _queue_ms(b), _queue_ms(a)
    p95, a_median = b_queue[int(len(b_queue) * 0.95) - 1], a_queue[len(a_queue) // 2]
    print(f"\nB P95 queue {p95:.0f} ms; A median queue {a_median:.0f} ms")
    assert a_median > 600  # A waits behind its own requests (~1.1 s: 44 ahead, 4 slots)
    # B waits for the next free slot, not behind A's queue: a fraction of A's wait, on an
    # idle machine or a busy one (both stretch with the service time)
    assert p95 < a_median / 3
    t = out["tight"]
    assert t["status"] == 429 and int(t["h"]["Retry-After"]) >= 1
    assert t["s"] < TIGHT  # at once: waiting would take its deadline (and end in a 504)
    assert 'gateway_shed_total{tier="highspeed"}' in out["metrics"]
    assert "gateway_queue_wait_seconds" in out["metrics"]


@pytest.mark.processes
def test_interactive_overtakes_queued_batch(gw: Any) -> None:
    proc, _ = gw
    _, _, key = new_tenant(proc.admin)
    out = asyncio.run(_flood(gw, key, key, "batch", "interactive"))
    assert all(r["status"] == 200 for r in out["a"])
    worst, batch_median = max(_queue_ms(out["b"])), _queue_ms(out["a"])[len(out["a"]) // 2]
    # one tenant: its interactive requests go first, the batch ones wait behind each other
    assert worst < batch_median / 3, (worst, batch_median)


OPERATOR = {"Authorization": f"Bearer {ADMIN}"}  # /readyz's detail


@pytest.mark.processes
def test_readyz_reports_saturation(gw: Any) -> None:
    _, url = gw

    async def go() -> dict[str, Any]:
        async with aiohttp.ClientSession() as s:
            _, _, key = new_tenant(gw[0].admin)
            tasks = [asyncio.create_task(_post(s, url, key, f"r{i}", "batch")) for i in range(20)]

            async def saturated() -> dict[str, Any] | None:
                async with s.get(f"{url}/readyz", headers=OPERATOR) as r:
                    body: dict[str, Any] = await r.json()
                    body["status"] = r.status
                return body if body["saturated"] or all(t.done() for t in tasks) else None

            # 20 requests, 4 slots of 0.1 s: ~0.4 s of queue to see it in
            body: dict[str, Any] = await wait_until_async(
                saturated, "/readyz while 20 wait", interval=0.01
            )
            await asyncio.gather(*tasks)
            async with s.get(f"{url}/readyz", headers=OPERATOR) as r:
                body["after"] = await r.json()
                body["after"]["status"] = r.status
            return body

    body = asyncio.run(go())
    assert body["saturated"] is True and body["saturated_tiers"]["highspeed"] is True
    assert body["status"] == 503  # GATEWAY_UNREADY_WHEN_SATURATED: a load balancer's signal
    assert body["after"]["saturated"] is False and body["after"]["status"] == 200


def test_evals_sched_runs_small(tmp_path: Any) -> None:
    from evals.sched import affinity, choosers
    from evals.sched import run as sched

    a = sched.parse(["--out", str(tmp_path), "--chats", "8", "--turns", "2", "--repeats", "1"])
    row = asyncio.run(affinity.measure("rendezvous", a))
    assert row["requests"] == 16 and 0 < row["hit_rate"] < 1
    assert row["moved_when_one_leaves"] < 0.2  # only the leaver's share moves
    share = choosers.moved("modulo", 8)  # None only for a policy it does not know
    assert share is not None and share > 0.5


@pytest.mark.processes
def test_clients_that_leave_while_queued_leave_the_queue(gw: Any) -> None:
    from tests.test_tenancy import ADMIN

    proc, url = gw
    _, _, key = new_tenant(proc.admin)
    headers = {"Authorization": f"Bearer {key}", "x-gateway-sla": "batch"}

    async def go() -> tuple[list[Any], int, str]:
        body = {"model": "auto", "messages": [{"role": "user", "content": "x"}]}
        quick = aiohttp.ClientTimeout(total=0.3)
        async with aiohttp.ClientSession(timeout=quick) as s:

            async def leaver() -> None:
                async with s.post(f"{url}/v1/chat/completions", json=body, headers=headers) as r:
                    await r.read()

            out = await asyncio.gather(*(leaver() for _ in range(30)), return_exceptions=True)
        async with aiohttp.ClientSession() as s:
            stream = {**body, "stream": True}
            async with s.post(f"{url}/v1/chat/completions", json=stream, headers=headers) as r:
                text = await r.text()
            return out, r.status, text

    out, status, text = asyncio.run(go())
    assert sum(isinstance(e, TimeoutError) for e in out) >= 20  # most left while queued
    assert status == 200 and "[DONE]" in text

    def every_slot_back() -> bool:
        _, pools, _ = call(proc.admin, "GET", "/admin/pools", token=ADMIN)
        q = pools["tiers"]["highspeed"]["queue"]
        return bool(q["waiting"] == 0 and q["in_flight"] == 0)

    wait_until(every_slot_back, "every slot back", interval=0.05)


def test_a_hedge_answer_that_does_not_win_gives_its_slot_back() -> None:
    from gateway.dispatch.hedge import race

    class Opened:
        dropped = False

        def discard(self) -> None:
            self.dropped = True

    a, b = Opened(), Opened()

    async def go() -> int:
        both = asyncio.Event()

        async def first() -> Opened:
            await both.wait()
            return a

        async def second() -> Opened:
            both.set()  # both finish in the same turn of the loop
            return b

        won, fired, _ = await race(first, second, asyncio.Event(), 0.01, lambda: True)
        assert fired
        return won

    won = asyncio.run(go())
    assert (a.dropped, b.dropped) == ((False, True) if won == 0 else (True, False))
