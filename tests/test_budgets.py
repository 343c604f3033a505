"""Exact budgets across replicas: a request reserves its worst case at admission and
settles what it used at the end (streams and cancelled streams too). Real Redis (own
prefix), two gateway replicas on real sockets, fake engines."""

from __future__ import annotations

import asyncio
import http.client
import json
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from gateway.store.base import Used
from gateway.store.memory_store import MemoryStore
from gateway.store.redis_store import RedisStore
from gateway.tenancy.limits import LocalLimiter, Reserve, budget_period
from gateway.tenancy.tenants import CostBudget, Policy, TokenBudget
from tests.conftest import REDIS, Proc, rules_for_tests, start_gateway
from tests.test_tenancy import new_tenant, tenancy_env
from tests.waiting import until

pytestmark = pytest.mark.processes

TEXT = (  # 30 distinct words: 30 completion tokens at the fake engine
    "amber basil cedar delta ember fjord grove heron inlet juniper kelp lotus maple nectar "
    "onyx pearl quartz raven sage tundra umber violet willow xenon yarrow zephyr acorn birch "
    "clover dune"
)


@pytest.fixture(scope="module")
def two(
    engines: dict[str, str], prefix: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[Proc]]:
    tmp = tmp_path_factory.mktemp("budgets")
    rules = rules_for_tests(total=10.0, stall=2.0)
    procs = [start_gateway(tmp, rules, engines, tenancy_env(prefix))[0] for _ in "ab"]
    yield procs
    for p in procs:
        p.stop()


def _redis(prefix: str, what: Any) -> Any:
    async def run() -> Any:
        s = RedisStore(REDIS, prefix)
        try:
            return await what(s)
        finally:
            await s.close()

    return asyncio.run(run())


def _stream(base: str, key: str, content: str, max_tokens: int, read: int | None = None) -> int:
    """One streamed chat; ``read``: close the connection after that many events. The
    status code."""
    host, port = base.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=20)
    body = {
        "model": "auto",
        "stream": True,
        "max_tokens": max_tokens,
        "stream_options": {"include_usage": read is None},  # the engine's own count
        "messages": [{"role": "user", "content": content}],
    }
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {key}"}
    conn.request("POST", "/v1/chat/completions", json.dumps(body), headers)
    r = conn.getresponse()
    events = 0
    if r.status == 200:
        while read is None or events < read:
            line = r.readline()
            if not line or line.startswith(b"data: [DONE]"):
                break
            events += line.startswith(b"data: ")
    else:
        r.read()
    conn.close()  # mid-stream when ``read`` is set: the client went away
    return r.status


def _spent(prefix: str, tid: str) -> tuple[int, int]:
    """(tokens in the usage record, the budget counter: usage + what is still held)."""
    day = budget_period("day", time.time())

    async def read(s: RedisStore) -> tuple[int, int]:
        u = await s.usage(tid)
        counter = await s.conn.r.get(s.conn.t(tid, "budget:" + day))
        return u.prompt_tokens + u.completion_tokens, int(counter or 0)

    out: tuple[int, int] = _redis(prefix, read)
    return out


def test_two_replicas_never_overspend_by_more_than_one_reservation(
    two: list[Proc], prefix: str
) -> None:
    budget, max_tokens = 400, 40
    tid, _, key = new_tenant(two[0].admin, {"token_budget": {"tokens": budget}})
    content = f"[[*: text={TEXT}; chunks=30; gap=0.02]] tell me a story please"
    reservation = len(content) // 4 + max_tokens  # the prompt estimate + max_tokens
    urls = [p.url.removesuffix("/healthz") for p in two]
    served = 0
    with ThreadPoolExecutor(24) as ex:
        for _ in range(8):  # bursts of 24 concurrent streams, half on each replica
            codes = list(
                ex.map(lambda i: _stream(urls[i % 2], key, content, max_tokens), range(24))
            )
            assert set(codes) <= {200, 429}
            ok = codes.count(200)
            assert ok < 24  # without reservations every stream of a burst runs
            served += ok

            def spent(n: int = served) -> bool:
                return _spent(prefix, tid)[0] >= n * 40

            assert until(spent, timeout=5.0)
            if ok == 0:
                break
    used, counter = _spent(prefix, tid)
    print(f"\nbudget {budget}, reservation {reservation}: {served} streams served, used {used}")
    assert used == served * 40  # 10 prompt + 30 completion tokens each, all settled
    assert counter == used  # every reservation given back
    assert budget <= used <= budget + reservation  # spent, and by one reservation at most


def test_a_cancelled_stream_settles_what_it_used(two: list[Proc], prefix: str) -> None:
    tid, _, key = new_tenant(two[0].admin, {"token_budget": {"tokens": 100_000}})
    content = f"[[*: text={TEXT}; chunks=30; gap=0.1]] and stop early"
    url = two[1].url.removesuffix("/healthz")
    assert _stream(url, key, content, 4000, read=4) == 200
    assert until(lambda: _spent(prefix, tid)[0] > 0, timeout=5.0)
    used, counter = _spent(prefix, tid)
    u = _redis(prefix, lambda s: s.usage(tid))
    assert 0 < u.completion_tokens < 30  # the part it was sent, not the whole answer
    assert u.prompt_tokens == len(content) // 4  # the engine never said: the estimate
    assert counter == used < 4000  # settled: the reservation (4000+) is given back


def test_redis_admit_reserves_and_settle_gives_back(prefix: str) -> None:
    p = Policy(
        token_budget=TokenBudget(tokens=1000), cost_budget=CostBudget(usd=1.0, period="month")
    )

    async def run(s: RedisStore) -> None:
        tid = "t-" + uuid.uuid4().hex[:6]
        want = Reserve(600, 300_000)
        a = await s.admit(tid, "r1", p, want)
        assert a.ok and a.hold is not None and a.hold.tokens == 600
        b = await s.admit(tid, "r2", p, want)  # 600 held < 1000: admitted, now 1200 held
        assert b.ok
        c = await s.admit(tid, "r3", p, want)
        assert not c.ok and c.denied == "budget" and c.hold is None
        await s.record_usage(tid, Used("highspeed", 10, 20, None, 5000), p, a.hold)
        await s.record_usage(tid, Used("highspeed", 10, 20, None, 5000), p, b.hold)
        now = time.time()
        t = await s.conn.r.get(s.conn.t(tid, "budget:" + budget_period("day", now)))
        m = await s.conn.r.get(s.conn.t(tid, "cost:" + budget_period("month", now)))
        assert (int(t), int(m)) == (60, 10_000)
        assert (await s.admit(tid, "r4", p, want)).ok

    _redis(prefix, run)


def test_settling_twice_counts_once(prefix: str) -> None:
    """A retry after a lost reply (the script ran, the answer did not come back) must not
    count the usage twice nor give the hold back twice."""
    p = Policy(token_budget=TokenBudget(tokens=1000))

    async def run(s: RedisStore) -> None:
        tid = "t-" + uuid.uuid4().hex[:6]
        a = await s.admit(tid, "r1", p, Reserve(600, 0))
        used = Used("highspeed", 10, 20, None, 0, settle_id="adm_r1")
        await s.record_usage(tid, used, p, a.hold)
        await s.record_usage(tid, used, p, a.hold)  # the retry
        t = await s.conn.r.get(s.conn.t(tid, "budget:" + budget_period("day", time.time())))
        assert int(t) == 30

    _redis(prefix, run)


def test_local_limiter_reserves_the_same_way() -> None:
    lim = LocalLimiter()
    p = Policy(token_budget=TokenBudget(tokens=100))
    a = lim.admit("t", "r1", p, want=Reserve(80))
    b = lim.admit("t", "r2", p, want=Reserve(80))
    assert a.ok and b.ok and a.hold is not None
    assert lim.admit("t", "r3", p, want=Reserve(80)).denied == "budget"
    lim.debit("t", 5, p, 0, a.hold)
    lim.debit("t", 5, p, 0, b.hold)
    assert lim.admit("t", "r4", p, want=Reserve(80)).ok  # 10 used, 80 held


def test_memory_store_reserves_and_settles() -> None:
    async def run() -> None:
        s = MemoryStore()
        p = Policy(token_budget=TokenBudget(tokens=100))
        a = await s.admit("t", "r1", p, Reserve(90))
        assert a.ok and a.hold is not None
        assert (await s.admit("t", "r2", p, Reserve(90))).ok  # 90 held < 100
        assert not (await s.admit("t", "r3", p, Reserve(90))).ok  # 180 held
        await s.record_usage("t", Used("highspeed", 10, 5), p, a.hold)
        assert (await s.usage("t")).completion_tokens == 5

    asyncio.run(run())
