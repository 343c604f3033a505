"""Steady mixed load over the gateway replicas, through a client-side balancer.

The balancer stands in for a Kubernetes Service behind an ingress proxy: it sends to the
replicas whose ``/readyz`` answered 200 at its last poll (every 100 ms), round-robin, and
retries a connection that was *refused* on another replica (no byte of the request was
sent: an ingress proxy does the same). A request that reached a replica is never retried:
whatever happens to it is the gateway's doing and is counted.

Each request is recorded: start and end (seconds since the run began), the replica, the
tenant, streamed or not, and its outcome: ``ok``, ``http_<status>``, ``cut`` (a stream
that ended without ``[DONE]``), ``error_event`` (an in-band error), ``disconnected`` (the
replica closed the connection before answering) or ``timeout``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import aiohttp

from evals.fleet.procs import Gateway

PROMPTS = (
    "What is the capital of France, and why is it there?",
    "Write a Python function that reverses a linked list.",
    "Summarize: the committee met on Tuesday and agreed to postpone the budget vote.",
    "Extract the dates from: the invoice of 3 March was paid on 9 April.",
    "¿Cuál es la diferencia entre un río y un arroyo?",
    "Explique brièvement comment fonctionne un moteur à combustion.",
    "If a train leaves at 3 pm at 60 km/h, when has it gone 150 km?",
)


@dataclass
class Sample:
    t0: float
    t1: float
    replica: str
    tenant: str
    stream: bool
    outcome: str
    rerouted: int = 0


@dataclass
class Balancer:
    gateways: list[Gateway]
    ready: dict[str, bool] = field(default_factory=dict)
    turn: itertools.count[int] = field(default_factory=itertools.count)

    def pick(self, avoid: set[str]) -> Gateway | None:
        live = [g for g in self.gateways if self.ready.get(g.name) and g.name not in avoid]
        return live[next(self.turn) % len(live)] if live else None

    async def poll(self, s: aiohttp.ClientSession, stop: asyncio.Event) -> None:
        while not stop.is_set():
            for g in self.gateways:
                try:
                    async with s.get(g.url + "/readyz", timeout=aiohttp.ClientTimeout(0.5)) as r:
                        self.ready[g.name] = r.status == 200
                except (aiohttp.ClientError, TimeoutError, OSError):
                    self.ready[g.name] = False
            await asyncio.sleep(0.1)


@dataclass
class Load:
    balancer: Balancer
    keys: dict[str, str]  # tenant -> API key
    t_start: float
    samples: list[Sample] = field(default_factory=list)
    timeout: float = 30.0

    def now(self) -> float:
        return time.monotonic() - self.t_start

    async def client(self, s: aiohttp.ClientSession, i: int, stop: asyncio.Event) -> None:
        tenants = sorted(self.keys)
        for n in itertools.count():
            if stop.is_set():
                return
            tenant = tenants[(i + n) % len(tenants)]
            stream = (i + n) % 2 == 0
            prompt = PROMPTS[(i * 7 + n) % len(PROMPTS)] + f" (client {i}, turn {n})"
            await self.one(s, tenant, stream, prompt)

    async def one(self, s: aiohttp.ClientSession, tenant: str, stream: bool, prompt: str) -> None:
        body = {
            "model": "auto",
            "stream": stream,
            "max_tokens": 48,
            "messages": [{"role": "user", "content": prompt}],
        }
        headers = {"Authorization": f"Bearer {self.keys[tenant]}"}
        t0, avoid = self.now(), set[str]()
        while True:
            gw = self.balancer.pick(avoid)
            if gw is None:  # nothing ready: wait for the balancer, as a Service would
                await asyncio.sleep(0.05)
                if self.now() - t0 > self.timeout:
                    self._record(t0, "-", tenant, stream, "no_replica", len(avoid))
                    return
                continue
            try:
                outcome = await self._send(s, gw, body, headers, stream)
            except aiohttp.ClientConnectorError:
                avoid.add(gw.name)  # refused: nothing was sent; another replica
                self.balancer.ready[gw.name] = False
                continue
            self._record(t0, gw.name, tenant, stream, outcome, len(avoid))
            return

    async def _send(
        self,
        s: aiohttp.ClientSession,
        gw: Gateway,
        body: dict[str, Any],
        headers: dict[str, str],
        stream: bool,
    ) -> str:
        url = gw.url + "/v1/chat/completions"
        try:
            async with s.post(
                url, json=body, headers=headers, timeout=aiohttp.ClientTimeout(self.timeout)
            ) as r:
                if r.status != 200:
                    await r.read()
                    return f"http_{r.status}"
                if not stream:
                    answer = await r.json()
                    return "ok" if answer.get("choices") else "bad_answer"
                return _stream_outcome(await r.read())
        except aiohttp.ClientConnectorError:
            raise  # refused: the caller sends elsewhere
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError):
            return "disconnected"
        except aiohttp.ClientPayloadError:
            return "cut"
        except TimeoutError:
            return "timeout"

    def _record(
        self, t0: float, replica: str, tenant: str, stream: bool, outcome: str, rerouted: int
    ) -> None:
        self.samples.append(Sample(t0, self.now(), replica, tenant, stream, outcome, rerouted))


def _stream_outcome(raw: bytes) -> str:
    events = [ln[6:] for ln in raw.decode(errors="replace").split("\n") if ln.startswith("data: ")]
    if not events or events[-1] != "[DONE]":
        return "cut"
    for e in events[:-1]:
        try:
            if "error" in json.loads(e):
                return "error_event"
        except ValueError:
            return "bad_answer"
    return "ok"


async def run_load(load: Load, clients: int, stop: asyncio.Event) -> None:
    conn = aiohttp.TCPConnector(limit=0, force_close=False)
    async with aiohttp.ClientSession(connector=conn) as s:
        poller = asyncio.create_task(load.balancer.poll(s, stop))
        await asyncio.gather(*(load.client(s, i, stop) for i in range(clients)))
        await poller


def samples_json(samples: list[Sample]) -> list[dict[str, Any]]:
    return [asdict(x) for x in samples]
