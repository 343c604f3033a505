"""A request's concurrency slot is given back before the last bytes of its answer leave.

A client that sends one request at a time, exactly at its tenant's concurrency limit, sends
the next one as soon as it has read an answer. When the slot was given back after the
answer, in the background, that next request could reach the store first (on this worker
or another one) and find the tenant full: a 429 for about 1 request in 200. So a JSON
answer (or error) is sent once the slot is free, and a stream's end (its ``data: [DONE]``
event, else its end) waits for it in :class:`FreeAtEnd`. The wait is bounded like every
store call, and a release the store does not take is reclaimed when it answers
(:mod:`gateway.access.leases`).
"""

from __future__ import annotations

import asyncio

from gateway.dispatch.relay import Sink
from gateway.server.exchange import Exchange
from gateway.server.state import Gateway

_END = b"data: [DONE]"


async def free_slot(gw: Gateway, ex: Exchange) -> None:
    """Give ``ex``'s slot back now, if its tenant has a concurrency limit (once; what is
    left of it when the store is slow goes on in the background)."""
    eff, slot = ex.eff, ex.slot
    if eff is None or slot is None or eff.tenant_id is None:
        return
    if eff.policy.max_concurrent_requests:
        freeing = gw.spawn(gw.access.free(eff, slot))
        await asyncio.wait({freeing}, timeout=4 * gw.settings.redis_timeout)


class FreeAtEnd:
    """A stream's sink that gives the request's slot back before the stream's end goes
    out: before the write that carries ``data: [DONE]``, or else before the end of file."""

    def __init__(self, inner: Sink, gw: Gateway, ex: Exchange):
        self._inner = inner
        self._gw: Gateway | None = gw
        self._ex = ex

    async def write(self, data: bytes) -> None:
        if self._gw is not None and (data.startswith(_END) or b"\n" + _END in data):
            await self._free()
        await self._inner.write(data)

    async def write_eof(self, data: bytes = b"") -> None:
        await self._free()
        await self._inner.write_eof(data)

    async def _free(self) -> None:
        gw, self._gw = self._gw, None
        if gw is not None:
            await free_slot(gw, self._ex)
