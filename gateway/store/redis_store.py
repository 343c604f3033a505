"""The Redis :class:`gateway.store.base.Store`, shared by every gateway replica: each
concern's Redis part, joined over one :class:`~gateway.store.redis_conn.RedisConn`.

See :mod:`gateway.store.redis_conn` for the key layout, the bounds on every call and the
breaker; each concern's module for its own keys and consistency rules.
"""

from __future__ import annotations

from typing import Any

from gateway.settings import Settings
from gateway.store.admission import RedisAdmission
from gateway.store.demotions import RedisDemotions
from gateway.store.events import RedisEvents
from gateway.store.health import StoreHealth
from gateway.store.keys import RedisKeys
from gateway.store.leases import RedisLeases
from gateway.store.records import RedisAudit, RedisShadow
from gateway.store.redis_conn import RedisConn
from gateway.store.reveals import RedisReveals
from gateway.store.review import RedisReview
from gateway.store.rollouts import RedisRollouts
from gateway.store.sessions import RedisSessions
from gateway.store.tenants import RedisTenants
from gateway.store.usage import RedisUsage
from gateway.store.versions import RedisRules
from gateway.storeurl import store_target


class RedisStore(
    RedisTenants,
    RedisKeys,
    RedisAdmission,
    RedisUsage,
    RedisAudit,
    RedisShadow,
    RedisReview,
    RedisReveals,
    RedisRules,
    RedisDemotions,
    RedisSessions,
    RedisRollouts,
    RedisLeases,
    RedisEvents,
):
    """The shared store. ``url``: any ``GATEWAY_REDIS_URL`` (one Redis, Sentinel, Cluster)."""

    def __init__(
        self,
        url: str,
        prefix: str = "gw:",
        timeout: float = 0.5,
        max_connections: int = 128,
        pool_wait: float | None = None,
        health: StoreHealth | None = None,
    ):
        target = store_target(url)
        super().__init__(RedisConn(target, prefix, timeout, max_connections, pool_wait, health))

    @classmethod
    def from_settings(cls, s: Settings) -> RedisStore:
        assert s.redis_url is not None
        kind = store_target(s.redis_url).kind
        health = StoreHealth(
            kind, s.redis_breaker_failures, s.redis_probe_interval, span=s.redis_timeout
        )
        return cls(
            s.redis_url,
            s.redis_prefix,
            s.redis_timeout,
            s.redis_max_connections,
            s.redis_pool_wait,
            health,
        )

    @property
    def conn(self) -> RedisConn:
        return self._c

    @property
    def client(self) -> Any:
        """The Redis client (its pool), for what keeps its own keys here: the response cache."""
        return self._c.r

    @property
    def health(self) -> StoreHealth:
        return self._c.health

    async def ping(self) -> bool:
        return await self._c.ping()

    async def close(self) -> None:
        await self._c.close()

    async def delete_prefix(self) -> None:
        """Remove everything under this store's prefix (tests)."""
        await self._c.delete_prefix()
