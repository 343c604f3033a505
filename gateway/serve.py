"""The gateway process: the data plane (aiohttp) with the admin listener (FastAPI) beside it.

The data plane never imports the admin; this module joins them, and puts the operator
console (:mod:`gateway.console`) on the admin listener. The admin server starts
in the data app's start-up, once its lifespan has built the :class:`Gateway`, on
``admin_host:admin_port`` (shared with SO_REUSEPORT when a supervisor runs workers), and
stops first at shutdown. Without ``GATEWAY_ADMIN_TOKEN`` the admin API is off and its
port is not bound at all.

Both listeners keep one connection policy, the settings ``idle_timeout`` (a complete
request head within it of the connection's opening or its last answer), ``body_timeout``
(a body within it of its head) and ``max_connections`` (open at once; one more is answered
503 and closed): the admin listener through its protocol (:mod:`gateway.admin.server`), the
data listener through aiohttp's keep-alive timer (which covers a connection's first head
too), the body timeout of :func:`gateway.server.completions.read_body`, and the cap on its
connections, which :func:`run` applies where connections are accepted.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import cast

from aiohttp import web

from gateway.admin.app import create_admin_app
from gateway.admin.server import AdminServer, bind
from gateway.console import install as install_console
from gateway.errors import ServiceUnavailable, closing_response
from gateway.rules.schema import Rules
from gateway.server.app import GATEWAY, AppSource, create_app
from gateway.settings import Settings

log = logging.getLogger("gateway")


def build_app(
    settings: Settings,
    rules: Rules,
    rules_path: Path | None = None,
    rules_text: str | None = None,
    announce: Callable[[str], None] | None = None,
) -> web.Application:
    """The data app, whose start-up also opens the admin listener (``announce`` says where)."""
    app = create_app(settings, AppSource(rules, rules_path, rules_text))
    say = announce or log.info
    if settings.admin_token is not None:
        app.cleanup_ctx.append(_admin_listener(settings, say))
    else:  # nothing to serve there: the port stays free (a second gateway on the machine)
        app.on_startup.append(_say_admin_off(say))
    return app


def _say_admin_off(
    announce: Callable[[str], None],
) -> Callable[[web.Application], Awaitable[None]]:
    async def off(app: web.Application) -> None:
        announce(
            "gateway: admin API and console off (set GATEWAY_ADMIN_TOKEN to turn them on); "
            "nothing listens on the admin port"
        )

    return off


def _admin_listener(
    settings: Settings, announce: Callable[[str], None]
) -> Callable[[web.Application], AsyncIterator[None]]:
    async def admin(app: web.Application) -> AsyncIterator[None]:
        admin_app = create_admin_app(app[GATEWAY])
        install_console(admin_app)  # the operator console's pages, under /console
        server = AdminServer(admin_app, settings)
        host, port = settings.admin_host, settings.admin_port
        await server.start(host, port, bind(host, port, settings.reuse_port))
        host, port = server.address or (host, port)
        host = f"[{host}]" if ":" in host else host
        announce(f"gateway: admin API on http://{host}:{port} (OpenAPI at /docs)")
        yield
        await server.stop()

    return admin


# -- the data listener -----------------------------------------------------------------------
FULL = closing_response(
    ServiceUnavailable(
        "Too many connections to this gateway; retry in a moment.", code="overloaded"
    ),
    ("Retry-After: 1",),
)


def run(
    app: web.Application,
    settings: Settings,
    say: Callable[[str], None],
    loop: asyncio.AbstractEventLoop,
    shutdown_timeout: float,
) -> None:
    """Serve ``app`` until SIGINT, or SIGTERM's drain, ends it: :func:`aiohttp.web.run_app`'s
    steps, with the data listener's connections under the connection policy."""
    main = loop.create_task(_serve(app, settings, say, shutdown_timeout))
    try:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(main)
    except (web.GracefulExit, KeyboardInterrupt):
        pass
    finally:
        if not main.done():
            main.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                loop.run_until_complete(main)
        rest = asyncio.all_tasks(loop)
        for task in rest:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*rest, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


async def _serve(
    app: web.Application, settings: Settings, say: Callable[[str], None], shutdown_timeout: float
) -> None:
    runner = web.AppRunner(
        app,
        handle_signals=True,
        access_log=None,
        handler_cancellation=True,
        keepalive_timeout=settings.idle_timeout,  # from the opening too: an unfinished head
        shutdown_timeout=shutdown_timeout,
    )
    await runner.setup()
    listener = None
    try:
        assert runner.server is not None
        accept = functools.partial(_accept, runner.server, settings.max_connections)
        listener = await asyncio.get_running_loop().create_server(
            accept,
            settings.host,
            settings.port,
            backlog=4096,
            reuse_port=settings.reuse_port or None,
        )
        port = listener.sockets[0].getsockname()[1]
        host = f"[{settings.host}]" if ":" in settings.host else settings.host
        say(f"======== Running on http://{host}:{port} ========\n(Press CTRL+C to quit)")
        while True:
            await asyncio.sleep(3600)
    finally:
        if listener is not None:
            listener.close()  # new connections go elsewhere; aiohttp's shutdown ends the rest
        await runner.cleanup()


class _Full(asyncio.Protocol):
    """A connection over the cap: told so, and closed before a byte of it is read."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        cast(asyncio.Transport, transport).write(FULL)  # (uvloop's is not a subclass)
        transport.close()


def _accept(server: web.Server, cap: int) -> asyncio.BaseProtocol:
    if len(server.connections) >= cap:
        return _Full()
    return server()
