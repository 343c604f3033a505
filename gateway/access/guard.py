"""Who is calling and may they: API key -> tenant policy, then admission (limits).

The hot path costs one HMAC and a dict lookup: keys are cached locally with their
merged policy (:class:`~gateway.access.cache.KeyCache`: bounded, evicted at once by the
store's events, re-read after ``ttl``).

The store degraded (down, slow, read-only...: its breaker is open, see
:mod:`gateway.store.health`), by each policy's ``fail_closed``:

* fail-open (the default): keys already cached keep working from their last known policy
  for ``stale_max`` seconds after they were last verified; rate limits, concurrency and
  budgets are this process's share of them (:mod:`gateway.access.fleet`), counted by its
  own :class:`LocalLimiter` from what it sees; usage that could not be written waits in a
  bounded backlog and is written when the store answers again (:mod:`gateway.access.backlog`).
* fail-closed: 503 ``store_unavailable`` for the tenant's requests.

Keys never seen get 503 (they cannot be verified). Nothing answers 500, and everything
heals by itself when the store returns. Concurrency slots are leases renewed while the
request runs (:mod:`gateway.access.leases`).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from typing import Any, Protocol

from gateway.access.backlog import Unsettled, UsageBacklog
from gateway.access.cache import KeyCache
from gateway.access.fleet import FleetCount
from gateway.access.leases import SlotLeases
from gateway.errors import RateLimited, ServiceUnavailable, StoreUnavailable, Unauthorized
from gateway.headers import (
    H_LIMIT_REQUESTS,
    H_LIMIT_TOKENS,
    H_REMAINING_REQUESTS,
    H_REMAINING_TOKENS,
    H_RESET_REQUESTS,
)
from gateway.store.base import AdmissionStore, KeyStore, Lifecycle, UsageStore, Used
from gateway.store.events import Event, KeyChanged, Resync, TenantChanged
from gateway.tenancy.limits import (
    ALLOW,
    NO_RESERVE,
    Admission,
    Hold,
    LocalLimiter,
    Reserve,
)
from gateway.tenancy.tenants import OPEN, Effective, Policy, effective_policy, key_digest

_UNREACHABLE = "The policy store is unreachable; try again shortly."


class GuardedStore(Lifecycle, KeyStore, AdmissionStore, UsageStore, Protocol):
    """What admission control needs of the store."""


class Access:
    def __init__(
        self,
        store: GuardedStore | None,
        secret: bytes,
        required: bool,
        ttl: float,
        stale_max: float = 300.0,
        cache_max: int = 100_000,
    ):
        self.store = store
        self.required = required
        self._secret = secret
        self.cache = KeyCache(ttl, stale_max, cache_max)
        self._local = LocalLimiter()
        self._holds: dict[str, Hold] = {}  # admission id -> what it reserved, until done()
        self.backlog = UsageBacklog(store) if store is not None else None
        self.fleet = FleetCount(store)
        self.leases = SlotLeases(store, self._local, self.fleet.member)
        if store is not None:
            store.health.on_change(self._on_health)
            store.health.on_failure(self.leases.store_failed)

    def start(self) -> None:
        """The heartbeat that counts the processes sharing the store (:mod:`.fleet`)."""
        self.fleet.start()

    @property
    def degraded(self) -> bool:
        """The store's breaker is open right now."""
        return self.store is not None and self.store.health.degraded

    @property
    def _blind(self) -> bool:
        """The store failed its latest call: a fail-closed policy is not served from memory."""
        return self.store is not None and self.store.health.failing

    def digest(self, key: str) -> str:
        return key_digest(self._secret, key)

    def _on_health(self, degraded: bool) -> None:
        if not degraded:  # back: re-read what may have changed meanwhile, write the backlog
            self.cache.mark_stale()
            self.leases.store_back()  # and give back the slots it kept of requests that ended
            if self.backlog is not None:
                self.backlog.kick()

    def on_event(self, ev: Event) -> None:
        match ev:
            case Resync():  # (re)subscribed: events may have been missed meanwhile
                self.cache.mark_stale()
            case TenantChanged(tenant_id=tenant_id):
                self.cache.drop_tenant(tenant_id)
            case KeyChanged(digest=digest):
                self.cache.drop(digest)

    # -- the hot path -------------------------------------------------------------------------
    async def authenticate(self, authorization: str | None) -> Effective:
        if not self.required:
            return OPEN
        if not authorization or not authorization.startswith("Bearer "):
            raise Unauthorized("Missing API key: send 'Authorization: Bearer <key>'.")
        digest = key_digest(self._secret, authorization[7:].strip())
        now = time.monotonic()
        entry = self.cache.get(digest)
        fresh = entry is not None and self.cache.fresh(entry, now)
        if entry is not None and fresh and not (entry.eff.policy.fail_closed and self._blind):
            return entry.eff
        if entry is None and self.cache.missing_recently(digest, now):
            raise Unauthorized("Incorrect API key provided.")
        assert self.store is not None
        try:
            found = await self.store.key_by_digest(digest)
        except StoreUnavailable:
            last = self.cache.last_known(entry, now)
            if last is not None:
                return last  # fail-open: the last known policy
            raise ServiceUnavailable(_UNREACHABLE) from None
        if found is None:
            self.cache.missing(digest, now)
            raise Unauthorized("Incorrect API key provided.")
        eff = effective_policy(found[1], found[0])
        self.cache.put(digest, eff, now)
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
            adm = await self._admit(eff.tenant_id, rid, p, want)
        except StoreUnavailable:
            if p.fail_closed:
                raise ServiceUnavailable(_UNREACHABLE) from None
            # this process's share of the limits, counted by this process
            adm = self._local.admit(eff.tenant_id, rid, self.fleet.share(p), want=want)
            if adm.hold is not None:  # settled where it was held, whatever the store does
                adm = replace(adm, hold=replace(adm.hold, local=True))
        if not adm.ok:
            raise _denied(adm)
        if adm.hold is not None:
            self._holds[rid] = adm.hold
        if p.max_concurrent_requests:
            self.leases.hold(eff.tenant_id, rid)
        return adm

    async def _admit(self, tenant_id: str, rid: str, p: Policy, want: Reserve) -> Admission:
        """Admission by the store; a tenant found full where this process's slots may be
        stale (the store failed since) is admitted again after they are reclaimed."""
        assert self.store is not None
        if not p.max_concurrent_requests:
            return await self.store.admit(tenant_id, rid, p, want)
        slot = self.leases.slot(rid)
        with self.leases.admitting(tenant_id, rid):
            adm = await self.store.admit(tenant_id, slot, p, want)
            if adm.denied == "concurrency" and await self.leases.reclaim(tenant_id):
                adm = await self.store.admit(tenant_id, slot, p, want)
        return adm

    async def free(self, eff: Effective, rid: str) -> None:
        """Give the request's concurrency slot back now, before its answer's last bytes
        leave: the client's next request must find it free (:meth:`done` then skips it)."""
        if eff.tenant_id is not None and eff.policy.max_concurrent_requests:
            await self.leases.release(eff.tenant_id, rid)

    async def done(
        self,
        eff: Effective,
        rid: str,
        tier: str,
        usage: dict[str, Any] | None,
        fallback: str | None,
        cost: float | None = None,
    ) -> None:
        """After the answer (off the critical path): free the slot, and count the usage and
        settle what the admission reserved in one atomic call (cancelled requests
        included); what the store cannot take now goes to the backlog."""
        hold = self._holds.pop(rid, None)
        if eff.tenant_id is None or self.store is None:
            return
        if hold is not None and hold.local:  # held by this replica: given back here
            self._local.debit(eff.tenant_id, 0, self.fleet.share(eff.policy), 0, hold)
            hold = None
        prompt = int((usage or {}).get("prompt_tokens") or 0)
        completion = int((usage or {}).get("completion_tokens") or 0)
        micro = round((cost or 0.0) * 1e6)  # counted in micro-USD: integers, atomic in Redis
        saved = int((usage or {}).get("cache_saved_tokens") or 0)  # a cache hit's
        used = Used(
            tier, prompt, completion, fallback, micro, settle_id=rid, at=time.time(), saved=saved
        )
        settle = self._settle(Unsettled(eff.tenant_id, used, eff.policy, hold))
        if eff.policy.max_concurrent_requests:
            await asyncio.gather(settle, self.release(eff.tenant_id, rid))
        else:
            await settle

    async def _settle(self, u: Unsettled) -> None:
        assert self.store is not None and self.backlog is not None
        try:
            await self.store.record_usage(u.tenant_id, u.used, u.policy, u.hold)
        except StoreUnavailable:
            share = self.fleet.share(u.policy)  # the limits this process enforces meanwhile
            self._local.debit(u.tenant_id, u.used.tokens, share, micro_usd=u.used.micro_usd)
            self.backlog.add(u)

    async def release(self, tenant_id: str, rid: str) -> None:
        """Free a concurrency slot: no longer renewed, given back here and in the store (one
        try: a release the store did not take is reclaimed when it answers, :mod:`.leases`)."""
        await self.leases.release(tenant_id, rid)

    def store_state(self) -> dict[str, Any] | None:
        """For ``/readyz``: the store's state (None: no store)."""
        return None if self.store is None else self.store.health.state()

    def prometheus(self) -> bytes:
        """The store's health, and what this replica holds on its behalf."""
        if self.store is None or self.backlog is None:
            return b""
        b = self.backlog
        lines = [
            "# HELP gateway_usage_unsettled usage waiting to be written to the store",
            "# TYPE gateway_usage_unsettled gauge",
            f"gateway_usage_unsettled {len(b)}",
            "# HELP gateway_usage_replayed_total usage written late, after the store came back",
            "# TYPE gateway_usage_replayed_total counter",
            f"gateway_usage_replayed_total {b.replayed}",
            "# HELP gateway_usage_dropped_total usage dropped: the backlog was full",
            "# TYPE gateway_usage_dropped_total counter",
            f"gateway_usage_dropped_total {b.dropped}",
            "# HELP gateway_slots_held concurrency slots this process holds and renews",
            "# TYPE gateway_slots_held gauge",
            f"gateway_slots_held {self.leases.held}",
            "# HELP gateway_slots_reclaimed_total slots of this process's ended requests that "
            "the store still held after a failure, removed when it answered",
            "# TYPE gateway_slots_reclaimed_total counter",
            f"gateway_slots_reclaimed_total {self.leases.reclaimed}",
            "# HELP gateway_keys_cached API keys cached by this process",
            "# TYPE gateway_keys_cached gauge",
            f"gateway_keys_cached {len(self.cache)}",
            "# HELP gateway_fleet_processes gateway processes sharing the store (last count)",
            "# TYPE gateway_fleet_processes gauge",
            f"gateway_fleet_processes {self.fleet.processes}",
        ]
        return self.store.health.prometheus() + ("\n".join(lines) + "\n").encode()

    async def close(self) -> None:
        await self.fleet.close()
        await self.leases.close()
        if self.backlog is not None:
            await self.backlog.close()


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
        h[H_LIMIT_REQUESTS] = str(adm.limit_requests)
        if adm.remaining_requests is not None:
            h[H_REMAINING_REQUESTS] = str(max(0, adm.remaining_requests))
        h[H_RESET_REQUESTS] = f"{60 / adm.limit_requests:.3f}s"
    if adm.limit_tokens is not None:
        h[H_LIMIT_TOKENS] = str(adm.limit_tokens)
        if adm.remaining_tokens is not None:
            h[H_REMAINING_TOKENS] = str(max(0, adm.remaining_tokens))
    return h
