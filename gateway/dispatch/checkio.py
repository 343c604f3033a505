"""The gateway's I/O for the checks that need it (:class:`~gateway.checks.remote.CheckServices`):
a webhook's POST over one pooled aiohttp client per process, and a judge's question to a
tier of the running pools (its slot, its replica choice, its price: counted like any call).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import aiohttp
import orjson

from gateway.checks.remote import RemoteError
from gateway.telemetry.recorder import Telemetry
from gateway.upstream.failures import AttemptFailed
from gateway.upstream.pools import Pools
from gateway.upstream.scheduler import ANYONE

MAX_WEBHOOK_ANSWER = 64 * 1024


class WebhookClient:
    """One keep-alive HTTP client for every webhook check of a process (closed with it)."""

    def __init__(self, limit: int = 256):
        self._limit = limit
        self._session: aiohttp.ClientSession | None = None

    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=self._limit, keepalive_timeout=30)
            self._session = aiohttp.ClientSession(connector=connector, raise_for_status=False)
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


class CheckIO:
    """:class:`~gateway.checks.remote.CheckServices` over one runtime's pools."""

    def __init__(self, pools: Pools, webhooks: WebhookClient, telemetry: Telemetry | None = None):
        self._pools = pools
        self._webhooks = webhooks
        self._tel = telemetry

    async def post(
        self, url: str, body: bytes, headers: Mapping[str, str], timeout: float
    ) -> bytes:
        limit = aiohttp.ClientTimeout(total=timeout)
        async with self._webhooks.session().post(
            url, data=body, headers=dict(headers), timeout=limit, allow_redirects=False
        ) as resp:
            data = await resp.content.read(MAX_WEBHOOK_ANSWER + 1)
            if not 200 <= resp.status < 300:
                raise RemoteError(f"the webhook answered {resp.status}")
            if len(data) > MAX_WEBHOOK_ANSWER:
                raise RemoteError("the webhook's answer is too large")
            return data

    async def ask(
        self, tier: str, messages: list[dict[str, Any]], max_tokens: int, timeout: float
    ) -> str:
        pool = self._pools.by_tier.get(tier)
        if pool is None:
            raise RemoteError(f"no tier {tier!r}")
        until = time.monotonic() + timeout
        body = {**pool.tier.request_defaults, "model": pool.model, "messages": messages}
        body |= {"max_tokens": max_tokens, "temperature": 0, "stream": False}
        rep, _ = await pool.acquire(ANYONE, 0, until)
        t0 = time.perf_counter()
        try:
            data = await pool.post(
                rep, "/v1/chat/completions", orjson.dumps(body), pool.limits(timeout, False)
            )
        except AttemptFailed as e:
            raise RemoteError(f"the judge tier failed: {e.detail}") from None
        finally:
            pool.release(rep, time.perf_counter() - t0)
        try:
            answer = orjson.loads(data)
            text = answer["choices"][0]["message"]["content"]
        except (orjson.JSONDecodeError, KeyError, IndexError, TypeError):
            raise RemoteError("the judge tier's answer is not a chat completion") from None
        if self._tel is not None:
            cost = pool.cost(answer.get("usage") if isinstance(answer, dict) else None)
            if cost:
                self._tel.cost.add(cost, {"tier": tier, "task": "judge"})
        return text if isinstance(text, str) else ""
