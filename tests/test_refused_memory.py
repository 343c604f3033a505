"""What a request the engine refuses leaves behind: nothing.

A refused request's failure used to be kept in a reference cycle (the attempt loop's last
failure, ``err`` before ``raise err``, tenacity's outcome) whose traceback held the
request's frames: its body three times (the bytes read, the parsed request, the body sent
to the engine), until a full collection, which the gateway's tuned collector runs rarely.
A 9.3 MB body kept ~25 MB; bursts of them walked a worker towards the OOM killer.

Two checks: in this process, with the collector off, a request's objects are freed by
reference counts alone (no cycle holds a large string); and a real gateway process sent
bursts of large bodies its engine refuses comes back to its starting RSS.
"""

from __future__ import annotations

import asyncio
import gc
import io
import json
import sys
import time
import types
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import aiohttp
import pytest
import yaml
from aiohttp import web

from gateway.rules.schema import load_rules
from gateway.serve import build_app
from gateway.settings import load_settings
from gateway.upstream.failures import ClientRejected
from gateway.upstream.transport import MAX_ERROR_BODY, HttpTransport, Timeouts
from tests.conftest import rules_for_tests, start_gateway
from tests.test_dispatch_memory import aio

pytestmark = pytest.mark.processes

BIG = 2_000_000  # characters of the in-process bodies


def _large_values(objs: list[object], size: int) -> list[str]:
    """Where a str or bytes of at least ``size`` is held directly by one of ``objs``."""
    found = []
    for o in objs:
        if isinstance(o, types.FrameType):
            values: list[object] = list(o.f_locals.values())
            where = f"frame {o.f_code.co_name} ({o.f_code.co_filename})"
        elif isinstance(o, dict):
            values, where = list(o.values()), "a dict"
        elif isinstance(o, list | tuple):
            values, where = list(o), f"a {type(o).__name__}"
        else:
            try:  # any object: some refuse to be looked at (a class, a proxy)
                values = list(vars(o).values()) if hasattr(o, "__dict__") else []
                values += [getattr(o, n, None) for n in getattr(type(o), "__slots__", ())]
            except Exception:
                continue
            where = f"a {type(o).__qualname__}"
        if any(isinstance(v, str | bytes) and len(v) >= size for v in values):
            found.append(where)
    return found


@pytest.fixture()
def served(
    engines: dict[str, str], tmp_path: Path
) -> Iterator[tuple[asyncio.AbstractEventLoop, int]]:
    """A gateway app in this process on a real socket (no admin token: no admin listener):
    the loop it runs on, and its data port."""
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(rules_for_tests()))
    env = {f"GATEWAY_POOL_{k.upper()}_URLS": v for k, v in engines.items()}
    env["GATEWAY_ADMIN_PORT"] = "0"
    settings = load_settings(env, rules=path)
    rules = load_rules(path).with_endpoints(settings.pool_urls)
    app = build_app(settings, rules, path, path.read_text(), announce=lambda line: None)
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app, handler_cancellation=True)  # as `gateway serve` runs it
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    try:
        yield loop, int(runner.addresses[0][1])
    finally:
        loop.run_until_complete(runner.cleanup())
        loop.close()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("directive", "stream", "cut"),
    [
        ("[[*: status=400]]", False, False),  # the engine refuses it: relayed
        ("[[*: status=400]]", True, False),
        ("[[highspeed: status=500]]", False, False),  # a failure, then the next tier
        ("[[*: hang]]", True, True),  # the client leaves while the engine is silent
    ],
)
def test_a_request_leaves_nothing_for_the_collector(
    served: tuple[asyncio.AbstractEventLoop, int], directive: str, stream: bool, cut: bool
) -> None:
    """With the collector off, what the requests leave is freed by reference counts: no
    object alive holds a large body, and a collection finds no cycle that held one."""
    loop, port = served

    async def send(i: int) -> None:
        text = f"{directive} {i} " + "x" * BIG
        body = io.BytesIO(
            json.dumps({"model": "auto", "stream": stream, "messages": [user(text)]}).encode()
        )
        del text
        timeout = aiohttp.ClientTimeout(total=1.0 if cut else 20)
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        async with aiohttp.ClientSession(timeout=timeout) as s:
            try:
                async with s.post(url, data=body) as r:
                    del body
                    await r.read()
            except TimeoutError:
                assert cut

    loop.run_until_complete(send(-1))  # warm: first-use caches are not what we look for
    gc.collect()
    # what held a large value before (another test module's constant): not these requests'
    before = Counter(_large_values(gc.get_objects(), BIG))
    gc.disable()
    try:
        for i in range(3):
            loop.run_until_complete(send(i))
        loop.run_until_complete(asyncio.sleep(0.5))  # cut requests' handlers see it
        held = sorted((Counter(_large_values(gc.get_objects(), BIG)) - before).elements())
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        in_cycles = _large_values(list(gc.garbage), BIG)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert held == [], held
    assert in_cycles == [], in_cycles


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


# -- a real gateway process ----------------------------------------------------------------
BODY_MB = 4
BURSTS, PER_BURST = 4, 16
RSS_SLACK_MB = 80  # RSS after the bursts, over RSS before (a leak kept ~12 MB per request)


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def _post(url: str, body: bytes) -> int:
    req = urllib.request.Request(
        f"{url}/v1/chat/completions", body, {"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        e.read()
        e.close()
        return int(e.code)


@pytest.mark.processes
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/<pid>/status")
def test_rss_comes_back_after_bursts_of_large_bodies_the_engine_refuses(
    engines: dict[str, str], tmp_path: Path
) -> None:
    proc, url = start_gateway(tmp_path, rules_for_tests(), engines)
    try:
        for _ in range(3):  # warm: imports, pools, the first large bodies' arenas
            _post(url, _refused_body(0))
        time.sleep(1.5)
        before = _rss_mb(proc.p.pid)
        refused = 0
        for burst in range(BURSTS):
            bodies = [_refused_body(burst * PER_BURST + i) for i in range(PER_BURST)]
            with ThreadPoolExecutor(PER_BURST) as pool:
                codes = list(pool.map(lambda b: _post(url, b), bodies))
            del bodies
            assert set(codes) <= {400, 503}, codes  # 503: over the body bytes held at once
            refused += codes.count(400)
            _reset(engines["highspeed"])  # the fake engine keeps what it was sent
        time.sleep(1.5)  # the last large body's release: a collection and a trim
        after = _rss_mb(proc.p.pid)
    finally:
        proc.stop()
    assert refused >= BURSTS * 4, refused  # most reached the engine and got its 400
    assert after - before <= RSS_SLACK_MB, f"RSS {before:.0f} MB -> {after:.0f} MB"


def _refused_body(i: int) -> bytes:
    text = f"[[*: status=400]] {i} " + "x" * (BODY_MB << 20)
    return json.dumps({"model": "auto", "messages": [{"role": "user", "content": text}]}).encode()


def _reset(engine: str) -> None:
    with urllib.request.urlopen(urllib.request.Request(f"{engine}/_reset", b"", method="POST")):
        pass


@aio
async def test_what_is_kept_of_an_engines_refusal_is_bounded() -> None:
    """Whatever the engine answers with its 4xx (an echo of a 5 MB prompt), the failure
    keeps, and the client is relayed, at most MAX_ERROR_BODY of it."""

    async def refuse(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(status=400, body=b"x" * (5 << 20), content_type="application/json")

    app = web.Application(client_max_size=16 << 20)
    app.router.add_post("/v1/chat/completions", refuse)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    transport = HttpTransport(4, 5.0)
    try:
        url = f"http://127.0.0.1:{runner.addresses[0][1]}/v1/chat/completions"
        with pytest.raises(ClientRejected) as got:
            await transport.open(url, b"{}", Timeouts(5.0, 1.0, 5.0))
        assert got.value.status == 400 and len(got.value.body) == MAX_ERROR_BODY
    finally:
        await transport.close()
        await runner.cleanup()
