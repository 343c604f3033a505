"""How many gateway processes share the store, and each one's share of a tenant's limits
while the store is unreachable.

Every process (each replica, each worker of a replica) writes a heartbeat into
``<prefix>fleet`` every :data:`BEAT_S` seconds, valid for :data:`BEAT_TTL_MS`, and reads
how many heartbeats are live. When the store degrades, the count stays what it last was:
a fail-open tenant's requests/minute, tokens/minute, concurrency and budgets are then
enforced by each process's own limiter at ``ceil(limit / processes)``, so the fleet as a
whole admits about the limit, not the limit once per process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid

from gateway.errors import StoreUnavailable
from gateway.store.base import AdmissionStore
from gateway.tenancy.tenants import Policy, divided

BEAT_S = 5.0
BEAT_TTL_MS = 15_000  # three beats: a process that stopped is not counted after this

log = logging.getLogger("gateway.access")


class FleetCount:
    def __init__(self, store: AdmissionStore | None):
        self._store = store
        self.member = uuid.uuid4().hex
        self.processes = 1
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._store is not None and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._beat())

    async def beat(self) -> None:
        """One heartbeat; the count is kept as it was when the store does not answer."""
        assert self._store is not None
        with contextlib.suppress(StoreUnavailable):
            n = max(1, await self._store.heartbeat(self.member, BEAT_TTL_MS))
            if n != self.processes:
                log.info("fleet: %d gateway processes share the store", n)
                self.processes = n

    async def _beat(self) -> None:
        while True:
            await self.beat()
            await asyncio.sleep(BEAT_S)

    def share(self, p: Policy) -> Policy:
        """``p`` with each limit divided among the processes (rounded up, at least 1); only
        while the store is unreachable, so a copy per request costs nothing that matters."""
        return p if self.processes <= 1 else divided(p, self.processes)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._store is not None:
            with contextlib.suppress(StoreUnavailable):
                await self._store.leave(self.member)  # the others count one fewer next beat
