"""The response cache: a tier that answers first, with answers that passed their checks.

:class:`ResponseCache` is built once per process (in the data plane's lifespan) over a
:class:`~gateway.cache.backend.Backend` — Redis when the gateway has one, else in
process. Per request, :meth:`lookup` (after routing, before admission) finds an entry by
the exact key, else joins a running identical generation (or leads one), else looks for a
near duplicate when the rule asks. Answers handed back are judged again
(:func:`~gateway.cache.entry.refusal`: complete, every check passed) and stored in a
task of their own; an unreachable store is a miss, never an error.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any

import orjson

from gateway.cache.backend import Backend, Usage
from gateway.cache.entry import Entry, refusal
from gateway.cache.flight import Flights
from gateway.cache.guard import signature
from gateway.cache.key import (
    Route,
    deterministic,
    exact_key,
    last_user_text,
    rules_digest,
    scope_key,
)
from gateway.cache.lookup import Ask, Kept, Lookup, cache_control
from gateway.cache.semantic import Embedders, best, record
from gateway.errors import StoreUnavailable
from gateway.rules.schema import Rules
from gateway.telemetry.cache_meters import CacheMeters

log = logging.getLogger("gateway.cache")
EMBED_BUDGET_S = 0.5  # the most a lookup waits for an embedding (and a quarter of the TTFT budget)
DOWN_S = 5.0  # after the store failed a call, requests skip the cache this long
KEEP_EMBED_S = 30.0  # an answer kept without its prompt's vector embeds it meanwhile (a first load)
Spawn = Callable[[Coroutine[Any, Any, None]], Any]


class ResponseCache:
    def __init__(self, backend: Backend, meters: CacheMeters, spawn: Spawn, embed_threads: int = 1):
        self.backend = backend
        self._m = meters
        self._spawn = spawn
        self._flights = Flights()
        self.embedders = Embedders(embed_threads)
        self._digest: tuple[Rules, str] | None = None
        self._down_until = 0.0  # monotonic: the store failed; skip it until then

    def _rules(self, rules: Rules) -> str:
        if self._digest is None or self._digest[0] is not rules:
            self._digest = (rules, rules_digest(rules))
        return self._digest[1]

    # -- the lookup -------------------------------------------------------------------------------
    async def lookup(self, ask: Ask) -> Lookup | None:
        """The request's lookup; None when its route keeps no cache."""
        rule = ask.d.cache
        if rule is None:
            return None
        route = Route(self._rules(ask.rules), ask.d, ask.eff.policy, ask.pools.served())
        look = Lookup(self, ask, rule, route)
        cc = cache_control(ask.headers.get("Cache-Control"))
        if "no-store" in cc:
            return look.bypass("no-store", store=False)
        body = ask.req.native if ask.req.native is not None else ask.req.body
        if rule.deterministic_only and not deterministic(ask.req.body):
            return look.bypass("nondeterministic", store=False)
        look.key = exact_key(ask.tenant, ask.kind, body, route)
        if time.monotonic() < self._down_until:  # a down store costs no request its timeout
            return look.bypass("unavailable", store=False)
        if "no-cache" in cc or cc.get("max-age") == "0":
            return look.bypass("no-cache", store=True)
        max_age = _seconds(cc.get("max-age"))
        entry = await self._get(ask.tenant, look.key)
        if entry is not None and (max_age is None or entry.age() <= max_age):
            return self._hit(look, entry, "exact")
        if rule.coalesce:  # the same request being generated: its answer, once kept
            d = ask.d
            budget = d.ttft_budget if ask.req.stream else d.deadline / 2
            entry = await self._flights.follow(look.key, budget)
            if entry is not None:
                return self._hit(look, entry, "coalesced")
            look.flight = self._flights.lead(look.key)
        if rule.semantic is not None and await self._by_meaning(look, body, max_age):
            self.land(look, look.entry)  # its followers replay the near duplicate's answer
            look.flight = None
        return look

    def _hit(self, look: Lookup, entry: Entry, match: str) -> Lookup:
        self._m.saved.add(entry.tokens)
        return look.hit(entry, match)

    async def _get(self, tenant: str, key: str) -> Entry | None:
        try:
            raw = await self.backend.get(tenant, key, time.time())
        except StoreUnavailable as e:
            self._unreachable(e)
            return None
        return Entry.decode(raw) if raw is not None else None

    def _unreachable(self, e: StoreUnavailable) -> None:
        self._m.errors.add(1)
        if time.monotonic() >= self._down_until:
            log.warning("response cache store unreachable, skipped for %.0fs: %s", DOWN_S, e)
        self._down_until = time.monotonic() + DOWN_S

    async def _by_meaning(self, look: Lookup, body: dict[str, Any], max_age: float | None) -> bool:
        """A stored answer to a near-duplicate prompt (a hit), else the prompt's vector for
        the index once its own answer is kept."""
        sem, ask = look.rule.semantic, look.ask
        assert sem is not None
        last = last_user_text(body)
        if last is None or len(last[1]) > sem.max_prompt_chars:
            return False
        at, text = last
        look.scope = scope_key(ask.tenant, ask.kind, body, look.route, ask.d.cls.task, at)
        look.signature = signature(text)
        until = time.monotonic() + min(EMBED_BUDGET_S, ask.d.ttft_budget / 4)
        look.vec = await self.embedders.embed(sem.embedder, text, ask.pools, until)
        if look.vec is None:
            return False
        try:
            records = await self.backend.vectors(
                ask.tenant, look.scope, time.time(), sem.max_candidates
            )
        except StoreUnavailable as e:
            self._unreachable(e)
            return False
        m = best(look.vec, look.signature, records, sem.threshold)
        if m is None:
            return False
        entry = await self._get(ask.tenant, m.key)
        if entry is None or (max_age is not None and entry.age() > max_age):
            return False
        self._hit(look, entry, f"semantic {m.similarity:.3f}")
        return True

    # -- keeping answers ------------------------------------------------------------------------
    def spawn_keep(self, look: Lookup, kept: Kept) -> None:
        self._spawn(self._keep(look, kept))

    def land(self, look: Lookup, entry: Entry | None) -> None:
        if look.flight is not None:
            self._flights.land(look.key, look.flight, entry)

    async def _keep(self, look: Lookup, kept: Kept) -> None:
        """Judge and store; the flight lands once the entry is stored (or failed to be),
        so a request that comes later finds either the flight or the entry."""
        entry = None
        try:
            entry = self._judged(look, kept)
            if entry is not None:
                await self._store(look, entry)
        except StoreUnavailable as e:
            self._unreachable(e)
        finally:
            self.land(look, entry)

    def _judged(self, look: Lookup, kept: Kept) -> Entry | None:
        req = look.ask.req
        answer = kept.answer
        if isinstance(answer, bytes):
            try:
                answer = orjson.loads(answer)
            except orjson.JSONDecodeError:
                answer = None
        why = refusal(req.kind, answer, kept.checks, req.facts)
        if why is not None:
            self._m.refused.add(1, {"reason": why.split(" ")[0]})
            return None
        raw = kept.answer if isinstance(kept.answer, bytes) else orjson.dumps(answer)
        now = time.time()
        entry = Entry(
            raw,
            req.kind,
            kept.tier,
            int(kept.usage.get("prompt_tokens") or 0),
            int(kept.usage.get("completion_tokens") or 0),
            now,
            now + look.rule.ttl,
        )
        if len(raw) > look.rule.max_entry_bytes:
            self._m.refused.add(1, {"reason": "too_large"})
            return None
        return entry

    async def _store(self, look: Lookup, entry: Entry) -> None:
        tenant = look.ask.tenant
        value = entry.encode()
        put = await self.backend.put(tenant, look.key, value, entry.expires_at)
        if put.size < 0:
            self._m.refused.add(1, {"reason": "too_large"})
            return
        self._m.stores.add(1)
        if put.evicted:
            self._m.evictions.add(put.evicted)
        self._m.bytes.add(len(value) - put.freed)
        sem = look.rule.semantic
        if sem is None or look.scope is None:
            return
        if look.vec is None:  # the lookup could not wait for it; the index can
            until = time.monotonic() + KEEP_EMBED_S
            text = (last_user_text(look.ask.req.native or look.ask.req.body) or (0, ""))[1]
            look.vec = await self.embedders.embed(sem.embedder, text, look.ask.pools, until)
            if look.vec is None:
                return
        rec = record(look.signature, look.vec)
        await self.backend.add_vector(tenant, look.scope, look.key, rec, sem.max_candidates)

    # -- the admin API's view ---------------------------------------------------------------------
    async def usage(self, tenant: str) -> Usage:
        return await self.backend.usage(tenant)

    async def entries(self, tenant: str, limit: int) -> list[dict[str, Any]]:
        out = []
        for key, raw in await self.backend.entries(tenant, limit):
            head = Entry.head(raw)
            if head is not None:
                out.append({"key": key, "bytes": len(raw), **head})
        return out

    async def delete(self, tenant: str, key: str) -> bool:
        return await self.backend.delete(tenant, key)

    async def purge(self, tenant: str) -> int:
        return await self.backend.purge(tenant)

    async def close(self) -> None:
        await self.embedders.close()
        await asyncio.sleep(0)


def _seconds(v: str | None) -> float | None:
    if v is None:
        return None
    try:
        return max(0.0, float(v))
    except ValueError:
        return None
