"""Usage that could not be written while the store was away, written when it answers.

Settling is idempotent by the request's id and carries when the usage happened, so a
replay counts once, in its own day and budget period. The backlog is bounded
(``max_entries``; the oldest are dropped first, and counted) and replayed in order by one
task, retried every ``RETRY_S`` seconds until the store takes it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from dataclasses import dataclass

from gateway.errors import StoreUnavailable
from gateway.store.base import UsageStore, Used
from gateway.tenancy.limits import Hold
from gateway.tenancy.tenants import Policy

RETRY_S = 1.0


@dataclass(frozen=True, slots=True)
class Unsettled:
    tenant_id: str
    used: Used
    policy: Policy
    hold: Hold | None


class UsageBacklog:
    def __init__(self, store: UsageStore, max_entries: int = 100_000):
        self._store = store
        self._q: deque[Unsettled] = deque()
        self._max = max_entries
        self.replayed = 0
        self.dropped = 0
        self._task: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        return len(self._q)

    def add(self, u: Unsettled) -> None:
        if len(self._q) >= self._max:
            self._q.popleft()
            self.dropped += 1
        self._q.append(u)
        self.kick()

    def kick(self) -> None:
        """Start replaying, if there is something to replay and nobody is at it."""
        if self._q and (self._task is None or self._task.done()):
            self._task = asyncio.get_running_loop().create_task(self._replay())

    async def _replay(self) -> None:
        while self._q:
            u = self._q[0]
            try:
                await self._store.record_usage(u.tenant_id, u.used, u.policy, u.hold)
            except StoreUnavailable:
                await asyncio.sleep(RETRY_S)
                continue
            if self._q and self._q[0] is u:
                self._q.popleft()
            self.replayed += 1

    async def close(self, flush_s: float = 2.0) -> None:
        """Stop replaying; one last try (within ``flush_s``) for what is still here."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        with contextlib.suppress(TimeoutError, StoreUnavailable):
            async with asyncio.timeout(flush_s):
                while self._q:
                    u = self._q[0]
                    await self._store.record_usage(u.tenant_id, u.used, u.policy, u.hold)
                    self._q.popleft()
                    self.replayed += 1
