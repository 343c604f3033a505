"""The gateway's state, built once per app from settings and rules, and the app factory.

No module globals: :func:`create_app` builds everything (store, access, rules,
classifier, router, checks, pools, dispatcher) inside the aiohttp app's lifespan and
stores it under one typed app key, so tests build their own app with their own
settings. Rules can be swapped at run time (:meth:`Gateway.use_rules`): requests in
flight keep the objects they started with.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import orjson
from aiohttp import web

from gateway.checks.base import build_checks
from gateway.core.classify import Classifier
from gateway.core.router import Router
from gateway.core.rules import Rules
from gateway.dispatch.attempts import Dispatcher
from gateway.ops.control import RulesControl
from gateway.ops.shadow import Shadow
from gateway.ops.telemetry import Telemetry
from gateway.settings import Settings
from gateway.tenancy.access import Access
from gateway.tenancy.store import MemoryStore, RedisStore, Store
from gateway.upstream.pools import Pools

log = logging.getLogger("gateway")


@dataclass(slots=True)
class Gateway:
    settings: Settings
    store: Store | None
    access: Access
    rules: Rules
    classifier: Classifier
    router: Router
    pools: Pools
    dispatcher: Dispatcher
    models_body: bytes
    telemetry: Telemetry
    shadow: Shadow
    control: RulesControl | None = None
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    @classmethod
    def build(cls, settings: Settings, rules: Rules, store: Store | None = None) -> Gateway:
        rules = rules.with_endpoints(settings.pool_urls)
        pools = Pools(dict(rules.tiers))
        if store is None and settings.redis_url:
            store = RedisStore(settings.redis_url, settings.redis_prefix, settings.redis_timeout)
        elif store is None and settings.admin_token is not None:
            store = MemoryStore()
        secret = (
            settings.key_secret.get_secret_value().encode()
            if settings.key_secret
            else secrets.token_bytes(32)
        )  # in-process store: keys die with it anyway
        access = Access(store, secret, settings.tenancy, settings.policy_cache_ttl)
        tel = Telemetry(settings.otlp_endpoint)
        return cls(
            settings,
            store,
            access,
            rules,
            Classifier(rules),
            Router(rules),
            pools,
            _dispatcher(pools, rules, tel),
            _models_body(rules),
            tel,
            Shadow(pools, store, tel),
        )

    def use_rules(self, rules: Rules) -> None:
        """Swap to new rules; pools are rebuilt only when the tiers changed."""
        if rules.tiers != self.rules.tiers:
            old, self.pools = self.pools, Pools(dict(rules.tiers))
            self.pools.start()
            grace = max((t.timeouts.total for t in self.rules.tiers.values()), default=60)
            self.spawn(_close_later(old, grace))
        self.rules = rules
        self.classifier = Classifier(rules)
        self.router = Router(rules)
        self.dispatcher = _dispatcher(self.pools, rules, self.telemetry)
        self.shadow = Shadow(self.pools, self.store, self.telemetry)
        self.models_body = _models_body(rules)

    def spawn(self, coro: object) -> None:
        """Run a background task (usage accounting, cleanups) that is awaited at shutdown."""
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(coro)  # type: ignore[arg-type]
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def start(self, rules_path: Path, rules_text: str) -> None:
        self.pools.start()
        self.telemetry.start()
        self.control = RulesControl(
            self.store,
            rules_path,
            rules_text,
            self.use_rules,
            self.settings.pool_urls,
            self.settings.rules_watch_interval,
        )
        await self.control.start()
        if self.store is not None:
            self.spawn(self._listen())

    async def _listen(self) -> None:
        assert self.store is not None
        async for ev in self.store.events():
            self.access.on_event(ev)
            if self.control is not None:
                await self.control.on_event(ev)

    async def close(self) -> None:
        if self.control is not None:
            await self.control.close()
        for t in list(self._tasks):
            t.cancel()
        for t in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        await self.pools.close()
        await self.telemetry.close()
        if self.store is not None:
            await self.store.close()


def _dispatcher(pools: Pools, rules: Rules, tel: Telemetry) -> Dispatcher:
    return Dispatcher(
        pools, build_checks(rules.checks), rules.dispatch, rules.checks.repetition, tel
    )


async def _close_later(pools: Pools, after: float) -> None:
    await asyncio.sleep(after)
    await pools.close()


def _models_body(rules: Rules) -> bytes:
    ids: list[str] = list(rules.aliases)
    ids += [t.model for t in rules.tiers.values() if t.model not in ids]
    data = [{"id": i, "object": "model", "created": 0, "owned_by": "gateway"} for i in ids]
    return orjson.dumps({"object": "list", "data": data})


GATEWAY = web.AppKey("gateway", Gateway)


def create_app(
    settings: Settings,
    rules: Rules,
    rules_path: Path | None = None,
    rules_text: str | None = None,
    store: Store | None = None,
) -> web.Application:
    from gateway.server.handlers import add_routes

    app = web.Application(client_max_size=settings.max_body_bytes)
    path = rules_path or settings.rules_path()
    text = rules_text if rules_text is not None else path.read_text(encoding="utf-8")

    async def lifespan(app: web.Application) -> AsyncIterator[None]:
        gw = Gateway.build(settings, rules, store)
        app[GATEWAY] = gw
        await gw.start(path, text)
        yield
        await gw.close()

    app.cleanup_ctx.append(lifespan)
    add_routes(app)
    return app
