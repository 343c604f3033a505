"""Upstream pools: replicas of one tier, their HTTP client, choice and circuit breaker.

The only module that knows upstream URLs. One pooled keep-alive ``aiohttp`` session
per pool; it never retries on its own (the dispatcher is the one retry layer). Every
failure is raised as an :class:`AttemptError` that says whether another tier may be
tried (``retryable``) and whether it was a timeout.

Replica choice: requests that share a prompt prefix go to the same replica (so the
engine's radix/prefix cache hits) unless that replica has clearly more requests in
flight than the least loaded one (bounded-load affinity).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import aiohttp

from gateway.rules import Tier

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
    failures: int = 0


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
    _rr: int = field(default=0)

    @classmethod
    def create(cls, name: str, tier: Tier) -> Pool:
        connector = aiohttp.TCPConnector(
            limit=0,
            limit_per_host=tier.max_connections,
            keepalive_timeout=60,
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

    async def close(self) -> None:
        await self.session.close()

    @property
    def model(self) -> str:
        return self.tier.model

    def available(self) -> bool:
        return self.circuit.available(time.monotonic())

    def choose(self, affinity: int) -> Replica:
        reps = self.replicas
        if len(reps) == 1:
            return reps[0]
        preferred = reps[affinity % len(reps)]
        least = min(reps, key=lambda r: r.in_flight)
        # bounded load: keep the prefix-cache replica unless it has 25% (and 2) more in flight
        if preferred.in_flight <= least.in_flight * 1.25 + 2:
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

    async def post(
        self, replica: Replica, path: str, body: bytes, timeout: aiohttp.ClientTimeout
    ) -> bytes:
        """POST and return the 200 body; raise AttemptError on anything else."""
        try:
            async with self.session.post(
                replica.url + path, data=body, headers=_JSON, timeout=timeout
            ) as resp:
                data = await resp.read()
                if resp.status != 200:
                    raise status_error(resp.status, data)
                return data
        except AttemptError:
            raise
        except TimeoutError:
            raise AttemptError(
                "timeout", f"no answer within {timeout.total:.1f}s", timeout=True
            ) from None
        except aiohttp.ClientConnectionError as e:
            raise AttemptError("connect", _short(e)) from None
        except aiohttp.ClientError as e:
            raise AttemptError("upstream", _short(e)) from None

    async def open_stream(
        self, replica: Replica, path: str, body: bytes, timeout: aiohttp.ClientTimeout
    ) -> aiohttp.ClientResponse:
        """POST a streaming request; return the open 200 response (caller releases it)."""
        try:
            resp = await self.session.post(
                replica.url + path, data=body, headers=_JSON, timeout=timeout
            )
        except TimeoutError:
            raise AttemptError(
                "timeout_ttft", "no response headers in time", timeout=True
            ) from None
        except aiohttp.ClientConnectionError as e:
            raise AttemptError("connect", _short(e)) from None
        except aiohttp.ClientError as e:
            raise AttemptError("upstream", _short(e)) from None
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
        return {name: p.circuit.available(now) for name, p in self.by_tier.items()}

    async def close(self) -> None:
        await asyncio.gather(*(p.close() for p in self.by_tier.values()))
