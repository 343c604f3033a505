"""What one gateway replica remembers of its own routing: where each prompt prefix went, and
how each prompt head is used. Nothing here is shared between gateway replicas.

* :class:`PrefixIndex` maps the chain of a prompt (:mod:`gateway.request.prefix`) to the
  engine replica that last got it, LRU-bounded: a conversation's next turn, whose chain
  starts with this turn's, finds where its history is cached even after it was moved off
  its first replica by load.
* :class:`HeadStats` counts, per prompt head (a system prompt), how much of the traffic it
  carries and whether its *units* come back (a chat's later turns, an agent's next step,
  another question on the same document) or are each new (single questions to a tenant's
  assistant). Every gateway replica sees a like share of the traffic, so they agree on
  these figures without talking to each other.
"""

from __future__ import annotations

import math
from collections import OrderedDict

from gateway.request.prefix import BLOCK, PromptKey
from gateway.upstream.replicas import Replica, score

INDEX_BLOCKS = 1 << 16  # prefix blocks remembered (~64 MiB of prompts routed)
RECENT_UNITS = 1 << 15
DECAY_EVERY = 2048  # requests between halvings of the head counts


class PrefixIndex:
    """Prefix block hash -> the URL of the replica that last got a prompt with it."""

    def __init__(self, capacity: int = INDEX_BLOCKS):
        self.capacity = capacity
        self._where: OrderedDict[int, str] = OrderedDict()

    def holder(self, key: PromptKey) -> tuple[str, int] | None:
        """The replica that got the deepest prefix of this prompt that goes past its lead
        (past the shared system prompt: the conversation's or document's own text), and
        that prefix's length in bytes; None if no such prefix was routed here."""
        where = self._where
        for i in range(len(key.chain) - 1, -1, -1):
            depth = (i + 1) * BLOCK
            if depth <= key.lead:
                return None
            url = where.get(key.chain[i])
            if url is not None:
                return url, depth
        return None

    def record(self, key: PromptKey, url: str) -> None:
        where = self._where
        first = key.lead // BLOCK  # blocks within the lead are shared: not looked up
        for h in key.chain[first:]:
            where[h] = url
            where.move_to_end(h)
        while len(where) > self.capacity:
            where.popitem(last=False)

    def forget(self, url: str) -> None:
        """A replica left the pool: its prefixes are no longer anywhere."""
        for h in [h for h, u in self._where.items() if u == url]:
            del self._where[h]


class HeadStats:
    """Per prompt head: its share of the requests and how often its units come back."""

    def __init__(self) -> None:
        self.total = 0.0
        self._heads: dict[int, list[float]] = {}  # head -> [requests, units seen again]
        self._units: OrderedDict[int, None] = OrderedDict()
        self._since_decay = 0

    def observe(self, key: PromptKey) -> None:
        seen = key.unit in self._units or key.continued
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

    def reused(self, head: int) -> float:
        """The share of this head's requests whose unit was seen before."""
        counts = self._heads.get(head)
        return counts[1] / counts[0] if counts and counts[0] else 0.0

    def requests(self, head: int) -> float:
        counts = self._heads.get(head)
        return counts[0] if counts else 0.0


SPREAD = 1.0  # a head whose units come back is spread over share x replicas x SPREAD of them
REUSED = 0.5  # ...when at least this share of its requests repeat a unit seen before
MIN_REQUESTS = 4.0  # and it has been seen this often


class RouteBook:
    """One pool's routing memory (:class:`PrefixIndex`, :class:`HeadStats`) and the choice
    it makes: :meth:`choose`."""

    def __init__(self) -> None:
        self.index = PrefixIndex()
        self.heads = HeadStats()

    def choose(self, replicas: list[Replica], key: PromptKey, slack: float) -> Replica:
        """The replica for a prompt, within a bounded load:

        1. where this replica sent the prompt's deepest prefix past its lead (the
           conversation's history, the document), if it is within the bound;
        2. else the prompt's home ranking (:meth:`order`), the first within the bound;
        3. else the least loaded.

        The bound is ``(1 + slack)`` x the mean load (in flight here + the engine's queue)."""
        self.heads.observe(key)
        live = [r for r in replicas if r.up] or replicas  # all down: try anyway
        if len(live) == 1:
            pick = live[0]
        else:
            total = sum(r.in_flight + r.queued for r in live)
            bound = math.ceil((1 + slack) * (total + 1) / len(live))
            pick = (
                self._held(live, key, bound)
                or next(
                    (r for r in self.order(live, key) if r.load + 1 <= bound),
                    None,
                )
                or min(live, key=lambda r: r.load)
            )
        self.index.record(key, pick.url)
        return pick

    def _held(self, live: list[Replica], key: PromptKey, bound: float) -> Replica | None:
        held = self.index.holder(key)
        if held is None:
            return None
        for r in live:
            if r.url == held[0]:
                return r if r.load + 1 <= bound else None
        return None

    def order(self, live: list[Replica], key: PromptKey) -> list[Replica]:
        """The replicas by preference for this prompt, the same in every gateway replica:
        rendezvous ranking by its head; a head whose units come back (conversations, agent
        runs, documents) has its units spread over the first k of that ranking, k growing
        with the head's share of the traffic."""
        ranked = sorted(live, key=lambda r: score(key.head, r.seed), reverse=True)
        h = self.heads
        if h.requests(key.head) < MIN_REQUESTS or h.reused(key.head) < REUSED:
            return ranked
        k = min(len(ranked), max(1, math.ceil(h.share(key.head) * len(ranked) * SPREAD)))
        if k == 1:
            return ranked
        top = sorted(ranked[:k], key=lambda r: score(key.unit, r.seed), reverse=True)
        return top + ranked[k:]
