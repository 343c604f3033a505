"""Who is calling and may they: API key -> tenant policy, then admission (limits).

The hot path costs one HMAC and a dict lookup: keys are cached locally with their
merged policy. A change made on any replica is published by the store and evicts the
cached entries everywhere at once; entries older than ``ttl`` are re-read anyway (the
safety net if an event is lost).

Redis down or slow: keys already cached keep working from their last known policy
(fail-open), unless their policy says ``fail_closed`` (then 503); keys never seen
get 503; rate limits degrade to this replica's own :class:`LocalLimiter`. Nothing
answers 500, and the cache heals by itself when Redis returns.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, replace
from typing import Any

from gateway.errors import RateLimited, ServiceUnavailable, StoreUnavailable, Unauthorized
from gateway.store.base import Store, Used
from gateway.tenancy.limits import ALLOW, NO_RESERVE, Admission, Hold, LocalLimiter, Reserve
from gateway.tenancy.tenants import OPEN, Effective, effective_policy, key_digest

log = logging.getLogger("gateway.access")
_NEGATIVE_TTL = 5.0
_NEGATIVE_MAX = 10_000
_RELEASE_RETRY = (0.05, 0.2, 0.5, 1.0, 2.0)  # seconds between tries: a slot is never dropped


@dataclass(slots=True)
class _Entry:
    eff: Effective
    at: float


class Access:
    def __init__(self, store: Store | None, secret: bytes, required: bool, ttl: float):
        self.store = store
        self.required = required
        self._secret = secret
        self._ttl = ttl
        self._cache: dict[str, _Entry] = {}
        self._unknown: dict[str, float] = {}  # digests recently not found
        self._local = LocalLimiter()
        self._holds: dict[str, Hold] = {}  # admission id -> what it reserved, until done()
        self.degraded = False  # the store is unreachable right now

    def digest(self, key: str) -> str:
        return key_digest(self._secret, key)

    def on_event(self, ev: dict[str, Any]) -> None:
        kind = ev.get("type")
        if kind == "store_down":
            self.degraded = True
        elif kind == "resync":
            self.degraded = False
            # re-read every key on its next use, but keep the last known policy: a Redis
            # that just came back may still fail a call, and a known key must not get 503
            for entry in self._cache.values():
                entry.at = float("-inf")
            self._unknown.clear()
        elif kind == "tenant":
            tid = ev.get("id")
            for d in [d for d, e in self._cache.items() if e.eff.tenant_id == tid]:
                del self._cache[d]
        elif kind == "key":
            self._cache.pop(str(ev.get("digest")), None)
            self._unknown.pop(str(ev.get("digest")), None)

    # -- the hot path -------------------------------------------------------------------------
    async def authenticate(self, authorization: str | None) -> Effective:
        if not self.required:
            return OPEN
        if not authorization or not authorization.startswith("Bearer "):
            raise Unauthorized("Missing API key: send 'Authorization: Bearer <key>'.")
        digest = key_digest(self._secret, authorization[7:].strip())
        now = time.monotonic()
        entry = self._cache.get(digest)
        fresh = entry is not None and now - entry.at < self._ttl
        if entry is not None and fresh and not (self.degraded and entry.eff.policy.fail_closed):
            return entry.eff
        seen_missing = self._unknown.get(digest)
        if entry is None and seen_missing is not None and now - seen_missing < _NEGATIVE_TTL:
            raise Unauthorized("Incorrect API key provided.")
        assert self.store is not None
        try:
            found = await self.store.key_by_digest(digest)
            self.degraded = False
        except StoreUnavailable:
            self.degraded = True
            if entry is not None and not entry.eff.policy.fail_closed:
                return entry.eff  # fail-open: the last known policy
            raise ServiceUnavailable(
                "The policy store is unreachable; try again shortly."
            ) from None
        if found is None:
            self._cache.pop(digest, None)
            if len(self._unknown) > _NEGATIVE_MAX:
                self._unknown.clear()
            self._unknown[digest] = now
            raise Unauthorized("Incorrect API key provided.")
        key, tenant = found
        eff = effective_policy(tenant, key)
        self._cache[digest] = _Entry(eff, now)
        return eff

    async def admit(self, eff: Effective, rid: str, want: Reserve = NO_RESERVE) -> Admission:
        """Admit a request (or raise 429), reserving ``want`` against the tenant's budgets;
        :meth:`done` settles it with the admission's ``hold``."""
        p = eff.policy
        if eff.tenant_id is None or not (
            p.requests_per_minute
            or p.tokens_per_minute
            or p.max_concurrent_requests
            or p.token_budget
            or p.cost_budget
        ):
            return ALLOW
        assert self.store is not None
        try:
            adm = await self.store.admit(eff.tenant_id, rid, p, want)
            self.degraded = False
        except StoreUnavailable:
            self.degraded = True
            if p.fail_closed:
                raise ServiceUnavailable("The policy store is unreachable.") from None
            adm = self._local.admit(eff.tenant_id, rid, p, want=want)  # this replica's limits
            if adm.hold is not None:  # settled where it was held, whatever the store does
                adm = replace(adm, hold=replace(adm.hold, local=True))
        if not adm.ok:
            raise _denied(adm)
        if adm.hold is not None:
            self._holds[rid] = adm.hold
        return adm

    async def done(
        self,
        eff: Effective,
        rid: str,
        tier: str,
        usage: dict[str, Any] | None,
        fallback: str | None,
        cost: float | None = None,
    ) -> None:
        """After the answer (off the critical path): free the slot, count the usage and
        settle what the admission reserved, in the same atomic call (cancelled requests
        included)."""
        hold = self._holds.pop(rid, None)
        if eff.tenant_id is None or self.store is None:
            return
        if hold is not None and hold.local:  # held by this replica: given back here
            self._local.debit(eff.tenant_id, 0, eff.policy, 0, hold)
            hold = None
        prompt = int((usage or {}).get("prompt_tokens") or 0)
        completion = int((usage or {}).get("completion_tokens") or 0)
        micro = round((cost or 0.0) * 1e6)  # counted in micro-USD: integers, atomic in Redis
        if eff.policy.max_concurrent_requests:
            await self.release(eff.tenant_id, rid)
        saved = int((usage or {}).get("cache_saved_tokens") or 0)  # a cache hit's
        used = Used(tier, prompt, completion, fallback, micro, settle_id=rid, saved=saved)
        for pause in (0.0, *_RELEASE_RETRY):  # settling is idempotent: retried, so a blip
            if pause:  # never leaves the worst-case reservation standing in the budget
                await asyncio.sleep(pause)
            try:
                await self.store.record_usage(eff.tenant_id, used, eff.policy, hold)
                return
            except StoreUnavailable:
                continue
        self._local.debit(eff.tenant_id, prompt + completion, eff.policy, micro_usd=micro)

    async def release(self, tenant_id: str, rid: str) -> None:
        """Free a concurrency slot, retried: a slot left behind counts against the tenant
        until it expires. A slot given by the local limiter (store down at admission) is
        freed there too."""
        self._local.release(tenant_id, rid)
        assert self.store is not None
        for pause in (0.0, *_RELEASE_RETRY):
            if pause:
                await asyncio.sleep(pause)
            try:
                await self.store.release(tenant_id, rid)
                return
            except StoreUnavailable:
                continue
        log.warning("could not free slot %s of tenant %s: it expires by itself", rid, tenant_id)


def _denied(adm: Admission) -> RateLimited:
    retry = max(adm.retry_after_s, 0.001)
    headers = rate_headers(adm)
    headers["Retry-After"] = str(max(1, round(retry + 0.4999)))
    if adm.denied in ("budget", "cost_budget"):
        what = "token" if adm.denied == "budget" else "USD"
        return RateLimited(
            f"You exceeded your {what} budget for this period.",
            retry_after=retry,
            type_="insufficient_quota",
            headers=headers,
            code="insufficient_quota",
        )
    what = {
        "requests": "requests per minute",
        "tokens": "tokens per minute",
        "concurrency": "concurrent requests",
    }[adm.denied or "requests"]
    return RateLimited(
        f"Rate limit reached for {what}; retry after {retry:.2f}s.",
        retry_after=retry,
        type_="tokens" if adm.denied == "tokens" else "requests",
        headers=headers,
    )


def rate_headers(adm: Admission) -> dict[str, str]:
    h: dict[str, str] = {}
    if adm.limit_requests is not None:
        h["x-ratelimit-limit-requests"] = str(adm.limit_requests)
        if adm.remaining_requests is not None:
            h["x-ratelimit-remaining-requests"] = str(max(0, adm.remaining_requests))
        h["x-ratelimit-reset-requests"] = f"{60 / adm.limit_requests:.3f}s"
    if adm.limit_tokens is not None:
        h["x-ratelimit-limit-tokens"] = str(adm.limit_tokens)
        if adm.remaining_tokens is not None:
            h["x-ratelimit-remaining-tokens"] = str(max(0, adm.remaining_tokens))
    return h
