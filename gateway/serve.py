"""The gateway process: the data plane (aiohttp) with the admin listener (FastAPI) beside it.

The data plane never imports the admin; this module joins them, and puts the operator
console (:mod:`gateway.console`) on the admin listener. The admin server starts
in the data app's start-up, once its lifespan has built the :class:`Gateway`, on
``admin_host:admin_port`` (shared with SO_REUSEPORT when a supervisor runs workers), and
stops first at shutdown. Without ``GATEWAY_ADMIN_TOKEN`` the admin API is off and its
port is not bound at all.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

from aiohttp import web

from gateway.admin.app import create_admin_app
from gateway.admin.server import AdminServer, bind
from gateway.console import install as install_console
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
        server = AdminServer(admin_app)
        host, port = settings.admin_host, settings.admin_port
        await server.start(host, port, bind(host, port, settings.reuse_port))
        host, port = server.address or (host, port)
        host = f"[{host}]" if ":" in host else host
        announce(f"gateway: admin API on http://{host}:{port} (OpenAPI at /docs)")
        yield
        await server.stop()

    return admin
