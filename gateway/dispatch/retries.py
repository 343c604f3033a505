"""One tier's retries: the guards tenacity asks after each failed attempt, and its loop.

:class:`Retries` asks the dispatcher's guard (:meth:`Dispatcher.retry_guard`: every guard,
every time) after each failed attempt and keeps the wait it weighed (a ``Retry-After``, or
the jittered backoff); :func:`retried` runs tenacity's loop over the retries. The first
attempt runs before any of this is built (:meth:`Dispatcher._tier`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from tenacity import AsyncRetrying, RetryCallState, stop_after_attempt

from gateway.dispatch.fallback import verdict
from gateway.dispatch.opening import Opening
from gateway.upstream.failures import AttemptFailed

T = TypeVar("T")
Guard = Callable[[str, BaseException | None, int, Opening], tuple[str, float]]
log = logging.getLogger("gateway.dispatch")


class Retries:
    """The guards and waits of one tier's retries."""

    __slots__ = ("_guard", "_how", "_tier", "wait_s")

    def __init__(self, guard: Guard, tier: str, how: Opening):
        self._guard, self._tier, self._how = guard, tier, how
        self.wait_s = 0.0  # the wait the last guard weighed

    def allowed(self, s: RetryCallState) -> bool:
        e = s.outcome.exception() if s.outcome is not None else None
        return self.guard(e, s.attempt_number + 1)  # the first attempt ran before the loop

    def guard(self, e: BaseException | None, retry: int) -> bool:
        """After the ``retry``-th attempt failed with ``e``: whether the ``retry``-th retry
        may go (its wait kept for :meth:`wait`)."""
        why, self.wait_s = self._guard(self._tier, e, retry, self._how)
        if why and isinstance(e, AttemptFailed) and verdict(e).same_tier:
            log.debug("no retry %d on %s: %s", retry, self._tier, why)
        return not why

    def wait(self, s: RetryCallState) -> float:
        return self.wait_s


async def retried(
    attempt: Callable[[], Awaitable[T]],
    retries: Retries,
    limit: int,
    sleep: Callable[[float], Awaitable[None]],
) -> T:
    """Up to ``limit`` more attempts while ``retries`` allows each (tenacity's loop)."""
    retrying = AsyncRetrying(
        stop=stop_after_attempt(limit),
        retry=retries.allowed,
        wait=retries.wait,
        sleep=sleep,
        reraise=True,
    )
    try:
        async for a in retrying:
            with a:
                return await attempt()
    finally:
        # tenacity's objects refer to each other (a cycle: freed by a full collection only),
        # and their outcome holds the failure, whose traceback holds the request's frames
        # and body until then: let go of it now
        a.retry_state.outcome = None
    raise AssertionError("unreachable")  # pragma: no cover
