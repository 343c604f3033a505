"""The gateway's state, built once per app from settings and rules, and the app factory.

No module globals: :func:`create_app` builds everything (rules, classifier, router,
checks, pools, dispatcher) inside the aiohttp app's lifespan and stores it under one
typed app key, so tests build their own app with their own settings.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import orjson
from aiohttp import web

from gateway.checks import build_checks
from gateway.classify import Classifier
from gateway.dispatch import Dispatcher
from gateway.pools import Pools
from gateway.router import Router
from gateway.rules import Rules
from gateway.settings import Settings


@dataclass(slots=True)
class Gateway:
    settings: Settings
    rules: Rules
    classifier: Classifier
    router: Router
    pools: Pools
    dispatcher: Dispatcher
    models_body: bytes

    @classmethod
    def build(cls, settings: Settings, rules: Rules) -> Gateway:
        rules = rules.with_endpoints(settings.pool_urls)
        pools = Pools(dict(rules.tiers))
        checks = build_checks(rules.checks)
        return cls(
            settings,
            rules,
            Classifier(rules),
            Router(rules),
            pools,
            Dispatcher(pools, checks, rules.dispatch, rules.checks.repetition),
            _models_body(rules),
        )

    async def close(self) -> None:
        await self.pools.close()


def _models_body(rules: Rules) -> bytes:
    ids: list[str] = list(rules.aliases)
    ids += [t.model for t in rules.tiers.values() if t.model not in ids]
    data = [{"id": i, "object": "model", "created": 0, "owned_by": "gateway"} for i in ids]
    return orjson.dumps({"object": "list", "data": data})


GATEWAY = web.AppKey("gateway", Gateway)


def create_app(settings: Settings, rules: Rules) -> web.Application:
    from gateway.api import add_routes  # the HTTP layer depends on this module, not back

    app = web.Application(client_max_size=settings.max_body_bytes)

    async def lifespan(app: web.Application) -> AsyncIterator[None]:
        gw = Gateway.build(settings, rules)
        gw.pools.start()
        app[GATEWAY] = gw
        yield
        await gw.close()

    app.cleanup_ctx.append(lifespan)
    add_routes(app)
    return app
