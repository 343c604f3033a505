"""The Redis cache store against a real Redis: a tenant's bound and eviction order, expiry,
the semantic index's bound, purge, cluster-safe keys; and a Redis that dies under a
gateway, which then answers without its cache, never with an error."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import uuid
from collections.abc import Iterator

import openai
import pytest

from gateway.cache.redis_backend import RedisBackend
from tests.conftest import REDIS, free_port, start_gateway
from tests.test_cache import ask, base, cached_rules, client, counted, marker, reached
from tests.test_tenancy import new_tenant, tenancy_env

pytestmark = pytest.mark.processes

_ = counted  # this module's engines: the fixture of tests.test_cache


def test_the_redis_store_bounds_expires_and_purges_a_tenants_cache() -> None:
    import redis.asyncio as redis

    prefix = f"gwtest:{uuid.uuid4().hex[:8]}:"

    async def run() -> None:
        r = redis.Redis.from_url(REDIS)
        b = RedisBackend(r, prefix, 0.5, tenant_max_bytes=2000)
        v = b"x" * 900
        try:
            for i, k in enumerate("abc"):
                put = await b.put("t1", k, v, 1e10 + i)  # "a" expires first
            assert put.evicted == 1 and put.size == 1800
            assert await b.get("t1", "a", 0) is None and await b.get("t1", "c", 0) == v
            assert await b.get("t2", "c", 0) is None  # another tenant's keys
            assert (await b.put("t1", "big", b"x" * 2001, 1e10)).size == -1
            await b.put("t1", "soon", b"y" * 10, 5.0)
            assert await b.get("t1", "soon", 6.0) is None  # expired: a miss, and dropped
            u = await b.usage("t1")
            assert (u.entries, u.bytes) == (2, 1800)
            assert [k for k, _ in await b.entries("t1", 10)] == ["c", "b"]
            assert await b.delete("t1", "b") and not await b.delete("t1", "b")
            for i in range(4):
                await b.put("t1", f"k{i}", b"v", 1e10 + i)
                assert await b.add_vector("t1", "s1", f"k{i}", b"rec", keep=2)
            assert [k for k, _ in await b.vectors("t1", "s1", 0, 10)] == ["k2", "k3"]
            assert await b.vectors("t1", "s1", 2e10, 10) == []  # past their expiry
            assert (await b.usage("t1")).vectors == 0  # ... and dropped with their entries
            keys = [k.decode() async for k in r.scan_iter(match=prefix + "*")]
            assert keys and all("{t1}" in k for k in keys)  # one hash tag: one cluster slot
            assert await b.purge("t1") == 3  # c, k0 and k1 (not read since they expired)
            assert [k async for k in r.scan_iter(match=prefix + "*")] == []
        finally:
            async for k in r.scan_iter(match=prefix + "*"):
                await r.delete(k)
            await r.aclose()

    asyncio.run(run())


@pytest.fixture()
def own_redis() -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    exe = shutil.which("redis-server")
    assert exe is not None, "redis-server is installed on the test machines"
    port = free_port()
    p = subprocess.Popen(
        [exe, "--port", str(port), "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    import redis

    r = redis.Redis.from_url(url)
    for _ in range(200):
        try:
            if r.ping():
                break
        except redis.ConnectionError:
            import time

            time.sleep(0.02)
    r.close()
    yield p, url
    if p.poll() is None:
        p.terminate()
        p.wait(5)


def test_a_redis_that_dies_never_fails_a_request(
    own_redis: tuple[subprocess.Popen[bytes], str],
    counted: dict[str, str],
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    p, url = own_redis
    env = tenancy_env("gwtest-down:", url)
    proc, _ = start_gateway(tmp_path_factory.mktemp("down"), cached_rules(), counted, env)
    try:
        m = marker()
        _, _, key = new_tenant(proc.admin)
        c = client(base(proc), key)
        assert ask(c, m)[0]["x-gateway-cache"] == "miss"
        p.terminate()
        p.wait(5)
        states = []
        for _ in range(3):  # the key is known: its requests go on without the store
            h, text, _ = ask(c, m)
            states.append(h["x-gateway-cache"])
            assert text == f"Echo (highspeed): {m}"
        assert states[0] in ("miss", "bypass") and states[1:] == ["bypass", "bypass"]
        assert reached(counted["highspeed"], m) == 4
    except openai.APIStatusError as e:  # pragma: no cover - the assertion's message
        raise AssertionError(f"{e.status_code}: {e.response.text}\n{proc.log()[-3000:]}") from e
    finally:
        proc.stop()
