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
    when both did.

    ``first`` runs in the caller's task, not a task of its own: most requests never hedge,
    and a task would cost them a turn of the loop and its bookkeeping (about 12 us). A
    timer starts ``second`` as a task; when that wins, it cancels the caller's task, which
    stops ``first`` where it waits (its connection closed, its slot freed), as
    :func:`asyncio.timeout` does."""
    h = _Hedge(second, first_token, delay, allow, watch)
    try:
        value = await first()
    except asyncio.CancelledError:
        if not h.ours():  # the client left: the hedge goes too
            await h.drop()
            raise
        assert h.t2 is not None
        return 1, True, h.t2.result()  # it won (or failed in a way that is not a fallback)
    except AttemptFailed as e:
        h.ours()
        if h.t2 is None:
            raise
        try:
            return 1, True, await _second_of(h.t2, e)
        except BaseException:
            await h.drop()
            raise
    except BaseException:
        h.ours()
        await h.drop()
        raise
    h.ours()
    fired = h.t2 is not None
    await h.drop()  # the hedge lost: its attempt closes its upstream connection
    return 0, fired, value


async def _second_of(t2: asyncio.Future[T], first_error: AttemptFailed) -> T:
    """The hedge's answer, the first attempt having failed; both failed: :class:`BothFailed`."""
    try:
        return await asyncio.shield(t2)  # the caller's cancellation is the caller's to handle
    except AttemptFailed as e:
        raise BothFailed(e) from None


class _Hedge:
    """The timer that starts the hedge, and the hedge's task once it started."""

    __slots__ = ("_allow", "_cancelled", "_delay", "_ended", "_me", "_second", "_timer",
                 "_token", "_watch", "t2")  # fmt: skip

    def __init__(
        self,
        second: Callable[[], Awaitable[Any]],
        first_token: asyncio.Event,
        delay: float,
        allow: Callable[[], bool],
        watch: HedgeWatch | None,
    ):
        self._second, self._token, self._delay = second, first_token, delay
        self._allow, self._watch = allow, watch
        self._me = asyncio.current_task()
        self._ended = self._cancelled = False
        self.t2: asyncio.Future[Any] | None = None
        self._timer: asyncio.TimerHandle | None = asyncio.get_running_loop().call_later(
            delay, self._due
        )

    def _due(self) -> None:
        self._timer = None
        if self._ended or self._token.is_set():
            return
        w = self._watch
        if w is not None:  # a same-tier retry that waits out a Retry-After gets the delay too
            hold = w.retry_at + self._delay - time.monotonic()
            if hold > 0:
                self._timer = asyncio.get_running_loop().call_later(hold, self._due)
                return
        if not self._allow():
            return
        if w is not None:
            w.fired = True
        self.t2 = t2 = asyncio.ensure_future(self._second())
        t2.add_done_callback(self._second_done)

    def _second_done(self, t2: asyncio.Future[Any]) -> None:
        if self._ended or t2.cancelled():
            return
        exc = t2.exception()
        if exc is not None and isinstance(exc, AttemptFailed):
            return  # the first attempt may still answer
        self._cancelled = True  # it answered (or broke): the first attempt stops
        assert self._me is not None
        self._me.cancel()

    def ours(self) -> bool:
        """The first attempt is over: no hedge starts now. True when the hedge stopped it
        (and no one else asked the task to stop meanwhile)."""
        self._ended = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._cancelled:
            return False
        self._cancelled = False
        assert self._me is not None
        return self._me.uncancel() == 0

    async def drop(self) -> None:
        """The hedge is not used: stop it; an answer it had already gives its slot back."""
        t2 = self.t2
        if t2 is None:
            return
        if not t2.done():
            t2.cancel()  # the loser: its attempt closes the upstream connection
            await asyncio.gather(t2, return_exceptions=True)
        _drop_unused(None, t2)


def _drop_unused(won: asyncio.Future[Any] | None, *tasks: asyncio.Future[Any]) -> None:
    """An answer that arrived but did not win (both finished at once, or one finished as
    it was cancelled) still holds its engine slot and connection: give them back."""
    for t in tasks:
        if t is not won and t.done() and not t.cancelled() and t.exception() is None:
            discard = getattr(t.result(), "discard", None)
            if discard is not None:
                discard()
