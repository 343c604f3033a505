"""Single flight: concurrent identical requests share one generation.

The first cacheable miss for a key *leads*: it registers a future and generates. An
identical request that arrives meanwhile *follows*: it waits (bounded by its own budget)
for the leader's answer, and gets it once that answer passed the checks and is kept —
from memory, before it has even reached the store. When the leader's answer is not kept
(a failed check, an incomplete answer, an error, the client gone), followers generate
their own. In process only: a burst spread over N replicas reaches the engine at most N
times.
"""

from __future__ import annotations

import asyncio
import contextlib

from gateway.cache.entry import Entry


class Flights:
    def __init__(self) -> None:
        self._running: dict[str, asyncio.Future[Entry | None]] = {}

    def __len__(self) -> int:
        return len(self._running)

    def lead(self, key: str) -> asyncio.Future[Entry | None] | None:
        """A new flight for ``key`` (the caller leads), or None when one is running."""
        if key in self._running:
            return None
        fut: asyncio.Future[Entry | None] = asyncio.get_running_loop().create_future()
        self._running[key] = fut
        return fut

    async def follow(self, key: str, budget: float) -> Entry | None:
        """The running flight's answer, if it comes within ``budget`` seconds and is kept."""
        fut = self._running.get(key)
        if fut is None or budget <= 0:
            return None
        with contextlib.suppress(TimeoutError):
            return await asyncio.wait_for(asyncio.shield(fut), budget)
        return None

    def land(self, key: str, fut: asyncio.Future[Entry | None], entry: Entry | None) -> None:
        """The leader is done: followers get ``entry`` (None: they generate their own)."""
        if self._running.get(key) is fut:
            del self._running[key]
        if not fut.done():
            fut.set_result(entry)
