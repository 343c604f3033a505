"""A drill's load: requests sent at a steady rate (open loop: a slow answer does not slow
the sending), round-robin over the gateway replicas, each answer kept as a
:class:`Sample` with the gateway's own words for it; and a watch of each replica's
``gateway_tier_demoted`` gauge.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

from evals.drills.procs import Gateways, demoted_gauge

TOPICS = ("tea", "rivers", "bridges", "owls", "glass", "maps", "bread", "tides", "chess")


@dataclass
class Sample:
    at: float  # sent, seconds since the drill's start
    replica: int
    status: int
    latency_s: float
    tier: str = ""
    route: str = ""
    fallback: str = ""
    error: str = ""

    @property
    def paid(self) -> bool:
        """It waited for the fast tier's bad answer: a check failed there, then standard."""
        return self.fallback.startswith("highspeed:check_")

    @property
    def skipped(self) -> bool:
        """The fast tier was skipped: answered by the standard tier directly."""
        return "demoted highspeed: " in self.route

    @property
    def probe(self) -> bool:
        return "probe highspeed (demoted" in self.route

    @property
    def standard_work(self) -> bool:
        """The standard tier served it (directly, or after the fast tier failed)."""
        return self.tier == "standard" or "-> standard" in self.fallback


def _body(i: int, max_tokens: int) -> dict[str, Any]:
    topic = TOPICS[i % len(TOPICS)]
    return {
        "model": "auto",
        "messages": [{"role": "user", "content": f"Tell me about {topic}, in a few lines ({i})."}],
        "max_tokens": max_tokens,
    }


async def _one(
    http: aiohttp.ClientSession, gws: Gateways, i: int, t0: float, max_tokens: int
) -> Sample:
    replica = i % len(gws.urls)
    url = f"{gws.urls[replica]}/v1/chat/completions"
    sent = time.monotonic()
    s = Sample(sent - t0, replica, 0, 0.0)
    try:
        async with http.post(url, json=_body(i, max_tokens), headers=gws.headers()) as r:
            await r.read()
            s.status = r.status
            s.tier = r.headers.get("x-gateway-tier", "")
            s.route = r.headers.get("x-gateway-route", "")
            s.fallback = r.headers.get("x-gateway-fallback", "")
    except (aiohttp.ClientError, TimeoutError) as e:
        s.error = type(e).__name__
    s.latency_s = time.monotonic() - sent
    return s


async def send(
    gws: Gateways, rate: float, seconds: float, t0: float, max_tokens: int
) -> list[Sample]:
    """``rate`` requests a second for ``seconds`` (times since ``t0``, monotonic); every
    answer, as it came."""
    timeout = aiohttp.ClientTimeout(total=120)
    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(timeout=timeout, connector=conn) as http:
        tasks: list[asyncio.Task[Sample]] = []
        start = time.monotonic()
        n = int(rate * seconds)
        for i in range(n):
            wait = start + i / rate - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            tasks.append(asyncio.create_task(_one(http, gws, i, t0, max_tokens)))
        return list(await asyncio.gather(*tasks))


@dataclass
class Flip:
    """A replica's gauge changed: when (seconds since the start), to what."""

    at: float
    replica: int
    demoted: bool


async def watch(
    gws: Gateways, t0: float, stop: Callable[[], bool], every: float = 0.1
) -> list[Flip]:
    """Each replica's ``gateway_tier_demoted`` for the fast tier, polled every ``every`` s,
    until ``stop()``: the moments it changed."""
    last: dict[int, bool] = {}
    flips: list[Flip] = []
    loop = asyncio.get_running_loop()
    while not stop():
        for i, url in enumerate(gws.urls):
            now = await loop.run_in_executor(None, demoted_gauge, url)
            if now is not None and now != last.get(i, False):
                flips.append(Flip(time.monotonic() - t0, i, now))
            if now is not None:
                last[i] = now
        await asyncio.sleep(every)
    return flips
