"""Events (:class:`~gateway.store.base.EventBus`): every admin write announced to every
replica, through Redis pub/sub or in this process.

Redis: the subscriber reconnects by itself; it yields ``{"type": "store_down"}`` when it
lost the channel and ``{"type": "resync"}`` once it is subscribed again, so a consumer
re-reads whatever it may have missed meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import orjson

from gateway.store.redis_conn import RedisPart

_RECONNECT_S = 0.5


class RedisEvents(RedisPart):
    @property
    def _channel(self) -> str:
        return self._c.k("events")

    async def publish(self, event: dict[str, Any]) -> None:
        await self._c.call(self._c.r.publish(self._channel, orjson.dumps(event)))

    async def events(self) -> AsyncIterator[dict[str, Any]]:
        while True:
            sub = self._c.subscriber()
            try:
                await sub.subscribe(self._channel)
                yield {"type": "resync"}  # (re)subscribed: whatever we missed, re-read it
                while True:
                    msg = await sub.get_message(timeout=1.0)
                    if msg is not None and msg.get("type") == "message":
                        yield orjson.loads(msg["data"])
            except Exception:  # any trouble: say so, reconnect, then the consumer resyncs
                yield {"type": "store_down"}
                await asyncio.sleep(_RECONNECT_S)
            finally:
                with contextlib.suppress(Exception):
                    await sub.aclose()


class MemoryEvents:
    def __init__(self) -> None:
        super().__init__()
        self._listeners: list[asyncio.Queue[dict[str, Any]]] = []

    async def publish(self, event: dict[str, Any]) -> None:
        for q in self._listeners:
            q.put_nowait(event)

    async def events(self) -> AsyncIterator[dict[str, Any]]:
        q: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._listeners.append(q)
        try:
            while True:
                yield await q.get()
        finally:
            self._listeners.remove(q)
