"""The data plane's state: a process-wide :class:`Gateway` holding one published
:class:`Runtime` snapshot.

No module globals: the app factory builds it inside the aiohttp app's lifespan and
stores it under one typed app key (:data:`GATEWAY`). A request takes the snapshot once
(:attr:`Gateway.runtime`) and uses only it: a rules swap publishes a new snapshot and
never changes one in use; pools the new rules no longer use are closed when the last
request holding them ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from gateway.access.guard import Access
from gateway.cache import ResponseCache, build_cache
from gateway.checks.registry import build_checks
from gateway.checks.user import build_user_checks
from gateway.dispatch.attempts import Dispatcher
from gateway.dispatch.checkio import CheckIO, WebhookClient
from gateway.dispatch.review import Review
from gateway.dispatch.shadow import Shadow
from gateway.quality import QualityCircuit
from gateway.request.model import ClientRequest
from gateway.rollout import Rollouts
from gateway.routing.classify import Classifier, check_model
from gateway.routing.router import Demoted, RouteDecision, Router
from gateway.routing.textmodel import ModelFiles
from gateway.rules.control import RulesControl
from gateway.rules.schema import Rules
from gateway.settings import Settings
from gateway.store.base import Store
from gateway.store.events import Resync, RulesChanged
from gateway.store.factory import open_store
from gateway.telemetry.merge import merge, read_snapshots, write_snapshot
from gateway.telemetry.recorder import Telemetry
from gateway.tenancy.tenants import Effective
from gateway.upstream.capabilities import say_lacks
from gateway.upstream.pools import Pools, TransportFactory

log = logging.getLogger("gateway")


@dataclass(frozen=True, slots=True, kw_only=True)
class Runtime:
    """Everything a request needs that the rules decide, frozen together."""

    rules: Rules
    classifier: Classifier
    router: Router
    pools: Pools
    dispatcher: Dispatcher
    shadow: Shadow
    review: Review
    models_body: bytes

    def route(
        self,
        req: ClientRequest,
        headers: Mapping[str, str],
        eff: Effective,
        demoted: Demoted | None = None,
    ) -> RouteDecision:
        """Classify the request and choose its route, with the tiers' health and known
        context windows as of now, and the quality circuit's demotions (``demoted``)."""
        c = self.classifier.classify(req, headers)
        pools = self.pools
        return self.router.decide(c, pools.health(), eff, pools.windows(), demoted, pools.priced())

    def in_use(self) -> _InUse:
        """``with rt.in_use():`` a request uses this snapshot: its pools are closed only
        after the request ended (a rules swap retires them)."""
        return _InUse(self.pools)


class _InUse:
    """:meth:`Runtime.in_use` (a class, not a generator: it runs on every request)."""

    __slots__ = ("_pools",)

    def __init__(self, pools: Pools):
        self._pools = pools

    def __enter__(self) -> None:
        self._pools.acquire()

    def __exit__(self, *exc: object) -> None:
        self._pools.release()


@dataclass(slots=True)
class Gateway:
    settings: Settings
    store: Store | None
    access: Access
    telemetry: Telemetry
    runtime: Runtime
    transport: TransportFactory | None = None
    control: RulesControl | None = None
    cache: ResponseCache | None = None  # built with the gateway (gateway.cache)
    model_files: ModelFiles = field(default_factory=ModelFiles)  # the classifier's weights
    webhooks: WebhookClient = field(default_factory=WebhookClient)  # the webhook checks' client
    quality: QualityCircuit = field(init=False)  # the quality circuit (gateway.quality)
    rollouts: Rollouts = field(init=False)  # judged canary rollouts (gateway.rollout)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    @classmethod
    def build(
        cls,
        settings: Settings,
        rules: Rules,
        store: Store | None = None,
        transport: TransportFactory | None = None,
    ) -> Gateway:
        rules = rules.with_endpoints(settings.pool_urls).with_models(settings.pool_models)
        if store is None:
            store, secret = open_store(settings)  # gateway.store.factory: which, and its secret
        else:
            given = settings.key_secret
            secret = given.get_secret_value().encode() if given else secrets.token_bytes(32)
        s = settings
        access = Access(
            store, secret, s.tenancy, s.policy_cache_ttl, s.policy_stale_max, s.policy_cache_max
        )
        tel = Telemetry(settings.otlp_endpoint, tenant_label=settings.metrics_tenant_label)
        pools = Pools(dict(rules.tiers), transport)
        say_lacks(pools)
        files = ModelFiles()
        webhooks = WebhookClient()
        rt = _runtime(rules, pools, tel, store, files, webhooks)
        gw = cls(settings, store, access, tel, rt, transport, model_files=files, webhooks=webhooks)
        for p in pools.by_tier.values():
            p.on_models = lambda: gw.models_changed(pools)
        gw.cache = build_cache(settings, store, tel, gw.spawn)
        replica = f"{socket.gethostname()}/{os.getpid()}"
        gw.quality = QualityCircuit(rules, store, replica, gw.spawn)
        gw.rollouts = Rollouts(rules, store, f"{replica}/{secrets.token_hex(3)}")
        rt.shadow.probed = gw.quality.shadowed  # shadow copies probe a demoted tier too
        return gw

    def use_rules(self, rules: Rules) -> None:
        """Publish a snapshot for new rules; pools are rebuilt only when the tiers changed."""
        rules = rules.with_models(self.settings.pool_models)
        old = self.runtime
        pools = old.pools
        if rules.tiers != old.rules.tiers:
            pools = Pools(dict(rules.tiers), self.transport, self.models_changed)
            say_lacks(pools)
            pools.inherit(old.pools)
            pools.start()
            grace = max((t.timeouts.total for t in old.rules.tiers.values()), default=60)
            self.spawn(old.pools.retire(grace))
        old_dispatcher = old.dispatcher
        self.quality.use_rules(rules)
        self.rollouts.use_rules(rules)
        self.runtime = _runtime(
            rules, pools, self.telemetry, self.store, self.model_files, self.webhooks
        )
        self.spawn(old_dispatcher.verdicts.aclose_later())
        self.runtime.shadow.probed = self.quality.shadowed

    def prepare_rules(self, rules: Rules, source: str) -> Rules:
        """A new version as this gateway runs it (the settings' pool URLs over its
        endpoints), once its classifier builds (the model read into :attr:`model_files`,
        so :meth:`use_rules` finds it read)."""
        check_model(rules, self.model_files, source)
        return rules.with_endpoints(self.settings.pool_urls)

    def models_changed(self, pools: Pools) -> None:
        """A tier's discovered model changed: republish what names the models (the
        classifier's model -> tier map, ``/v1/models``), keeping the rest of the snapshot."""
        rt = self.runtime
        if rt.pools is pools:
            served = pools.served()
            self.runtime = replace(
                rt,
                classifier=Classifier(rt.rules, served, self.model_files),
                models_body=_models_body(rt.rules, served),
            )

    def spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """Run a background task (usage accounting, cleanups) that is awaited at shutdown."""
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def start(self, rules_path: Path, rules_text: str) -> None:
        tiers = self.runtime.rules.tiers.values()
        if any(p.asks_models for p in self.runtime.pools.by_tier.values()):
            # before listening: requests get real model names, and known context windows
            await self.runtime.pools.discover(min(5.0, max(t.health.timeout for t in tiers)))
        self.runtime.pools.start()
        self.telemetry.start()
        self.access.start()
        self.control = RulesControl(
            self.store,
            rules_path,
            rules_text,
            self.use_rules,
            self.prepare_rules,
            self.settings.rules_watch_interval,
        )
        self.control.file_first = self.settings.redis_url is None  # one machine: its file
        await self.control.start()
        self.spawn(self.rollouts.run(self.control))  # counts; judges while it holds the lease
        if self.store is not None:
            await self.quality.load()  # the fleet's demotions, before the first request
            self.spawn(self._listen())
        if self.settings.metrics_dir is not None:
            self.spawn(self._share_metrics(self.settings.metrics_dir))

    def prometheus(self) -> bytes:
        """This process's metrics, or with workers, every worker's (labelled by worker)."""
        own = self._own_metrics()
        folder = self.settings.metrics_dir
        if folder is None:
            return own
        return merge(read_snapshots(folder, self.settings.worker_id, own))

    def _own_metrics(self) -> bytes:
        return (
            self.telemetry.prometheus()
            + self.runtime.pools.prometheus()
            + self.access.prometheus()
            + self.quality.prometheus()
        )

    async def _share_metrics(self, folder: Path) -> None:
        while True:
            with contextlib.suppress(OSError):
                own = self._own_metrics()
                write_snapshot(folder, self.settings.worker_id, own)
            await asyncio.sleep(1.0)

    async def _listen(self) -> None:
        assert self.store is not None
        async for ev in self.store.events():
            self.access.on_event(ev)
            self.quality.on_event(ev)
            match ev:
                case RulesChanged() | Resync() if self.control is not None:
                    self.spawn(self.control.resync())  # a long parse holds up no revocation

    async def close(self) -> None:
        if self.control is not None:
            await self.control.close()
        for t in list(self._tasks):
            t.cancel()
        for t in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        await self.rollouts.close()  # its last counts, and the lease given up
        await self.runtime.dispatcher.verdicts.aclose()
        await self.webhooks.close()
        await self.access.close()  # stops renewing slots; writes what usage it still can
        await self.runtime.pools.close()
        if self.cache is not None:
            await self.cache.close()
        await self.telemetry.close()
        if self.store is not None:
            await self.store.close()


def _runtime(
    rules: Rules,
    pools: Pools,
    tel: Telemetry,
    store: Store | None,
    files: ModelFiles,
    webhooks: WebhookClient,
) -> Runtime:
    io = CheckIO(pools, webhooks, tel)
    checks = {**build_checks(rules.checks), **build_user_checks(rules.checks.named, io)}
    dispatcher = Dispatcher(pools, checks, rules.dispatch, tel)
    review = Review(store, rules.review)
    dispatcher.verdicts.reported = review.on_verdict
    served = pools.served()
    return Runtime(
        rules=rules,
        classifier=Classifier(rules, served, files),
        router=Router(rules),
        pools=pools,
        dispatcher=dispatcher,
        shadow=Shadow(pools, store, tel, checks=checks),
        review=review,
        models_body=_models_body(rules, served),
    )


def _models_body(rules: Rules, served: dict[str, str]) -> bytes:
    """``/v1/models``: the aliases, then the model each tier serves (an alias pattern such as
    ``"*"`` is not a model: it is not listed)."""
    ids = [a for a in rules.aliases if not any(ch in a for ch in "*?[")]
    ids += [m for m in served.values() if m not in ids]
    data = [{"id": i, "object": "model", "created": 0, "owned_by": "gateway"} for i in ids]
    return orjson.dumps({"object": "list", "data": data})


GATEWAY = web.AppKey("gateway", Gateway)
