"""Judged rollouts through real processes: two gateway replicas on one Redis, fake engines
for the stable arm (tier highspeed), the canary (tier canary, an engine of its own) and the
fallback (standard). Nobody acts after the rules are uploaded: a canary whose answers fail
is rolled back (a new rules version, weight 0, by "analysis"); one that does not fail is
promoted through its steps to 100 %."""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import yaml

from gateway.rollout.runner import weights_in
from gateway.store.redis_store import RedisStore
from tests.conftest import REDIS, Proc, rules_for_tests, start_engine, start_gateway
from tests.test_tenancy import call, new_tenant, tenancy_env

pytestmark = [pytest.mark.processes, pytest.mark.slow]


def _rules(canary: float) -> dict[str, Any]:
    data = rules_for_tests()
    data["tiers"]["canary"] = dict(data["tiers"]["highspeed"])
    data["default"]["tier"] = "highspeed"
    data["default"]["fallback"] = ["standard"]
    data["default"]["split"] = [
        {"tier": "highspeed", "weight": 100 - canary, "name": "stable"},
        {"tier": "canary", "weight": canary, "name": "next"},
    ]
    data["default"]["analysis"] = {
        "baseline": "stable",
        "canary": "next",
        "steps": [20, 50, 100],
        "interval": 0.5,
        "min_samples": 20,
        # the fake engines answer in about a millisecond on a busy 2-core machine: a
        # latency ratio there is noise (the latency test has its own unit tests)
        "max_p99_ratio": 3.0,
    }
    return data


@pytest.fixture(scope="module")
def procs() -> list[Proc]:
    """The module's gateway processes (the last test kills one)."""
    return []


@pytest.fixture(scope="module")
def fleet(
    engines: dict[str, str], tmp_path_factory: pytest.TempPathFactory, procs: list[Proc]
) -> Iterator[tuple[list[str], list[str]]]:
    """(data URLs, admin URLs) of two replicas on one Redis prefix of the module's own."""
    prefix = f"gwtest:{uuid.uuid4().hex[:8]}:"
    canary, canary_url = start_engine("canary", "--model", "fake-canary")
    urls = {**engines, "canary": canary_url}
    tmp = tmp_path_factory.mktemp("rollout")
    try:
        for _ in "ab":
            procs.append(start_gateway(tmp, _rules(20), urls, tenancy_env(prefix))[0])
        yield [p.url.removesuffix("/healthz") for p in procs], [p.admin for p in procs]
    finally:
        for p in procs:
            p.stop()
        canary.stop()

        async def clean() -> None:
            s = RedisStore(REDIS, prefix)
            await s.delete_prefix()
            await s.close()

        asyncio.run(clean())


ROLLED = {"stable": 100.0, "next": 0.0}
PROMOTED = {"stable": 0.0, "next": 100.0}


def _hi() -> list[dict[str, str]]:
    return [{"role": "user", "content": "hi"}]


def _weights(admin: str) -> dict[str, float] | None:
    st, body, _ = call(admin, "GET", "/admin/rules")
    assert st == 200
    return weights_in(body["yaml"], "default")


def _drive(
    urls: list[str], key: str, failing: float, done: Callable[[], bool], timeout: float = 60
) -> tuple[int, float]:
    """Requests from 6 threads, each a user of its own (so the arms split by weight), to both
    replicas, until ``done()``; ``failing``: the share whose canary answer is a 503. How many
    were sent, and in how many seconds."""
    sent = itertools.count()
    start = time.monotonic()
    stop = start + timeout

    def one(worker: int) -> None:
        while time.monotonic() < stop and not finished:
            i = next(sent)
            bad = (i % 100) < failing * 100
            text = ("[[canary: status=503]] " if bad else "") + f"question {i}"
            body = {"model": "auto", "messages": [{"role": "user", "content": text}]}
            body["user"] = f"u{i}"
            st, _, _ = call(urls[i % 2], "POST", "/v1/chat/completions", body, key)
            assert st == 200  # the fallback answers what the canary fails

    finished = False
    with ThreadPoolExecutor(6) as pool:
        futures = [pool.submit(one, w) for w in range(6)]
        while time.monotonic() < stop and not done():
            time.sleep(0.2)
        finished = True
        for f in futures:
            f.result()
    return next(sent), time.monotonic() - start


def _upload(admin: str, canary: float) -> int:
    st, body, _ = call(admin, "PUT", "/admin/rules", raw=yaml.safe_dump(_rules(canary)).encode())
    assert st == 200, body
    return int(body["version"])


def test_a_canary_that_degrades_is_rolled_back(fleet: tuple[list[str], list[str]]) -> None:
    urls, admins = fleet
    key = new_tenant(admins[0])[2]
    start = _upload(admins[0], 20)
    n, took = _drive(urls, key, 0.4, lambda: all(_weights(a) == ROLLED for a in admins))
    print(f"\nrolled back after {n} requests, {took:.1f} s")
    assert _weights(admins[1]) == ROLLED  # the other replica's running rules
    st, versions, _ = call(admins[1], "GET", "/admin/rules/versions")
    last = versions["data"][-1]
    assert last["by"] == "analysis" and last["version"] > start and last["current"]
    st, audit, _ = call(admins[0], "GET", "/admin/audit")
    entry = next(e for e in audit["data"] if e["action"] == "rollout.rollback")
    assert entry["who"] == "analysis" and entry["target"] == f"version {last['version']}"
    st, out, _ = call(admins[1], "GET", "/admin/rollouts")
    (r,) = out["data"]
    assert r["decision"] == "rolled_back" and r["history"][-1]["action"] == "rollback"
    assert out["lease"]["holder"] is not None
    # every request goes to the baseline now
    body = {"model": "auto", "messages": [{"role": "user", "content": "after"}], "user": "u1"}
    for i in range(10):
        body["user"] = f"after{i}"
        st, _, h = call(urls[i % 2], "POST", "/v1/chat/completions", body, key)
        assert st == 200 and "arm=stable" in h["x-gateway-route"]


def test_a_canary_that_does_not_degrade_is_promoted(fleet: tuple[list[str], list[str]]) -> None:
    urls, admins = fleet
    key = new_tenant(admins[0])[2]
    start = _upload(admins[0], 20)
    n, took = _drive(urls, key, 0.0, lambda: all(_weights(a) == PROMOTED for a in admins))
    print(f"\npromoted 20 -> 50 -> 100 % after {n} requests, {took:.1f} s")
    assert _weights(admins[1]) == PROMOTED, call(admins[0], "GET", "/admin/rollouts")[1]
    st, versions, _ = call(admins[1], "GET", "/admin/rules/versions")
    steps = [v for v in versions["data"] if v["version"] > start]
    assert [v["by"] for v in steps] == ["analysis", "analysis"]  # 20 -> 50, 50 -> 100
    texts = [call(admins[0], "GET", f"/admin/rules/versions/{v['version']}")[1] for v in steps]
    assert [weights_in(t["yaml"], "default") for t in texts] == [
        {"stable": 50.0, "next": 50.0},
        {"stable": 0.0, "next": 100.0},
    ]
    st, out, _ = call(admins[0], "GET", "/admin/rollouts")
    (r,) = out["data"]
    assert r["decision"] == "complete" and r["share"] == 100
    assert [h["action"] for h in r["history"][-3:]] == ["started", "promote", "promote"]
    st, explained, _ = call(
        admins[1], "POST", "/admin/explain", {"body": {"model": "auto", "messages": _hi()}}
    )
    assert st == 200 and explained["rollout"]["decision"] == "complete"
    assert explained["settings"]["analysis"].startswith("next vs stable: 20 -> 50 -> 100 %")


def test_the_consoles_rules_page_shows_the_rollout(fleet: tuple[list[str], list[str]]) -> None:
    import http.cookiejar
    import urllib.parse
    import urllib.request

    from tests.test_tenancy import ADMIN

    admin = fleet[1][0]
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    form = urllib.parse.urlencode({"token": ADMIN, "name": "ops"}).encode()
    opener.open(f"{admin}/console/login", data=form, timeout=10).close()
    with opener.open(f"{admin}/console/rules", timeout=10) as r:
        page = r.read().decode()
    section = page[page.index('id="rollouts"') : page.index("</section>")]
    assert 'data-rule="default"' in section and 'class="pill decision' in section
    assert 'data-arm="stable"' in section and 'data-arm="next"' in section
    assert "next vs stable: 20 -&gt; 50 -&gt; 100 %" in section


def test_when_the_judging_replica_dies_the_other_takes_over(
    fleet: tuple[list[str], list[str]], procs: list[Proc]
) -> None:
    """The lease holder is killed (no goodbye): its lease expires (10 s), the survivor takes
    it and rolls a failing canary back alone."""
    urls, admins = fleet
    holder = call(admins[0], "GET", "/admin/rollouts")[1]["lease"]["holder"]
    dead = next(i for i, p in enumerate(procs) if f"/{p.p.pid}/" in holder)
    procs[dead].p.kill()
    procs[dead].p.wait()
    alive = 1 - dead
    key = new_tenant(admins[alive])[2]
    start = _upload(admins[alive], 20)
    t0 = time.monotonic()
    n, took = _drive([urls[alive]] * 2, key, 0.4, lambda: _weights(admins[alive]) == ROLLED)
    print(f"\nthe holder killed: rolled back by the other after {took:.1f} s ({n} requests)")
    assert _weights(admins[alive]) == ROLLED and time.monotonic() - t0 < 30
    out = call(admins[alive], "GET", "/admin/rollouts")[1]
    assert out["lease"]["holder"] == out["lease"]["this_replica"] != holder
    versions = call(admins[alive], "GET", "/admin/rules/versions")[1]
    assert versions["data"][-1]["by"] == "analysis" and versions["data"][-1]["version"] > start
