"""Replica choice by what the engines' prefix caches hold, from what this gateway replica
routed. Nothing here is shared between gateway replicas: each learns from its own share
of the traffic, and where it knows nothing it falls back on homes that every replica
computes alike (rendezvous hashing), so they agree without talking.

* :class:`PrefixIndex` maps the prefixes of a prompt (its chain, its unit and its head:
  :mod:`gateway.request.prefix`) to the engine replica that last got them, LRU-bounded.
  A conversation's next turn, whose chain starts with this turn's, finds where its history
  is cached, even after load moved it off its home.
* :class:`HeadStats` counts, per prompt head (a system prompt), its share of the traffic
  and whether its *units* come back (a chat's later turns, an agent's next step, another
  question on one document) or are each new (single questions to a tenant's assistant).
* :class:`RouteBook` chooses (see :meth:`RouteBook.choose`).
"""

from __future__ import annotations

import math
from collections import OrderedDict

from gateway.request.prefix import BLOCK, PromptKey
from gateway.upstream.replicas import Replica, score

INDEX_ENTRIES = 1 << 16  # prefixes remembered (blocks of ~1 KiB: ~64 MiB of prompts)
RECENT_UNITS = 1 << 15
DECAY_EVERY = 2048  # requests between halvings of the head counts
SPREAD = 1.0  # a head whose units come back has them spread over share x replicas x SPREAD
REUSED = 0.4  # ...when at least this share of its requests repeat a unit seen before
MIN_REQUESTS = 4.0  # and it was seen this often
HOLD = 2.0  # a replica holding a prompt's prefix keeps it up to HOLD x its load bound
CHOICES = 2  # a prompt with nothing to reuse: the less loaded of its first CHOICES homes


class PrefixIndex:
    """Prefix hash -> the URL of the replica that last got a prompt with that prefix."""

    def __init__(self, capacity: int = INDEX_ENTRIES):
        self.capacity = capacity
        self._where: OrderedDict[int, str] = OrderedDict()

    def holder(self, key: PromptKey, units: bool) -> str | None:
        """Where this replica sent the deepest prefix of this prompt past its lead (the
        conversation's or document's own text), else its unit; with ``units`` false (a
        head whose units are each new), where it sent the head."""
        where = self._where
        if not units:
            return where.get(key.head)
        for i in range(len(key.chain) - 1, -1, -1):
            if (i + 1) * BLOCK <= key.lead:
                break
            url = where.get(key.chain[i])
            if url is not None:
                return url
        return where.get(key.unit)

    def record(self, key: PromptKey, url: str) -> None:
        where = self._where
        first = key.lead // BLOCK  # blocks within the lead are shared: never looked up
        for h in (*key.chain[first:], key.unit, key.head):
            where[h] = url
            where.move_to_end(h)
        while len(where) > self.capacity:
            where.popitem(last=False)


class HeadStats:
    """Per prompt head: its share of the requests and how often its units come back."""

    def __init__(self) -> None:
        self.total = 0.0
        self._heads: dict[int, list[float]] = {}  # head -> [requests, units seen again]
        self._units: OrderedDict[int, None] = OrderedDict()
        self._since_decay = 0

    def observe(self, key: PromptKey) -> None:
        seen = key.continued or key.unit in self._units
        self._units[key.unit] = None
        self._units.move_to_end(key.unit)
        if len(self._units) > RECENT_UNITS:
            self._units.popitem(last=False)
        counts = self._heads.setdefault(key.head, [0.0, 0.0])
        counts[0] += 1
        counts[1] += seen
        self.total += 1
        self._since_decay += 1
        if self._since_decay >= DECAY_EVERY:
            self._decay()

    def _decay(self) -> None:
        self._since_decay = 0
        self.total /= 2
        for head, counts in list(self._heads.items()):
            counts[0] /= 2
            counts[1] /= 2
            if counts[0] < 0.5:
                del self._heads[head]

    def share(self, head: int) -> float:
        counts = self._heads.get(head)
        return counts[0] / self.total if counts and self.total else 0.0

    def units_return(self, head: int) -> bool:
        """Whether this head's units come back: most of its requests repeat a unit."""
        counts = self._heads.get(head)
        return counts is not None and counts[0] >= MIN_REQUESTS and counts[1] >= REUSED * counts[0]


class RouteBook:
    """One pool's routing memory and the choice it makes."""

    def __init__(self) -> None:
        self.index = PrefixIndex()
        self.heads = HeadStats()

    def choose(self, replicas: list[Replica], key: PromptKey, slack: float) -> Replica:
        """The replica for a prompt. The load bound is ``(1 + slack)`` x the mean load (our
        requests in flight there + the engine's scraped queue).

        1. Where this replica sent the prompt's own prefix (the history of its
           conversation, its document; for a head whose units are each new, its system
           prompt), unless that replica carries over ``HOLD`` x ``(1 + slack)`` x the
           others' mean: moving costs a prefill of all it holds.
        2. A head whose units come back: the prompt's home (:meth:`order`), the first within
           the bound; every gateway replica computes the same homes.
        3. Otherwise (nothing of it known to come back): the less loaded of its first
           ``CHOICES`` homes (the power of two choices), unless both are over the bound.
        4. The least loaded."""
        self.heads.observe(key)
        live = [r for r in replicas if r.up] or replicas  # all down: try anyway
        if len(live) == 1:
            pick = live[0]
        else:
            units = self.heads.units_return(key.head)
            bound = math.ceil((1 + slack) * (sum(r.load for r in live) + 1) / len(live))
            pick = self._held(live, key, units, slack) or self._placed(live, key, units, bound)
        self.index.record(key, pick.url)
        return pick

    def _held(
        self, live: list[Replica], key: PromptKey, units: bool, slack: float
    ) -> Replica | None:
        """The replica holding the prompt's prefix, unless it carries more than
        ``(1 + slack)`` x what the others carry on average (plus one), ``HOLD`` times that
        for a unit that comes back (moving it costs the prefill of all it holds). A later
        turn this replica never routed is held by its home: where every replica sends its
        conversation unless load moved it."""
        url = self.index.holder(key, units)
        if url is None and not (units and key.continued):
            return None
        held = self.order(live, key)[0] if url is None else None
        for r in live:
            if r.url == url:
                held = r
        if held is None:
            return None
        others = (sum(o.load for o in live) - held.load) / (len(live) - 1)
        hold = (HOLD if units else 1.0) * (1 + slack) * (others + 1)
        return held if held.load + 1 <= hold else None

    def _placed(self, live: list[Replica], key: PromptKey, units: bool, bound: float) -> Replica:
        order = self.order(live, key)
        if not units:  # nothing known to come back: the less loaded of its first homes
            order = sorted(order[:CHOICES], key=lambda r: r.load) + order[CHOICES:]
        for r in order:
            if r.load + 1 <= bound:
                return r
        return min(live, key=lambda r: r.load)

    def order(self, live: list[Replica], key: PromptKey) -> list[Replica]:
        """The replicas by preference, the same in every gateway replica: rendezvous ranking
        by the prompt's head, its first k re-ranked by the prompt's unit, k growing with the
        head's share of the traffic (one for most heads: a busy system prompt's
        conversations, or a shared instruction's documents, are spread)."""
        ranked = sorted(live, key=lambda r: score(key.head, r.seed), reverse=True)
        k = min(len(ranked), math.ceil(self.heads.share(key.head) * len(ranked) * SPREAD))
        if k <= 1:
            return ranked
        top = sorted(ranked[:k], key=lambda r: score(key.unit, r.seed), reverse=True)
        return top + ranked[k:]
