"""One retry loop per tier, every guard on every pass (``same_tier_retries: 3``): retries
stop when the engine answers, when the retries are spent, when the tier's circuit opens,
when the attempt's budget (the next tiers' reserve kept) has no room for the wait and an
attempt, and when the next tier would answer before the retry could (in memory)."""

from __future__ import annotations

import time

import pytest

from gateway.dispatch.attempts import Dispatcher
from gateway.telemetry.recorder import Telemetry
from gateway.upstream.pools import Pools
from tests.memory_transport import Reply, Transports
from tests.test_dispatch_memory import OK_FAST, OK_STD, Rig, aio, by_tier

DOWN = Reply(status=503, body=b'{"error": {"message": "overloaded"}}')


def _busy(after: float) -> Reply:
    return Reply(status=429, body=b'{"error": {"message": "busy"}}', retry_after=after)


def _rig(handler: object, circuit_failures: int = 1000, **kw: object) -> Rig:
    rig = Rig(handler, **kw)  # type: ignore[arg-type]
    if circuit_failures != 1000:  # a circuit that opens after a few failures
        tiers = {
            name: t.model_copy(
                update={"circuit": t.circuit.model_copy(update={"failures": circuit_failures})}
            )
            for name, t in rig.rules.tiers.items()
        }
        rig.rules = rig.rules.model_copy(update={"tiers": tiers})
        rig.transports = Transports(handler)  # type: ignore[arg-type]
        rig.pools = Pools(dict(rig.rules.tiers), rig.transports)
        rig.dispatcher = Dispatcher(
            rig.pools, rig.dispatcher._checks, rig.rules.dispatch, Telemetry()
        )
    return rig


@aio
async def test_three_retries_when_the_engine_keeps_failing_and_nothing_is_sooner() -> None:
    rig = _rig(by_tier(highspeed=DOWN, standard=OK_STD), same_tier_retries=3)
    out = await rig.dispatcher.complete(rig.call())
    assert out.tier == "standard"
    assert len(rig.calls("highspeed")) == 4  # the attempt and three retries
    assert [f.reason for f in out.trail.failures] == ["http_503"] * 4
    assert out.trail.backoff_s == pytest.approx(0.01 + 0.02 + 0.04, abs=0.01)  # doubled


@aio
async def test_a_retry_that_succeeds_ends_the_loop() -> None:
    rig = _rig(by_tier(highspeed=[DOWN, DOWN, OK_FAST], standard=OK_STD), same_tier_retries=3)
    out = await rig.dispatcher.complete(rig.call())
    assert out.tier == "highspeed" and len(rig.calls("highspeed")) == 3
    assert not rig.transports.by_tier.get("standard") or not rig.calls("standard")


@aio
async def test_no_retry_goes_into_an_open_circuit() -> None:
    # the circuit opens after 2 consecutive failures: the third attempt would go into it
    rig = _rig(by_tier(highspeed=DOWN, standard=OK_STD), circuit_failures=2, same_tier_retries=3)
    out = await rig.dispatcher.complete(rig.call())
    assert out.tier == "standard"
    assert len(rig.calls("highspeed")) == 2
    assert not rig.pools["highspeed"].available(time.monotonic())


@aio
async def test_every_retry_honours_retry_after() -> None:
    replies = [_busy(0.05), _busy(0.05), _busy(0.05), OK_FAST]
    rig = _rig(by_tier(highspeed=replies, standard=OK_STD), same_tier_retries=3)
    out = await rig.dispatcher.complete(rig.call())
    assert out.tier == "highspeed" and len(rig.calls("highspeed")) == 4
    assert out.trail.backoff_s == pytest.approx(0.15, abs=0.03)


@aio
async def test_a_retry_that_would_eat_the_fallbacks_reserve_is_not_made() -> None:
    # 0.01 s, then a Retry-After of 30 s: the third attempt cannot fit the attempt's budget
    replies = [DOWN, _busy(30.0), OK_FAST]
    rig = _rig(by_tier(highspeed=replies, standard=OK_STD), same_tier_retries=3)
    out = await rig.dispatcher.complete(rig.call(deadline=5.0))
    assert out.tier == "standard" and len(rig.calls("highspeed")) == 2
    assert out.trail.backoff_s < 0.5  # the 30 s were never waited


@aio
async def test_a_later_retry_yields_to_a_sooner_next_tier_too() -> None:
    # hedged: the standard tier's first token is known to take ~10 ms; the first retry's
    # short wait is sooner, the second retry's Retry-After of 2 s is not: it moves on then
    replies = [_busy(0.01), _busy(2.0), OK_FAST]
    rig = _rig(by_tier(highspeed=replies, standard=OK_STD), hedge_after=5.0, same_tier_retries=3)
    for _ in range(3):
        rig.dispatcher.book.add("standard", "ttft", 0.01)
    out = await rig.dispatcher.complete(rig.call())
    assert out.tier == "standard"
    assert len(rig.calls("highspeed")) == 2
    assert out.trail.backoff_s < 0.5


@aio
async def test_a_fault_that_is_not_transient_is_never_retried() -> None:
    cut = Reply(chunks=[b"data: {bad json\n\n"])
    rig = _rig(by_tier(highspeed=cut, standard=OK_STD), same_tier_retries=3)
    out = await rig.dispatcher.complete(rig.call())
    assert out.tier == "standard" and len(rig.calls("highspeed")) == 1
