"""The gateway process: the data plane (aiohttp) with the admin listener (FastAPI) beside it.

The data plane never imports the admin; this module joins them, and puts the operator
console (:mod:`gateway.console`) on the admin listener. The admin server starts
in the data app's start-up, once its lifespan has built the :class:`Gateway`, on
``admin_host:admin_port`` (shared with SO_REUSEPORT when a supervisor runs workers), and
stops first at shutdown.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
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
    app.cleanup_ctx.append(_admin_listener(settings, announce or log.info))
    return app


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
