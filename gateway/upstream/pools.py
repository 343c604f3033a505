"""Upstream pools: the replicas of one tier, their health, its circuit breaker and queue.

The only module that knows upstream URLs. Each pool talks to its replicas through a
:class:`~gateway.upstream.transport.Transport` (the real one is :mod:`.h1`'s client;
tests pass an in-memory one).

A request takes a slot in the pool's queue (:mod:`.scheduler`), then a replica
(:class:`.affinity.RouteBook`: where its prompt's prefix was sent, else its home by
rendezvous hashing, within a bounded load); consecutive upstream failures open the pool's
circuit (:mod:`.circuit`).

Health: a background probe per pool asks every replica's ``/health`` each
``health.interval`` seconds (and scrapes ``/metrics``); a replica that fails a probe,
or refuses a connection, gets no traffic until a probe succeeds again. A pool whose
replicas are all down counts as unavailable to the router, as does one whose circuit
is open.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gateway.request.prefix import PromptKey
from gateway.rules.schema import Tier
from gateway.upstream.affinity import RouteBook
from gateway.upstream.circuit import Circuit
from gateway.upstream.discovery import ModelBook, model_ids, model_windows
from gateway.upstream.failures import AnswerTimeout, AttemptFailed, ConnectFailed, ContextExceeded
from gateway.upstream.replicas import Replica, parse_metrics
from gateway.upstream.responses_events import RESPONSES_PATH, ResponsesAsChat
from gateway.upstream.scheduler import Gate, Ticket
from gateway.upstream.transport import (
    HttpTransport,
    Timeouts,
    Transport,
    UpstreamStream,
    read_whole,
)

if TYPE_CHECKING:
    from gateway.upstream.litellm_transport import LiteLLMTransport

log = logging.getLogger("gateway.upstream.pools")
Key = int | Callable[[], PromptKey]  # a bare hash, or what makes the prompt's key on demand


def _base(url: str) -> str:
    url = url.rstrip("/")
    return url[:-3] if url.endswith("/v1") else url


@dataclass(slots=True)
class Pool:
    name: str
    tier: Tier
    transport: Transport
    replicas: list[Replica]
    circuit: Circuit
    continues: bool = True  # False once its engine refused an assistant-prefix continuation
    price: tuple[float, float] | None = None  # USD per input token, per output token
    models: ModelBook = field(default_factory=lambda: ModelBook(None))
    on_models: Callable[[], None] | None = None  # the model it sends changed (discovery)
    gate: Gate = field(default_factory=lambda: Gate(None))
    book: RouteBook = field(default_factory=RouteBook)  # where prompts went, per head figures
    _probe: asyncio.Task[None] | None = field(default=None)

    @classmethod
    def create(cls, name: str, tier: Tier, transport: Transport | None = None) -> Pool:
        hosted = _hosted(tier) if tier.provider == "litellm" and transport is None else None
        pool = cls(
            name,
            tier,
            transport or hosted or HttpTransport(tier.max_connections, tier.keepalive),
            [Replica(_base(u)) for u in tier.endpoints],
            Circuit(tier.circuit.failures, tier.circuit.cooldown),
            models=ModelBook(tier.model),
        )
        if tier.max_concurrency is not None:
            pool.gate = Gate(tier.max_concurrency * len(pool.replicas), tier.max_queue)
        if tier.price is not None:
            pool.price = (tier.price.input_per_1m / 1e6, tier.price.output_per_1m / 1e6)
        if hosted is not None:  # what LiteLLM's model map says, where the rules do not
            pool.continues = hosted.prefill
            pool.price = pool.price or hosted.price
            pool.models.learned = hosted.window
        return pool

    def cost(self, usage: dict[str, Any] | None) -> float | None:
        """USD for an answer's usage at this tier's price; None when the tier has none."""
        if self.price is None or not usage:
            return None
        tokens_in = int(usage.get("prompt_tokens") or 0)
        tokens_out = int(usage.get("completion_tokens") or 0)
        return tokens_in * self.price[0] + tokens_out * self.price[1]

    def start(self) -> None:
        if self.tier.health.enabled:
            self._probe = asyncio.get_running_loop().create_task(self._probe_loop())

    async def close(self) -> None:
        if self._probe is not None:
            self._probe.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._probe
        await self.transport.close()

    async def _probe_loop(self) -> None:
        h = self.tier.health
        while True:
            await asyncio.gather(*(self.probe(r) for r in self.replicas))
            self._settle()
            await asyncio.sleep(h.interval)

    @property
    def asks_models(self) -> bool:
        """Whether its engines' ``/v1/models`` tells what the rules leave open: the model
        to send, or the context window."""
        t = self.tier
        return t.provider == "openai" and (t.model is None or t.context_window is None)

    async def discover(self) -> None:
        """Ask every replica which models it serves, and their context windows."""
        if self.asks_models:
            await asyncio.gather(*(self._ask_models(r) for r in self.replicas))
            self._settle()

    async def _ask_models(self, rep: Replica) -> None:
        with contextlib.suppress(OSError, TimeoutError, AttemptFailed):
            status, body = await self.transport.get(
                rep.url + "/v1/models", self.tier.health.timeout
            )
            if status == 200:  # a configured model is sent whatever the engine lists
                ids = model_ids(body) if self.tier.model is None else ()
                self.models.record(rep.url, ids, model_windows(body))

    def _settle(self) -> None:
        if self.models.settle(self.name) and self.on_models is not None:
            self.on_models()

    async def probe(self, rep: Replica) -> None:
        h = self.tier.health
        was_up = rep.up
        try:
            status, _ = await self.transport.get(rep.url + h.path, h.timeout)
            rep.up = status == 200
        except (OSError, TimeoutError, AttemptFailed):
            rep.up = False
        rep.last_probe = time.monotonic()
        if rep.up != was_up:
            log.warning("replica %s of %s is %s", rep.url, self.name, "up" if rep.up else "down")
        if rep.up and self.asks_models:
            await self._ask_models(rep)
        if rep.up and h.metrics_path:
            with contextlib.suppress(OSError, TimeoutError, AttemptFailed):
                status, text = await self.transport.get(rep.url + h.metrics_path, h.timeout)
                if status == 200:
                    rep.observe(parse_metrics(text))
                    # the engines' own queue refines the gate's capacity (see Gate)
                    self.gate.engine_backlog = any(r.queued > 0 for r in self.replicas)

    @property
    def model(self) -> str:
        """The model name sent: the tier's, else discovered, else the tier name (a guess
        until an engine answers ``/v1/models``)."""
        return self.tier.model or self.models.chosen or self.name

    @property
    def window(self) -> int | None:
        """The context window in tokens: the rules', else the engines' (reported, or named
        when one refused a prompt as too long), else None (unknown)."""
        return self.tier.context_window or self.models.window(self.model)

    def available(self, now: float) -> bool:
        if not self.circuit.available(now):
            return False
        return any(r.up for r in self.replicas)

    def choose(self, key: Key) -> Replica:
        """The replica for a prompt's key (:meth:`~.affinity.RouteBook.choose`), asked for
        only when there is a choice; a bare hash (an embedding's input) is a key of its own."""
        if len(self.replicas) == 1:
            return self.replicas[0]
        made = key() if callable(key) else PromptKey.of_hash(key)
        return self.book.choose(self.replicas, made, self.tier.affinity_slack)

    async def acquire(self, ticket: Ticket, affinity: Key, until: float) -> tuple[Replica, float]:
        """A slot in this pool (waiting in its queue, at most until ``until``), then the
        replica: the slot and the replica's in-flight count are the caller's to give back
        with :meth:`release`. Returns the replica and the seconds queued."""
        queued = await self.gate.acquire(ticket, until)
        rep = self.choose(affinity)
        rep.in_flight += 1
        return rep, queued

    def release(self, rep: Replica, held_s: float | None) -> None:
        rep.in_flight -= 1
        self.gate.release(held_s)

    def record(self, ok: bool) -> None:
        if ok:
            self.circuit.success()
        else:
            self.circuit.failure(time.monotonic())

    def limits(self, budget: float, stream: bool) -> Timeouts:
        """Time limits of one call that must end within ``budget`` seconds. For a stream the
        read gap is the stall limit between chunks (no per-chunk cost); a non-streamed
        answer arrives in one piece, so only the total applies."""
        t = self.tier.timeouts
        return Timeouts(min(t.total, budget), t.connect, t.stall if stream else None)

    async def open(
        self, rep: Replica, path: str, body: bytes, limits: Timeouts, stream: bool = True
    ) -> UpstreamStream:
        """POST to one replica; the open 200 answer. A refused connection marks it down."""
        self.circuit.begin(time.monotonic())
        try:
            up = await self.transport.open(rep.url + path, body, limits, stream)
        except ConnectFailed:
            rep.up = False  # refused: no traffic until a probe says otherwise
            raise
        except ContextExceeded as e:  # the window it names: later requests skip this tier
            if e.window is not None and self.tier.context_window is None:
                self.models.learned = e.window
            e.window = e.window or self.window  # the next tier must have a larger one
            raise
        if path != RESPONSES_PATH:
            return up
        return ResponsesAsChat(up, stream, self.tier.max_event_bytes, self.tier.max_answer_bytes)

    async def post(self, rep: Replica, path: str, body: bytes, limits: Timeouts) -> bytes:
        """POST and read the whole 200 answer (a non-streamed request)."""
        up = await self.open(rep, path, body, limits, stream=False)
        try:
            async with asyncio.timeout(limits.total):
                data = await read_whole(up, self.tier.max_answer_bytes)
        except TimeoutError:
            up.close()
            raise AnswerTimeout(f"no answer within {limits.total:.1f}s") from None
        except BaseException:
            up.close()
            raise
        up.release()
        return data


def _hosted(tier: Tier) -> LiteLLMTransport:
    from gateway.upstream.litellm_transport import LiteLLMTransport  # LiteLLM: only if used

    return LiteLLMTransport(dict(tier.litellm_params or {}))


TransportFactory = Callable[[str, Tier], Transport]


class Pools:
    """All pools, by tier name. Built once in the app's lifespan."""

    def __init__(
        self,
        tiers: dict[str, Tier],
        transport: TransportFactory | None = None,
        on_models: Callable[[Pools], None] | None = None,
    ):
        self.by_tier = {
            name: Pool.create(name, t, transport(name, t) if transport else None)
            for name, t in tiers.items()
        }
        if on_models is not None:
            for p in self.by_tier.values():
                p.on_models = lambda: on_models(self)
        self._users = 0
        self._retired: asyncio.Event | None = None

    def __contains__(self, tier: str) -> bool:
        return tier in self.by_tier

    def acquire(self) -> None:
        """A request starts using these pools (they are closed only after it ends)."""
        self._users += 1

    def release(self) -> None:
        self._users -= 1
        if self._users == 0 and self._retired is not None:
            self._retired.set()

    async def retire(self, grace: float) -> None:
        """Close once the last request using these pools has ended (or after ``grace``)."""
        self._retired = asyncio.Event()
        if self._users == 0:
            self._retired.set()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(grace):
                await self._retired.wait()
        await self.close()

    def __getitem__(self, tier: str) -> Pool:
        return self.by_tier[tier]

    def inherit(self, old: Pools) -> None:
        """What the old pools discovered, for new pools of the same engines (until re-probed);
        and their queue, so requests still running on the old pools keep counting against the
        engines' capacity (a fresh gate would let twice ``max_concurrency`` through)."""
        for name, p in self.by_tier.items():
            was = old.by_tier.get(name)
            if was is None or was.tier.endpoints != p.tier.endpoints:
                continue
            if p.tier.model is None:
                p.models.served = dict(was.models.served)
                p.models.chosen, p.models.disagree = was.models.chosen, was.models.disagree
            if p.gate.capacity is not None and p.gate.capacity == was.gate.capacity:
                p.gate = was.gate
                p.gate.max_queue = p.tier.max_queue

    def priced(self) -> frozenset[str]:
        """The tiers whose answers have a known price (a USD budget is kept only there)."""
        return frozenset(name for name, p in self.by_tier.items() if p.price is not None)

    def health(self) -> dict[str, bool]:
        now = time.monotonic()
        return {name: p.available(now) for name, p in self.by_tier.items()}

    def served(self) -> dict[str, str]:
        """Tier -> the model it sends, for tiers whose model is configured or discovered."""
        out = {}
        for name, p in self.by_tier.items():
            model = p.tier.model or p.models.chosen
            if model is not None:
                out[name] = model
        return out

    def may_hold(self, tier: str, refused: AttemptFailed) -> bool:
        """Whether ``tier`` may hold a prompt that ``refused`` (a tier's "too long for my
        window", naming it) says did not fit: its window is larger or unknown."""
        if not isinstance(refused, ContextExceeded) or refused.window is None:
            return True
        window = self.by_tier[tier].window
        return window is None or window > refused.window

    def windows(self) -> dict[str, int]:
        """Tier -> its context window, for the tiers whose window is known."""
        return {name: w for name, p in self.by_tier.items() if (w := p.window) is not None}

    async def discover(self, bound: float) -> None:
        """Discover the models (and windows) the rules leave open, waiting at most ``bound``
        seconds."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(bound):
                await asyncio.gather(*(p.discover() for p in self.by_tier.values()))

    def state(self) -> dict[str, object]:
        now = time.monotonic()
        return {
            name: {
                "model": p.models.state(),
                "available": p.available(now),
                "circuit_open": p.circuit.is_open,
                "consecutive_failures": p.circuit.failures,
                "replicas": [r.state() for r in p.replicas],
                "queue": p.gate.state(),
            }
            for name, p in self.by_tier.items()
        }

    def saturated(self) -> dict[str, bool]:
        return {name: p.gate.saturated for name, p in self.by_tier.items()}

    def prometheus(self) -> bytes:
        """The queues' gauges and shed counts, in Prometheus text (an autoscaler's signal)."""
        families = (
            ("gateway_queue_waiting", "gauge", "requests waiting in the gateway for a slot"),
            ("gateway_saturated", "gauge", "1 while every slot of the tier is taken and some wait"),
            ("gateway_shed_total", "counter", "requests refused: they could not start in time"),
        )
        lines: list[str] = []
        for i, (fam, kind, doc) in enumerate(families):  # one family at a time, as the
            lines += [f"# HELP {fam} {doc}", f"# TYPE {fam} {kind}"]  # text format requires
            for name, p in self.by_tier.items():
                g = p.gate
                value = (g.waiting, int(g.saturated), g.shed)[i]
                lines.append(f'{fam}{{tier="{name}"}} {value}')
        return ("\n".join(lines) + "\n").encode()

    def start(self) -> None:
        for p in self.by_tier.values():
            p.start()

    async def close(self) -> None:
        await asyncio.gather(*(p.close() for p in self.by_tier.values()))
