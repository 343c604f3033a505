"""SIGTERM drain: stop looking ready, close keep-alive connections, end open streams on time.

aiohttp runs ``on_shutdown`` once its listeners are closed; from then on ``/readyz`` answers
503, every response carries ``Connection: close`` (keep-alive clients reconnect to another
replica) and, ``drain_seconds`` later, every stream still open ends with an OpenAI-style
error event and ``data: [DONE]`` (its slot and reservation released by the normal ending),
so the handlers are all done before aiohttp's shutdown timeout, which is set a little later.
"""

from __future__ import annotations

import asyncio

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

    app.on_shutdown.append(on_shutdown)
    app.on_response_prepare.append(close_when_draining)


def draining(app: web.Application) -> bool:
    d = app.get(DRAIN)
    return d is not None and d.draining


def of(app: web.Application) -> Drain | None:
    return app.get(DRAIN)
