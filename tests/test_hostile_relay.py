"""A slow-reading client is backpressure, not an engine fault.

While the gateway waits for the client to take its writes, the engine's stream is not
read; a timeout that fires then is the client's doing (``client_slow``) and does not count
against the tier's circuit. The same timeout with a fast client is the engine's (``stall``).
"""

from __future__ import annotations

import asyncio

from gateway.dispatch.relay import StreamRelay
from tests.memory_transport import Reply, events
from tests.test_dispatch_memory import OK_STD, Rig, Sink, aio, by_tier


class SlowSink(Sink):
    async def write(self, data: bytes) -> None:
        await asyncio.sleep(0.1)  # the client's socket buffer is full
        await super().write(data)


WORDS = [f"word{i} " for i in range(12)]


async def _run(sink: Sink) -> tuple[Rig, StreamRelay]:
    fast = Reply(chunks=events(WORDS), hang_after=10)  # then silent past the stall limit
    rig = Rig(by_tier(highspeed=fast, standard=OK_STD))
    relay = await rig.dispatcher.stream(rig.call(stream=True))
    await relay.run(sink)
    return rig, relay


@aio
async def test_a_timeout_behind_a_slow_reader_is_not_the_engines_fault() -> None:
    rig, relay = await _run(SlowSink())
    kinds = [f.reason for f in relay.trail.failures]
    assert kinds == ["client_slow"]
    assert rig.pools.by_tier["highspeed"].circuit.failures == 0


@aio
async def test_the_same_timeout_with_a_fast_reader_is_a_stall() -> None:
    rig, relay = await _run(Sink())
    kinds = [f.reason for f in relay.trail.failures]
    assert kinds == ["stall"]
    assert rig.pools.by_tier["highspeed"].circuit.failures == 1
