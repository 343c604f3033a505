"""What large request bodies may cost a worker: a cap on the body bytes held at once.

A body is held from the moment its handler starts reading it until the answer is sent (its
parsed form lives that long). Bodies above :data:`SMALL` count against the cap by their
declared ``Content-Length`` (a chunked body by the size limit, since it may grow to that);
a request that would take the total over the cap gets a 503 with ``Retry-After`` before a
byte of its body is read, unless nothing else is held (one body up to the size limit is
always taken). When the last large body is let go, the garbage collector runs and the C
allocator is asked to hand its free memory back to the system (``malloc_trim``), at most
once a second (one due sooner waits for its second), so a burst of large bodies does not
leave the worker's RSS at its peak. The collection bounds what a reference cycle could
keep of a large body (an exception kept with its traceback, a library's own cycles) to
that second: the collector is tuned to run rarely (``gateway.cli``), and a cycle that
held a refused request's frames kept ~25 MB per 9 MB body until it did.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import gc
import time
from collections.abc import Callable

from aiohttp import web

from gateway.errors import ServiceUnavailable

SMALL = 256 << 10  # bodies up to this are not counted (chat turns, the norm)
TRIM_AFTER = 1 << 20  # a body this large, once let go, asks the allocator to trim
TRIM_EVERY = 1.0  # seconds, at most one trim per interval


def _trimmer() -> Callable[[], object] | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    trim = getattr(libc, "malloc_trim", None)  # glibc only
    return None if trim is None else lambda: trim(0)


class BodyBudget:
    """The body bytes this worker holds, against ``cap``."""

    def __init__(self, cap: int, max_body: int, trim: Callable[[], object] | None = None) -> None:
        self.cap = cap
        self.max_body = max_body
        self.held = 0
        self.trims = 0
        self._trim = trim if trim is not None else _trimmer()
        self._trimmed_at = 0.0
        self._pending: asyncio.TimerHandle | None = None

    def take(self, request: web.BaseRequest) -> int:
        """The bytes now held for ``request`` (0 for a small or empty body); a 503 when the
        worker holds too much already."""
        n = request.content_length
        if n is None:
            n = self.max_body if request.body_exists else 0
        if n <= SMALL:
            return 0
        if self.held and self.held + n > self.cap:
            mib = self.held / (1 << 20)
            raise ServiceUnavailable(
                f"The gateway is holding {mib:.0f} MiB of request bodies, its limit; "
                "retry in a moment.",
                code="server_overloaded",
            )
        self.held += n
        return n

    def give(self, n: int) -> None:
        self.held -= n
        if self.held or n < TRIM_AFTER or self._pending is not None:
            return
        wait = self._trimmed_at + TRIM_EVERY - time.monotonic()
        if wait <= 0:
            self._trim_now()
        else:
            self._pending = asyncio.get_running_loop().call_later(wait, self._trim_now)

    def _trim_now(self) -> None:
        self._pending = None
        if self.held:
            return  # a large body came meanwhile: its own release trims
        self.trims += 1
        gc.collect()  # first: what a cycle held is then free memory the trim hands back
        self._trimmed_at = time.monotonic()  # (after it: trims stay a second apart)
        if self._trim is not None:
            self._trim()


BODIES = web.AppKey("bodies", BodyBudget)
