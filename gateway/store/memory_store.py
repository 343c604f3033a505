"""The in-process :class:`gateway.store.base.Store` (``GATEWAY_STORE_PATH=:memory:``: one
process, forgotten when it stops; tests), each concern's in-process part joined."""

from __future__ import annotations

from gateway.store.admission import MemoryAdmission
from gateway.store.demotions import MemoryDemotions
from gateway.store.events import MemoryEvents
from gateway.store.health import StoreHealth
from gateway.store.keys import MemoryKeys
from gateway.store.leases import MemoryLeases
from gateway.store.records import MemoryAudit, MemoryShadow
from gateway.store.reveals import MemoryReveals
from gateway.store.review import MemoryReview
from gateway.store.rollouts import MemoryRollouts
from gateway.store.sessions import MemorySessions
from gateway.store.tenants import MemoryTenants
from gateway.store.usage import MemoryUsage
from gateway.store.versions import MemoryRules


class MemoryStore(
    MemoryTenants,
    MemoryKeys,
    MemoryAdmission,
    MemoryUsage,
    MemoryAudit,
    MemoryShadow,
    MemoryReview,
    MemoryReveals,
    MemoryRules,
    MemoryDemotions,
    MemorySessions,
    MemoryRollouts,
    MemoryLeases,
    MemoryEvents,
):
    """Everything in this process; nothing survives a restart. Never degraded."""

    def __init__(self) -> None:
        super().__init__()
        self._health = StoreHealth("memory")

    @property
    def health(self) -> StoreHealth:
        return self._health

    async def ping(self) -> bool:
        return True

    async def close(self) -> None:
        return None
