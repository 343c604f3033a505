"""Hedged requests ("The Tail at Scale", Dean and Barroso): when the first tier has
produced no token after a delay, the next tier starts beside it; the first answer that
passes its checks wins and the loser's connection is closed (its engine stops).

A token bucket caps hedges to a share of traffic, so an overloaded fast tier cannot
double the standard tier's load: each request earns ``share`` of a hedge, up to
``burst`` saved.

A same-tier retry after a transient fault (a 429's ``Retry-After``) and the hedge are
weighed, not raced blindly (:class:`HedgeWatch`): whichever would answer sooner goes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from gateway.upstream.failures import AttemptFailed

T = TypeVar("T")


class HedgeBudget:
    __slots__ = ("_burst", "_share", "_tokens", "fired", "requests")

    def __init__(self, share: float, burst: float):
        self._share = share
        self._burst = burst
        self._tokens = burst
        self.requests = 0
        self.fired = 0

    def earn(self) -> None:
        self.requests += 1
        self._tokens = min(self._burst, self._tokens + self._share)

    def take(self) -> bool:
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        self.fired += 1
        return True


@dataclass(slots=True)
class HedgeWatch:
    """What a hedged first attempt and its race tell each other, so that a same-tier retry
    that honours a ``Retry-After`` and the hedge never cancel each other blindly: the first
    attempt, told when the next tier would have a first token, retries only where that is
    sooner (else it gives up at once and the next tier answers); while its retry waits, the
    race holds the hedge back until the retry has had the hedge's delay too."""

    next_ttft: float  # seconds the next tier is expected to take to its first token
    retry_at: float = 0.0  # monotonic: a same-tier retry starts then
    fired: bool = False  # the hedge fired: a retry now runs beside it, the first answer wins


class BothFailed(Exception):
    def __init__(self, last: AttemptFailed):
        super().__init__(str(last))
        self.last = last


async def race(
    first: Callable[[], Awaitable[T]],
    second: Callable[[], Awaitable[T]],
    first_token: asyncio.Event,
    delay: float,
    allow: Callable[[], bool],
    watch: HedgeWatch | None = None,
) -> tuple[int, bool, T]:
    """``first``'s answer, or when it has no token after ``delay`` (and ``allow()``), the
    first good answer of ``first`` and ``second`` run side by side: (which won, whether
    the hedge fired, the answer).
    Raises the first's :class:`AttemptFailed` when it fails unhedged, :class:`BothFailed`
    when both did."""
    t1: asyncio.Future[T] = asyncio.ensure_future(first())
    try:
        await _until_done_or(t1, delay)
        while watch is not None and not (t1.done() or first_token.is_set()):
            hold = watch.retry_at + delay - time.monotonic()  # a Retry-After is honoured:
            if hold <= 0:  # the retry gets the hedge's delay too
                break
            await _until_done_or(t1, hold)
        if t1.done() or first_token.is_set() or not allow():
            return 0, False, await t1
    except BaseException:
        _drop_unused(None, t1)  # it answered as the client left: give its slot back
        raise
    if watch is not None:
        watch.fired = True
    t2: asyncio.Future[T] = asyncio.ensure_future(second())
    pending: set[asyncio.Future[Any]] = {t1, t2}
    last: AttemptFailed | None = None
    won: asyncio.Future[Any] | None = None
    try:
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for t in done:
                exc = t.exception()
                if exc is None:
                    won = t
                    return (0 if t is t1 else 1), True, t.result()
                if not isinstance(exc, AttemptFailed):
                    raise exc
                last = exc
    finally:
        for t in pending:
            t.cancel()  # the loser: its attempt closes the upstream connection
        await asyncio.gather(*pending, return_exceptions=True)
        _drop_unused(won, t1, t2)
    assert last is not None
    raise BothFailed(last)


async def _until_done_or(task: asyncio.Future[Any], delay: float) -> None:
    """Wait until ``task`` is done or ``delay`` has passed (``asyncio.wait`` does this at
    several times the cost). Cancelled meanwhile, ``task`` is cancelled too."""
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[None] = loop.create_future()

    def wake(_: object = None) -> None:
        if not waiter.done():
            waiter.set_result(None)

    timer = loop.call_later(delay, wake)
    task.add_done_callback(wake)
    try:
        await waiter
    except BaseException:
        task.cancel()  # the client left: the attempt closes its upstream connection
        raise
    finally:
        timer.cancel()
        task.remove_done_callback(wake)


def _drop_unused(won: asyncio.Future[Any] | None, *tasks: asyncio.Future[Any]) -> None:
    """An answer that arrived but did not win (both finished at once, or one finished as
    it was cancelled) still holds its engine slot and connection: give them back."""
    for t in tasks:
        if t is not won and t.done() and not t.cancelled() and t.exception() is None:
            discard = getattr(t.result(), "discard", None)
            if discard is not None:
                discard()
