"""Upstream pools: replicas of one tier, their HTTP client, choice and circuit breaker.

The only module that knows upstream URLs. One pooled keep-alive ``aiohttp`` session
per pool; it never retries on its own (the dispatcher is the one retry layer). Every
failure is raised as an :class:`AttemptError` that says whether another tier may be
tried (``retryable``) and whether it was a timeout.

Replica choice: requests that share a prompt prefix go to the same replica (so the
engine's radix/prefix cache hits) unless that replica is clearly more loaded than the
least loaded one (bounded-load affinity). Load is our own requests in flight plus the
engine's queue as its ``/metrics`` last said (SGLang's ``sglang:num_queue_reqs``).

Health: a background probe per pool asks every replica's ``/health`` each
``health.interval`` seconds (and scrapes ``/metrics``); a replica that fails a probe,
or refuses a connection, gets no traffic until a probe succeeds again. A pool whose
replicas are all down counts as unavailable to the router, as does one whose circuit
is open.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field

import aiohttp

from gateway.core.rules import Tier

log = logging.getLogger("gateway.upstream.pools")

_SKIP_HEADERS = ("Accept-Encoding", "User-Agent")
_JSON = {"Content-Type": "application/json"}
_MAX_ERROR_BODY = 64 * 1024


class AttemptError(Exception):
    """One attempt on one tier failed. ``kind`` is short and ASCII (it goes into headers)."""

    def __init__(
        self,
        kind: str,
        detail: str,
        *,
        retryable: bool = True,
        timeout: bool = False,
        status: int | None = None,
        body: bytes | None = None,
    ):
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail
        self.retryable = retryable
        self.timeout = timeout
        self.status = status
        self.body = body  # the upstream's own answer, for client errors relayed as they are


def _base(url: str) -> str:
    url = url.rstrip("/")
    return url[:-3] if url.endswith("/v1") else url


@dataclass(slots=True)
class Replica:
    url: str
    in_flight: int = 0
    up: bool = True
    queued: float = 0.0  # engine-side queue from its last /metrics scrape
    running: float = 0.0
    cache_hit_rate: float | None = None
    last_probe: float | None = None  # monotonic time of the last probe answer

    @property
    def load(self) -> float:
        return self.in_flight + self.queued

    def state(self) -> dict[str, object]:
        return {
            "url": self.url,
            "up": self.up,
            "in_flight": self.in_flight,
            "queued": self.queued,
            "running": self.running,
            "cache_hit_rate": self.cache_hit_rate,
        }


_METRICS = {
    b"sglang:num_queue_reqs": "queued",
    b"sglang:num_running_reqs": "running",
    b"sglang:cache_hit_rate": "cache_hit_rate",
}


def parse_metrics(text: bytes) -> dict[str, float]:
    """Sum SGLang's gauges we use over their label sets (Prometheus text format)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith(b"sglang:"):
            continue
        name = line.split(b"{", 1)[0].split(b" ", 1)[0]
        key = _METRICS.get(name)
        if key is None:
            continue
        try:
            out[key] = out.get(key, 0.0) + float(line.rsplit(b" ", 1)[1])
        except (ValueError, IndexError):
            continue
    return out


@dataclass(slots=True)
class Circuit:
    threshold: int
    cooldown: float
    failures: int = 0
    opened_at: float | None = None

    def available(self, now: float) -> bool:
        # after the cooldown the circuit is half-open: traffic may probe it again
        return self.opened_at is None or now - self.opened_at >= self.cooldown

    @property
    def is_open(self) -> bool:
        return self.opened_at is not None

    def success(self) -> None:
        self.failures = 0
        self.opened_at = None

    def failure(self, now: float) -> None:
        self.failures += 1
        if self.failures >= self.threshold:
            self.opened_at = now


@dataclass(slots=True)
class Pool:
    name: str
    tier: Tier
    session: aiohttp.ClientSession
    replicas: list[Replica]
    circuit: Circuit
    _probe: asyncio.Task[None] | None = field(default=None)

    @classmethod
    def create(cls, name: str, tier: Tier) -> Pool:
        connector = aiohttp.TCPConnector(
            limit=0,
            limit_per_host=tier.max_connections,
            keepalive_timeout=tier.keepalive,
            enable_cleanup_closed=False,
        )
        session = aiohttp.ClientSession(
            connector=connector,
            skip_auto_headers=_SKIP_HEADERS,
            timeout=aiohttp.ClientTimeout(total=None),
        )
        return cls(
            name,
            tier,
            session,
            [Replica(_base(u)) for u in tier.endpoints],
            Circuit(tier.circuit.failures, tier.circuit.cooldown),
        )

    def start(self) -> None:
        if self.tier.health.enabled:
            self._probe = asyncio.get_running_loop().create_task(self._probe_loop())

    async def close(self) -> None:
        if self._probe is not None:
            self._probe.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._probe
        await self.session.close()

    async def _probe_loop(self) -> None:
        h = self.tier.health
        while True:
            await asyncio.gather(*(self.probe(r) for r in self.replicas))
            await asyncio.sleep(h.interval)

    async def probe(self, rep: Replica) -> None:
        h = self.tier.health
        timeout = aiohttp.ClientTimeout(total=h.timeout)
        was_up = rep.up
        try:
            async with self.session.get(rep.url + h.path, timeout=timeout) as resp:
                await resp.read()
                rep.up = resp.status == 200
        except (aiohttp.ClientError, TimeoutError):
            rep.up = False
        rep.last_probe = time.monotonic()
        if rep.up != was_up:
            log.warning("replica %s of %s is %s", rep.url, self.name, "up" if rep.up else "down")
        if rep.up and h.metrics_path:
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                async with self.session.get(rep.url + h.metrics_path, timeout=timeout) as resp:
                    if resp.status == 200:
                        for key, value in parse_metrics(await resp.read()).items():
                            setattr(rep, key, value)

    @property
    def model(self) -> str:
        return self.tier.model

    def available(self, now: float) -> bool:
        if not self.circuit.available(now):
            return False
        return any(r.up for r in self.replicas)

    def choose(self, affinity: int) -> Replica:
        reps = self.replicas
        if len(reps) == 1:
            return reps[0]
        live = [r for r in reps if r.up] or reps  # all down: try anyway, a probe may lag
        # rendezvous-free affinity: a prefix keeps its replica while the replica set is stable
        preferred = live[affinity % len(live)]
        least = min(live, key=lambda r: r.load)
        # bounded load: keep the prefix-cache replica unless it has 25% (and 2) more load
        if preferred.load <= least.load * 1.25 + 2:
            return preferred
        return least

    def record(self, ok: bool) -> None:
        if ok:
            self.circuit.success()
        else:
            self.circuit.failure(time.monotonic())

    def timeout(self, remaining: float, stream: bool) -> aiohttp.ClientTimeout:
        t = self.tier.timeouts
        total = min(t.total, remaining)
        # for a stream, sock_read is the stall limit between chunks at no per-chunk cost;
        # a non-streamed answer arrives in one piece, so only the total applies
        return aiohttp.ClientTimeout(
            total=total, sock_connect=t.connect, sock_read=t.stall if stream else None
        )

    async def _send(
        self,
        replica: Replica,
        path: str,
        body: bytes,
        timeout: aiohttp.ClientTimeout,
        timeout_kind: str,
    ) -> aiohttp.ClientResponse:
        """POST, up to the response headers; AttemptError on any failure.

        A pooled keep-alive connection the engine has already closed (llama.cpp's server
        closes one after each stream, whatever its Keep-Alive header says) fails at once
        with a disconnect: that is the transport's business, so one more try goes out on a
        fresh connection. A refused connection marks the replica down.
        """
        for last in (False, True):
            try:
                return await self.session.post(
                    replica.url + path, data=body, headers=_JSON, timeout=timeout
                )
            except TimeoutError:
                raise AttemptError(
                    timeout_kind, f"no response within {timeout.total:.1f}s", timeout=True
                ) from None
            except aiohttp.ClientConnectorError as e:
                replica.up = False  # refused: no traffic until a probe says otherwise
                raise AttemptError("connect", _short(e)) from None
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as e:
                if last:
                    raise AttemptError("connect", _short(e)) from None
            except aiohttp.ClientError as e:
                raise AttemptError("upstream", _short(e)) from None
        raise AssertionError("unreachable")  # pragma: no cover

    async def post(
        self, replica: Replica, path: str, body: bytes, timeout: aiohttp.ClientTimeout
    ) -> bytes:
        """POST and return the 200 body; raise AttemptError on anything else."""
        resp = await self._send(replica, path, body, timeout, "timeout")
        try:
            async with resp:
                data = await resp.read()
        except TimeoutError:
            raise AttemptError(
                "timeout", f"no answer within {timeout.total:.1f}s", timeout=True
            ) from None
        except aiohttp.ClientError as e:
            raise AttemptError("upstream", _short(e)) from None
        if resp.status != 200:
            raise status_error(resp.status, data)
        return data

    async def open_stream(
        self, replica: Replica, path: str, body: bytes, timeout: aiohttp.ClientTimeout
    ) -> aiohttp.ClientResponse:
        """POST a streaming request; return the open 200 response (caller releases it)."""
        resp = await self._send(replica, path, body, timeout, "timeout_ttft")
        if resp.status != 200:
            try:
                data = await resp.content.read(_MAX_ERROR_BODY)
            except (aiohttp.ClientError, TimeoutError):
                data = b""
            resp.release()
            raise status_error(resp.status, data)
        return resp


def status_error(status: int, body: bytes) -> AttemptError:
    if status == 429 or status == 408 or status >= 500:
        snippet = body[:200].decode("utf-8", "replace").replace("\n", " ")
        return AttemptError(f"http_{status}", snippet or "no body", status=status)
    # other 4xx: the request itself is wrong; another tier would say the same
    return AttemptError(f"http_{status}", "client error", retryable=False, status=status, body=body)


def _short(e: BaseException) -> str:
    s = str(e) or type(e).__name__
    return s[:160]


class Pools:
    """All pools, by tier name. Built once in the app's lifespan."""

    def __init__(self, tiers: dict[str, Tier]):
        self.by_tier = {name: Pool.create(name, t) for name, t in tiers.items()}

    def __getitem__(self, tier: str) -> Pool:
        return self.by_tier[tier]

    def health(self) -> dict[str, bool]:
        now = time.monotonic()
        return {name: p.available(now) for name, p in self.by_tier.items()}

    def state(self) -> dict[str, object]:
        now = time.monotonic()
        return {
            name: {
                "available": p.available(now),
                "circuit_open": p.circuit.is_open,
                "consecutive_failures": p.circuit.failures,
                "replicas": [r.state() for r in p.replicas],
            }
            for name, p in self.by_tier.items()
        }

    def start(self) -> None:
        for p in self.by_tier.values():
            p.start()

    async def close(self) -> None:
        await asyncio.gather(*(p.close() for p in self.by_tier.values()))
