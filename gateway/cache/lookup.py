"""One request's part in the cache: what the lookup found, and what is kept afterwards.

A :class:`Lookup` is made by :meth:`gateway.cache.cache.ResponseCache.lookup` for a
request whose route has a ``cache:`` rule. Its status goes into ``x-gateway-cache``:

* ``hit``    the answer comes from the cache (``age``, ``x-gateway-cache-match``);
* ``miss``   cacheable, not found: the answer is generated and, if it is kept, stored;
* ``bypass`` the cache was not consulted: the client said ``no-cache`` (the fresh answer
  replaces the stored one) or ``no-store`` (nothing is kept), or the request samples
  (no ``temperature: 0`` nor ``seed``) under ``deterministic_only``.

After the answer, :meth:`keep_answer` (JSON) or :meth:`keep_stream` (the stream recorded
by :meth:`tee`) hand it to the cache, which judges and stores it off the request's path;
:meth:`done` ends a flight whose answer was never handed over.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from gateway.cache.entry import Entry
from gateway.cache.key import NO_TENANT, Route
from gateway.cache.tee import Sink, Tee
from gateway.checks.base import Check
from gateway.dispatch.outcome import Outcome
from gateway.dispatch.relay import StreamRelay
from gateway.headers import H_AGE, H_CACHE, H_CACHE_MATCH
from gateway.request.model import ClientRequest
from gateway.routing.router import RouteDecision
from gateway.rules.cache import CacheRule
from gateway.rules.schema import Rules
from gateway.tenancy.tenants import Effective
from gateway.upstream.pools import Pools


@dataclass(frozen=True, slots=True)
class Ask:
    """What a lookup needs: the request, its route and policy, the snapshot's rules and
    pools, and the endpoint (``chat``, ``text_completion``, ``responses``)."""

    req: ClientRequest
    d: RouteDecision
    eff: Effective
    headers: Mapping[str, str]
    rules: Rules
    pools: Pools
    kind: str

    @property
    def tenant(self) -> str:
        return self.eff.tenant_id or NO_TENANT


@dataclass(frozen=True, slots=True)
class Kept:
    """An answer handed to the cache: its JSON object, the tier that produced it, the
    tokens it cost, and the checks it must pass."""

    answer: Any
    tier: str
    usage: Mapping[str, Any]
    checks: Sequence[Check]


def cache_control(value: str | None) -> dict[str, str]:
    """The directives of a ``Cache-Control`` header: name -> argument ("" when none)."""
    out: dict[str, str] = {}
    for part in (value or "").lower().split(","):
        name, _, arg = part.strip().partition("=")
        if name:
            out[name] = arg.strip().strip('"')
    return out


class Keeper(Protocol):
    """What a lookup hands its fresh answer to (:class:`gateway.cache.cache.ResponseCache`)."""

    def spawn_keep(self, look: Lookup, kept: Kept) -> None: ...

    def land(self, look: Lookup, entry: Entry | None) -> None: ...


class Lookup:
    def __init__(self, cache: Keeper, ask: Ask, rule: CacheRule, route: Route):
        self.ask = ask
        self.rule = rule
        self.route = route
        self.status = "miss"
        self.reason: str | None = None  # a bypass: why
        self.entry: Entry | None = None  # a hit: what is replayed
        self.match = "exact"
        self.store = True  # whether the fresh answer may be kept
        self.key = ""
        self.vec: Any = None  # the prompt's embedding (semantic rules), for the index
        self.scope: str | None = None
        self.signature: tuple[str, ...] = ()
        self.flight: asyncio.Future[Entry | None] | None = None  # this request leads one
        self._cache = cache
        self._tee: Tee | None = None
        self._handed = False

    # -- what the lookup found ------------------------------------------------------------
    def bypass(self, reason: str, store: bool) -> Lookup:
        self.status, self.reason, self.store = "bypass", reason, store
        return self

    def hit(self, entry: Entry, match: str) -> Lookup:
        self.status, self.entry, self.match, self.store = "hit", entry, match, False
        return self

    @property
    def result(self) -> str:
        """For the request record: ``hit/exact``, ``miss``, ``bypass/no-cache``..."""
        if self.status == "hit":
            return f"hit/{self.match.split(' ')[0]}"
        return f"bypass/{self.reason}" if self.status == "bypass" else "miss"

    def headers(self) -> dict[str, str]:
        h = {H_CACHE: self.status}
        if self.entry is not None:
            h[H_AGE] = str(int(self.entry.age()))
            h[H_CACHE_MATCH] = self.match
        return h

    # -- what happens to the fresh answer ---------------------------------------------------
    def tee(self, sink: Sink) -> Sink:
        """The client's sink, recorded when the streamed answer may be kept."""
        if not self.store:
            return sink
        self._tee = Tee(sink, 4 * self.rule.max_entry_bytes)  # SSE framing is bulky
        return self._tee

    def keep_answer(self, out: Outcome, checks: Sequence[Check]) -> None:
        if not self.store or out.trail.checks_failed is not None:
            return
        req = self.ask.req
        usage = out.usage or {
            "prompt_tokens": req.prompt_tokens,
            "completion_tokens": len(out.body) // 4,
        }
        self._hand(Kept(out.body, out.tier, usage, checks))

    def keep_stream(self, relay: StreamRelay) -> None:
        if not self.store or self._tee is None or relay.broken:
            return
        if relay.trail.checks_failed is not None:
            return
        answer = self._tee.answer(self.ask.req.kind)
        if answer is None:
            return
        usage = relay.usage()
        answer["usage"] = usage
        self._hand(Kept(answer, relay.tier, usage, relay.call.checks))

    def _hand(self, kept: Kept) -> None:
        self._handed = True
        self._cache.spawn_keep(self, kept)

    def done(self) -> None:
        """The request is over: a flight whose answer was not handed over lands empty."""
        if self.flight is not None and not self._handed:
            self._cache.land(self, None)
