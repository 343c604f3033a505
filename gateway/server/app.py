"""The data plane's aiohttp app factory: state built in the lifespan, routes, middleware."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from gateway.rules.schema import Rules
from gateway.server import cors, drain
from gateway.server.bodies import BODIES, BodyBudget
from gateway.server.handlers import add_routes
from gateway.server.middleware import catch_all
from gateway.server.state import GATEWAY, Gateway
from gateway.settings import Settings
from gateway.store.base import Store
from gateway.upstream.pools import TransportFactory

__all__ = ("GATEWAY", "AppSource", "Gateway", "create_app")


@dataclass(frozen=True, slots=True)
class AppSource:
    """Where the app's rules came from (for the watcher and the admin API)."""

    rules: Rules
    path: Path | None = None
    text: str | None = None
    store: Store | None = None
    transport: TransportFactory | None = None


def create_app(settings: Settings, src: AppSource) -> web.Application:
    app = web.Application(
        client_max_size=settings.max_body_bytes,
        middlewares=[catch_all],
        # request bodies are decompressed by us, with a limit on the decompressed size
        handler_args={"auto_decompress": False},
    )
    app[BODIES] = BodyBudget(settings.max_body_bytes_in_flight, settings.max_body_bytes)
    path = src.path or settings.rules_path()
    text = src.text if src.text is not None else path.read_text(encoding="utf-8")

    async def lifespan(app: web.Application) -> AsyncIterator[None]:
        gw = Gateway.build(settings, src.rules, src.store, src.transport)
        app[GATEWAY] = gw
        await gw.start(path, text)
        yield
        await gw.close()

    app.cleanup_ctx.append(lifespan)
    cors.install(app, settings.cors())
    drain.install(app, settings.drain_seconds)
    add_routes(app)
    return app
