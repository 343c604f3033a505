"""A same-tier retry that honours ``Retry-After`` inside a hedged request: the retry and the
hedge are weighed, not raced blindly — whichever would answer sooner goes — and the wait
reported in ``x-gateway-backoff-ms`` is the one that really happened (in memory)."""

from __future__ import annotations

import asyncio

import pytest

from gateway.dispatch.attempts import Dispatcher
from gateway.dispatch.outcome import Trail
from tests.memory_transport import Reply
from tests.test_dispatch_memory import OK_FAST, OK_STD, Rig, aio, by_tier


def _busy(after: float) -> Reply:
    return Reply(status=429, body=b'{"error": {"message": "busy"}}', retry_after=after)


@aio
async def test_a_short_retry_after_is_honoured_and_the_hedge_holds_back_meanwhile() -> None:
    # the standard tier has no first-token samples yet: 1 s expected; a 0.3 s wait is sooner
    rig = Rig(by_tier(highspeed=[_busy(0.3), OK_FAST], standard=OK_STD), hedge_after=0.05)
    out = await rig.dispatcher.complete(rig.call())
    assert out.tier == "highspeed" and out.trail.hedge is None  # no hedge during the wait
    assert "standard" not in rig.transports.by_tier or not rig.calls("standard")
    assert out.trail.backoff_s == pytest.approx(0.3)  # the Retry-After, honoured in full
    assert len(rig.calls("highspeed")) == 2


@aio
async def test_a_retry_after_longer_than_the_next_tier_takes_goes_there_at_once() -> None:
    rig = Rig(by_tier(highspeed=[_busy(2.0), OK_FAST], standard=OK_STD), hedge_after=0.05)
    for _ in range(3):  # the standard tier's first token: a few ms, seen
        rig.dispatcher.book.add("standard", "ttft", 0.01)
    out = await rig.dispatcher.complete(rig.call())
    assert out.tier == "standard" and out.trail.backoff_s == 0.0  # nothing was waited
    assert len(rig.calls("highspeed")) == 1
    assert [f.reason for f in out.trail.failures] == ["http_429"]


@aio
async def test_streams_weigh_them_too() -> None:
    rig = Rig(by_tier(highspeed=[_busy(0.3), OK_FAST], standard=OK_STD), hedge_after=0.05)
    relay = await rig.dispatcher.stream(rig.call(stream=True))
    assert relay.tier == "highspeed" and relay.trail.hedge is None
    assert relay.trail.backoff_s == pytest.approx(0.3)
    relay.abandon()


@aio
async def test_a_wait_cut_short_reports_what_was_waited() -> None:
    trail = Trail()
    sleeping = asyncio.ensure_future(Dispatcher._sleep(30.0, trail))
    await asyncio.sleep(0.05)
    sleeping.cancel()  # e.g. the hedge won while the retry waited
    await asyncio.gather(sleeping, return_exceptions=True)
    assert 0.05 <= trail.backoff_s < 30.0
