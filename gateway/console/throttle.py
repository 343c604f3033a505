"""Failed console logins, throttled per client and in total.

Each is a token bucket of failures: a client may fail :data:`PER_CLIENT` times at once, then
once every :data:`CLIENT_REFILL_S` seconds; all clients together :data:`TOTAL` times at
once, then once every :data:`TOTAL_REFILL_S`. While either is empty the login page answers
429 with ``Retry-After`` *without looking at the token*, so a throttled guesser learns
nothing, not even from a right guess. A login that succeeds costs nothing.

Buckets live in each worker process (a login is a few per day; guesses are what is
counted): a fleet of N processes takes at most N times the total. The admin API, which
takes the token in a header on every call, is not throttled here. The client is the
address the request came from (:mod:`gateway.admin.forwarded`: the real client behind a
trusted proxy).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

PER_CLIENT = 5
CLIENT_REFILL_S = 12.0  # 5 a minute after the first 5
TOTAL = 30
TOTAL_REFILL_S = 1.0  # one a second after the first 30, whatever the addresses
CLIENTS_MAX = 10_000  # clients remembered; past it, those whose bucket refilled go first


class _Bucket:
    __slots__ = ("at", "level")

    def __init__(self, level: float, at: float):
        self.level, self.at = level, at

    def now(self, cap: float, refill_s: float, t: float) -> float:
        self.level = min(cap, self.level + (t - self.at) / refill_s)
        self.at = t
        return self.level


class LoginThrottle:
    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        self._total = _Bucket(TOTAL, clock())
        self._clients: dict[str, _Bucket] = {}

    def wait(self, client: str) -> int:
        """Whole seconds before ``client`` may try again (0: now)."""
        t = self._clock()
        need = 0.0
        total = self._total.now(TOTAL, TOTAL_REFILL_S, t)
        if total < 1:
            need = (1 - total) * TOTAL_REFILL_S
        b = self._clients.get(client)
        if b is not None:
            level = b.now(PER_CLIENT, CLIENT_REFILL_S, t)
            if level < 1:
                need = max(need, (1 - level) * CLIENT_REFILL_S)
        return math.ceil(need) if need > 0 else 0

    def failed(self, client: str) -> None:
        """``client`` sent a wrong token."""
        t = self._clock()
        self._total.now(TOTAL, TOTAL_REFILL_S, t)
        self._total.level -= 1
        b = self._clients.get(client)
        if b is None:
            self._forget(t)
            b = self._clients[client] = _Bucket(PER_CLIENT, t)
        b.now(PER_CLIENT, CLIENT_REFILL_S, t)
        b.level -= 1

    def _forget(self, t: float) -> None:
        if len(self._clients) < CLIENTS_MAX:
            return
        cap, every = PER_CLIENT, CLIENT_REFILL_S
        full = [c for c, b in self._clients.items() if b.now(cap, every, t) >= cap]
        for c in full:  # refilled: nothing is lost by forgetting them
            del self._clients[c]
        while len(self._clients) >= CLIENTS_MAX:  # all still counting: the oldest go
            del self._clients[next(iter(self._clients))]
