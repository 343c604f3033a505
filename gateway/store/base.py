"""Where tenants, keys, usage, the audit log and rule versions live: the interface.

One small protocol per concern — :class:`TenantStore`, :class:`KeyStore`,
:class:`AdmissionStore`, :class:`UsageStore`, :class:`AuditStore`, :class:`ShadowStore`,
:class:`RevealStore`, :class:`DemotionStore`, :class:`RolloutStore`,
:class:`LeaseStore`, :class:`EventBus`, and the rules' own
:class:`gateway.rules.control.RulesVersions` — joined as :class:`Store`. Each concern is
one module holding its implementations (``tenants``, ``keys``, ``admission``, ``usage``,
``records``, ``reveals``, ``versions``, ``demotions``, ``rollouts``, ``leases``,
``events``), joined three times:

* :class:`gateway.store.redis_store.RedisStore` — shared by every gateway replica: one
  Redis, a Sentinel-watched master or a Cluster, through one connection helper
  (:mod:`gateway.store.redis_conn`: key layout, bounded calls, the breaker). Tenant
  writes are compare-and-set (retried), so concurrent admin writes never lose an update.
  Admission and settling are one Lua call each (:mod:`gateway.tenancy.limits`), on keys
  of one hash slot. Every write announces itself on a pub/sub channel (a typed event,
  :mod:`gateway.store.events`), so other replicas drop their cached copies at once.
* :class:`gateway.store.sqlite_store.SqliteStore` — the embedded default: one SQLite file
  (:mod:`gateway.store.sqlite_db`) shared by the worker processes of one machine, kept
  across restarts; limits and usage counted in process, usage written back every second.
* :class:`gateway.store.memory_store.MemoryStore` — the same in one process, forgotten when
  it stops (``GATEWAY_STORE_PATH=:memory:``, tests).

Errors talking to Redis surface as :class:`StoreUnavailable`; callers decide whether
to serve from their cache (fail-open) or refuse (fail-closed). Whether the store is
degraded right now is its :attr:`Lifecycle.health`.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from gateway.rules.control import RulesVersions
from gateway.store.demotions import Demotion
from gateway.store.events import Event
from gateway.store.health import StoreHealth
from gateway.tenancy.limits import NO_RESERVE, Admission, Hold, Reserve
from gateway.tenancy.tenants import ApiKey, Policy, Tenant

AUDIT_MAX = 10_000
SHADOW_MAX = 5_000  # shadow comparisons kept for `evals quality --shadow`
RULES_MAX = 100


class Conflict(Exception):
    """A versioned write lost too many races in a row."""


class Lifecycle(Protocol):
    @property
    def health(self) -> StoreHealth: ...
    async def ping(self) -> bool: ...
    async def close(self) -> None: ...


class TenantStore(Protocol):
    async def create_tenant(self, t: Tenant) -> None: ...
    async def get_tenant(self, tenant_id: str) -> Tenant | None: ...
    async def list_tenants(self) -> list[Tenant]: ...
    async def update_tenant(
        self, tenant_id: str, change: Callable[[Tenant], Tenant]
    ) -> Tenant | None: ...
    async def delete_tenant(self, tenant_id: str) -> list[ApiKey] | None: ...


class KeyStore(Protocol):
    async def add_key(self, k: ApiKey) -> None: ...
    async def get_key(self, key_id: str) -> ApiKey | None: ...
    async def key_by_digest(self, digest: str) -> tuple[ApiKey, Tenant] | None: ...
    async def list_keys(self, tenant_id: str) -> list[ApiKey]: ...
    async def delete_key(self, key_id: str) -> ApiKey | None: ...


class AdmissionStore(Protocol):
    async def admit(
        self, tenant_id: str, rid: str, p: Policy, want: Reserve = NO_RESERVE
    ) -> Admission: ...
    async def release(self, tenant_id: str, rid: str) -> None: ...
    async def sync_slots(
        self,
        tenant_id: str,
        owner: str,
        held: Collection[str],
        admitting: Collection[str],
        readd: bool,
    ) -> int:
        """Make the slots of ``tenant_id`` named by ``owner`` (a prefix: one gateway
        process's) what that process holds: the ``held`` ones renewed for another lease
        (``readd``: also added back where the store lost them), its others removed unless
        their admission is in flight (``admitting``). How many were removed
        (:mod:`gateway.access.leases`)."""

    async def heartbeat(self, member: str, ttl_ms: int) -> int:
        """Say that gateway process ``member`` shares the store for ``ttl_ms`` more; how many
        processes say so now (this one included)."""

    async def leave(self, member: str) -> None: ...


class UsageStore(Protocol):
    async def record_usage(
        self,
        tenant_id: str,
        used: Used,
        p: Policy,
        hold: Hold | None = None,
    ) -> None: ...
    async def usage(self, tenant_id: str, day: str | None = None) -> Usage: ...


class AuditStore(Protocol):
    async def audit(self, entry: dict[str, Any]) -> None: ...
    async def audit_log(self, limit: int = 100) -> list[dict[str, Any]]: ...


class ShadowStore(Protocol):
    async def push_shadow(self, rec: dict[str, Any]) -> None: ...
    async def shadow_records(self, limit: int = 1000) -> list[dict[str, Any]]: ...


class ReviewStore(Protocol):
    """The review queue: a sample of what the quality gate caught, for people to label
    (:mod:`gateway.store.review`); at most ``cap`` items, none older than ``ttl_s``."""

    async def push_review(self, item: dict[str, Any], cap: int, ttl_s: float) -> None: ...
    async def reviews(
        self, limit: int = 100, check: str | None = None, label: str | None = None
    ) -> list[dict[str, Any]]:
        """Newest first; ``label`` "none": the unlabeled ones."""
        ...

    async def review(self, rid: str) -> dict[str, Any] | None: ...
    async def label_review(
        self, rid: str, label: str, by: str, at: float
    ) -> dict[str, Any] | None: ...


class RevealStore(Protocol):
    """A value kept for one reading (a new key the console shows once), then gone; gone
    after ``ttl_s`` unread too (:mod:`gateway.store.reveals`)."""

    async def put_reveal(self, token: str, doc: bytes, ttl_s: float) -> None: ...
    async def take_reveal(self, token: str) -> bytes | None: ...


class DemotionStore(Protocol):
    """The quality circuit's demotions, shared by every replica (:mod:`gateway.store.demotions`)."""

    async def demote(self, d: Demotion, replace: bool = False) -> Demotion:
        """Record ``d`` unless a live demotion of its rule and tier is there and not
        ``replace``; the record that holds afterwards (numbered by the store)."""

    async def restore(self, rule: str, tier: str, version: int | None = None) -> Demotion | None:
        """End the demotion of ``rule`` and ``tier`` (only if it is ``version``, when given):
        the record ended, or None."""

    async def demotions(self) -> list[Demotion]:
        """The live demotions (not past their ``until``)."""

    async def probed(self, d: Demotion, failed: bool, keep: int) -> str | None:
        """One more probe verdict of the demotion ``d`` (of its version only): the latest
        ``keep`` verdicts, newest first (``"1"`` failed, ``"0"`` passed); None when ``d``
        is no longer the record."""


class SessionStore(Protocol):
    """Console sessions ended before they expire (a logout), shared by every process that
    shares the store (:mod:`gateway.store.sessions`)."""

    async def end_session(self, sid: str, until: float) -> None:
        """Session ``sid`` is over; remembered until ``until`` (epoch s), when it expires."""

    async def session_ended(self, sid: str) -> bool: ...


class RolloutStore(Protocol):
    """Judged rollouts: each arm's counts summed over every replica, in time buckets, and
    each analysed rule's rollout record (:mod:`gateway.store.rollouts`)."""

    async def count_rollout(self, rule: str, counts: Mapping[tuple[int, str], int]) -> None:
        """Add ``counts`` (field ``(bucket start in ms, name)``: a number) to ``rule``'s."""

    async def rollout_counts(self, rule: str, since_ms: int) -> dict[str, int]:
        """Each name's sum over ``rule``'s buckets from ``since_ms`` on (the older buckets are
        dropped)."""

    async def put_rollout(self, rule: str, doc: dict[str, Any]) -> None: ...
    async def rollouts(self) -> dict[str, dict[str, Any]]: ...


class LeaseStore(Protocol):
    """One holder of a named job among the processes sharing the store, with an expiry
    (:mod:`gateway.store.leases`)."""

    async def hold_lease(self, name: str, owner: str, ttl_s: float) -> bool:
        """Take the lease when it is free or expired, renew it when ``owner`` holds it: True
        when ``owner`` holds it for ``ttl_s`` more seconds."""

    async def drop_lease(self, name: str, owner: str) -> None: ...
    async def lease_holder(self, name: str) -> str | None: ...


class EventBus(Protocol):
    """Every replica's view of the store's writes. The writes announce themselves; a
    consumer iterates :meth:`events` and ``match``es on the event types."""

    async def publish(self, event: Event) -> None: ...
    def events(self) -> AsyncIterator[Event]: ...


class Store(
    Lifecycle,
    TenantStore,
    KeyStore,
    AdmissionStore,
    UsageStore,
    AuditStore,
    ShadowStore,
    ReviewStore,
    RevealStore,
    RulesVersions,
    DemotionStore,
    SessionStore,
    RolloutStore,
    LeaseStore,
    EventBus,
    Protocol,
):
    """Every concern in one object, as both implementations provide it; a consumer types
    its argument as the narrow protocol it uses (:class:`KeyStore`, :class:`UsageStore`...)."""


def today(at: float | None = None) -> str:
    """The date (UTC) of ``at`` (default: now) as the usage key suffix, ``YYYYMMDD``."""
    return time.strftime("%Y%m%d", time.gmtime(at))


@dataclass(frozen=True, slots=True)
class Used:
    """What one answered request used. Cost is counted in micro-USD, so that every
    counter stays an integer (atomic increments in Redis)."""

    tier: str
    prompt: int
    completion: int
    fallback: str | None = None
    micro_usd: int = 0
    settle_id: str | None = None  # the request's own id: settling twice counts once
    at: float = 0.0  # when it was used (epoch s; 0: now): the day and budget period it counts in
    saved: int = 0  # a response-cache hit: the engine tokens its stored answer had cost

    @property
    def tokens(self) -> int:
        return self.prompt + self.completion


# the usage counters of a day, by name: a plain count, or a prefix and what it counts by
_TOKENS_BY = "tokens:"
_FALLBACKS_BY = "fallbacks:"
_COST = "cost_micro_usd"
_COST_BY = _COST + ":"


def usage_fields(u: Used) -> list[tuple[str, int]]:
    """The usage counters one answered request adds to: (field, amount); read back by
    :meth:`Usage.decode`."""
    out = [
        ("requests", 1),
        (_TOKENS_BY + u.tier, u.tokens),
        ("prompt_tokens", u.prompt),
        ("completion_tokens", u.completion),
    ]
    if u.micro_usd:
        out += [(_COST, u.micro_usd), (_COST_BY + u.tier, u.micro_usd)]
    if u.fallback:
        out.append((_FALLBACKS_BY + u.fallback, 1))
    if u.saved:
        out += [("cache_hits", 1), ("cache_saved_tokens", u.saved)]
    return out


@dataclass(frozen=True, slots=True)
class Usage:
    """A tenant's usage of one day, as :func:`usage_fields` counted it. Cost in micro-USD."""

    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    tokens_by_tier: Mapping[str, int] = field(default_factory=dict)
    fallbacks_by_reason: Mapping[str, int] = field(default_factory=dict)
    cost_micro_usd: int = 0
    cost_micro_usd_by_tier: Mapping[str, int] = field(default_factory=dict)
    cache_hits: int = 0
    cache_saved_tokens: int = 0

    @classmethod
    def decode(cls, counters: Mapping[str, int]) -> Usage:
        """The record of a day's stored counters; a counter it does not know is skipped
        (one a newer gateway adds)."""

        def by(prefix: str) -> dict[str, int]:
            return {k.removeprefix(prefix): n for k, n in counters.items() if k.startswith(prefix)}

        return cls(
            requests=counters.get("requests", 0),
            prompt_tokens=counters.get("prompt_tokens", 0),
            completion_tokens=counters.get("completion_tokens", 0),
            tokens_by_tier=by(_TOKENS_BY),
            fallbacks_by_reason=by(_FALLBACKS_BY),
            cost_micro_usd=counters.get(_COST, 0),
            cost_micro_usd_by_tier=by(_COST_BY),
            cache_hits=counters.get("cache_hits", 0),
            cache_saved_tokens=counters.get("cache_saved_tokens", 0),
        )
