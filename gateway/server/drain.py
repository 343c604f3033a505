"""SIGTERM drain: stop looking ready, move keep-alive clients off, end open streams on time.

At SIGTERM (:func:`on_sigterm`) the drain begins: ``/readyz`` answers 503 and every response
carries ``Connection: close`` (keep-alive clients reconnect to another replica). The
listener stays open ``listen`` seconds more, so balancers polling readiness move traffic
off and a request on an idle keep-alive connection is answered, not cut by the close;
then aiohttp's own shutdown closes the listener and the idle connections (``on_shutdown``
begins the drain there too, for a process stopped without the signal). ``drain_seconds``
after it began, every stream still open ends with an OpenAI-style error event and
``data: [DONE]`` (its slot and reservation released by the normal ending), so the handlers
are all done before aiohttp's shutdown timeout, which is set a little later.
"""

from __future__ import annotations

import asyncio
import signal

from aiohttp import web

END_GRACE = 1.0  # seconds after the deadline for the handlers to write their last event


class Drain:
    """The drain's state: whether it began, whether its deadline passed, and the handler tasks
    relaying a stream (cancelled at the deadline; a set add and discard per stream)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.draining = False
        self.cut = False  # the deadline passed: open streams end now
        self.streams: set[asyncio.Task[object]] = set()

    def begin(self) -> None:
        if self.draining:
            return
        self.draining = True
        asyncio.get_running_loop().call_later(self.seconds, self._cut)

    def _cut(self) -> None:
        self.cut = True
        for task in self.streams:
            task.cancel()


DRAIN = web.AppKey("drain", Drain)


def install(app: web.Application, seconds: float) -> None:
    drain = app[DRAIN] = Drain(seconds)

    async def on_shutdown(app: web.Application) -> None:
        drain.begin()

    async def close_when_draining(request: web.Request, resp: web.StreamResponse) -> None:
        if drain.draining:
            resp.force_close()
            # said too: the hook runs after aiohttp has written its Connection header
            resp.headers["Connection"] = "close"

    app.on_shutdown.append(on_shutdown)
    app.on_response_prepare.append(close_when_draining)


def on_sigterm(app: web.Application, listen: float) -> None:
    """SIGTERM begins the drain at once and leaves the way aiohttp's own handler does
    (``GracefulExit``) ``listen`` seconds later (capped at the drain time)."""

    async def install(app: web.Application) -> None:
        loop = asyncio.get_running_loop()
        drain = app[DRAIN]

        def term() -> None:
            if drain.draining:
                return
            drain.begin()
            loop.call_later(min(listen, drain.seconds), _leave)

        loop.add_signal_handler(signal.SIGTERM, term)  # replaces aiohttp's, set up before

    app.on_startup.append(install)


def _leave() -> None:
    raise web.GracefulExit


def draining(app: web.Application) -> bool:
    d = app.get(DRAIN)
    return d is not None and d.draining


def of(app: web.Application) -> Drain | None:
    return app.get(DRAIN)
