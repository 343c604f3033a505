"""The minimum-rate guard: a stream that trickles is a failure, like one that stalls.

The stall limit catches silence; a tier that answers a token every few seconds never
stalls, yet would take minutes for an answer. After its first token, a stream must
deliver at least ``min_tokens_per_s`` output events per second over every ``rate_window``
seconds (measured when a read arrives; silence is the stall limit's). Only where another
tier can take over (a fallback before the first byte, a continuation after it): on a
chain's last tier a slow answer is still the best one there is. Time the relay spent
blocked on a slow client is not the engine's and is not counted.
"""

from __future__ import annotations

from gateway.rules.schema import Timeouts
from gateway.upstream.failures import TooSlow


class RateGuard:
    __slots__ = ("_at", "_events", "_rate", "_window")

    def __init__(self, rate: float, window: float) -> None:
        self._rate = rate
        self._window = window
        self._at: float | None = None  # the window's start (the first token's time at first)
        self._events = 0  # output events at the window's start

    @classmethod
    def of(cls, t: Timeouts) -> RateGuard | None:
        """The tier's guard, or None where it is off."""
        return cls(t.min_tokens_per_s, t.rate_window) if t.min_tokens_per_s > 0 else None

    def check(self, events: int, now: float) -> None:
        """Raise :class:`TooSlow` when the window that just ended had too few output events."""
        at = self._at
        if at is None:
            if events:  # the clock starts at the first token
                self._at, self._events = now, events
            return
        elapsed = now - at
        if elapsed < self._window:
            return
        got = events - self._events
        if got < self._rate * elapsed:
            raise TooSlow(
                f"{got / elapsed:.2g} tokens/s over {elapsed:.1f}s (at least {self._rate:g})"
            )
        self._at, self._events = now, events
