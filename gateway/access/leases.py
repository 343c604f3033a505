"""The concurrency slots this replica holds, renewed while their requests run.

A slot is a lease (:data:`~gateway.tenancy.limits.SLOT_LEASE_MS`): this replica renews
every slot it holds every :data:`~gateway.tenancy.limits.SLOT_RENEW_S` seconds, in one
call per tenant, and stops when the request ends. A replica that dies stops renewing, so
its slots come back by themselves within one lease; a release that failed is harmless
for the same reason. The renewer runs only while slots are held.
"""

from __future__ import annotations

import asyncio
import contextlib

from gateway.errors import StoreUnavailable
from gateway.store.base import AdmissionStore
from gateway.tenancy.limits import SLOT_RENEW_S, LocalLimiter


class SlotLeases:
    def __init__(self, store: AdmissionStore | None, local: LocalLimiter):
        self._store = store
        self._local = local
        self._held: dict[str, set[str]] = {}  # tenant -> slot ids held here
        self._task: asyncio.Task[None] | None = None

    @property
    def held(self) -> int:
        return sum(len(r) for r in self._held.values())

    def hold(self, tenant_id: str, rid: str) -> None:
        self._held.setdefault(tenant_id, set()).add(rid)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._renew())

    def drop(self, tenant_id: str, rid: str) -> None:
        rids = self._held.get(tenant_id)
        if rids is not None:
            rids.discard(rid)
            if not rids:
                del self._held[tenant_id]

    async def _renew(self) -> None:
        while self._held:
            await asyncio.sleep(SLOT_RENEW_S)
            for tenant_id, rids in list(self._held.items()):
                self._local.renew(tenant_id, rids)
                if self._store is not None:
                    with contextlib.suppress(StoreUnavailable):
                        await self._store.renew(tenant_id, tuple(rids))

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
