"""Each process's share of a tenant's limits while the store is unreachable, and the
heartbeat that counts the processes (on a real Redis)."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from gateway.access.fleet import BEAT_TTL_MS, FleetCount
from gateway.store.memory_store import MemoryStore
from gateway.store.redis_store import RedisStore
from gateway.tenancy.tenants import CostBudget, Policy, TokenBudget
from tests.conftest import REDIS, free_port


@pytest.mark.parametrize(
    ("policy", "processes", "share"),
    [
        (Policy(requests_per_minute=20), 1, Policy(requests_per_minute=20)),
        (Policy(requests_per_minute=20), 2, Policy(requests_per_minute=10)),
        (Policy(requests_per_minute=20), 3, Policy(requests_per_minute=7)),  # rounded up
        (Policy(requests_per_minute=2), 5, Policy(requests_per_minute=1)),  # at least 1
        (
            Policy(tokens_per_minute=1000, max_concurrent_requests=16, fail_closed=False),
            4,
            Policy(tokens_per_minute=250, max_concurrent_requests=4, fail_closed=False),
        ),
        (
            Policy(token_budget=TokenBudget(tokens=999, period="month")),
            2,
            Policy(token_budget=TokenBudget(tokens=500, period="month")),
        ),
        (
            Policy(cost_budget=CostBudget(usd=3.0)),
            4,
            Policy(cost_budget=CostBudget(usd=0.75)),
        ),
        (
            Policy(allowed_tiers=("standard",), shadow_rate=0.5),
            3,
            Policy(allowed_tiers=("standard",), shadow_rate=0.5),  # no limits: nothing to share
        ),
    ],
)
def test_a_process_share_of_each_limit(policy: Policy, processes: int, share: Policy) -> None:
    fleet = FleetCount(None)
    fleet.processes = processes
    assert fleet.share(policy) == share


def test_the_heartbeat_counts_the_processes_sharing_a_redis() -> None:
    prefix = f"gwtest:{uuid.uuid4().hex[:8]}:"

    async def scenario() -> list[list[int]]:
        stores = [RedisStore(REDIS, prefix) for _ in range(3)]
        fleets = [FleetCount(s) for s in stores]
        seen = []
        try:
            for f in fleets:
                await f.beat()
            seen.append([f.processes for f in fleets])  # each counted the ones before it
            for f in fleets:
                await f.beat()
            seen.append([f.processes for f in fleets])
            await fleets[0].close()  # leaves: the others count one fewer at their next beat
            for f in fleets[1:]:
                await f.beat()
            seen.append([f.processes for f in fleets[1:]])
            ttl = await stores[1]._c.r.pttl(stores[1]._c.k("fleet"))
            assert 0 < ttl <= BEAT_TTL_MS  # a fleet that stops leaves no key behind
        finally:
            await stores[2].delete_prefix()
            for s in stores:
                await s.close()
        return seen

    assert asyncio.run(scenario()) == [[1, 2, 3], [3, 3, 3], [2, 2]]


def test_a_store_that_does_not_answer_keeps_the_last_count() -> None:
    async def scenario() -> int:
        store = RedisStore(f"redis://127.0.0.1:{free_port()}/0", "gwtest:", timeout=0.2)
        fleet = FleetCount(store)
        fleet.processes = 5
        try:
            await fleet.beat()
        finally:
            await store.close()
        return fleet.processes

    assert asyncio.run(scenario()) == 5


def test_an_in_process_store_is_one_process() -> None:
    async def scenario() -> int:
        fleet = FleetCount(MemoryStore())
        await fleet.beat()
        return fleet.processes

    assert asyncio.run(scenario()) == 1
