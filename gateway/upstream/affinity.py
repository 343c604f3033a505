"""Replica choice by what the engines' prefix caches hold, learnt from what this gateway
replica routed. Nothing here is shared between gateway replicas: each learns from its own
share of the traffic, and where it knows nothing it falls back on homes that every replica
computes alike (rendezvous hashing of the prompt's keys), so they agree without talking.

* :class:`PrefixIndex` maps the prefixes of a prompt (its chain, its unit and its head:
  :mod:`gateway.request.prefix`) to the engine replica that last got them, LRU-bounded.
  A conversation's next turn, whose chain starts with this turn's, finds where its history
  is cached, even after load moved it off its home.
* :class:`HeadStats` learns, per prompt head (a system prompt), whether its *units* come
  back (a chat's later turns, an agent's next step, another question on one document) or
  are each new (single questions to a tenant's assistant, prompts with nothing shared),
  and its share of the traffic.
* :class:`RouteBook` chooses (:meth:`RouteBook.choose`).

Why units and heads: a unit that comes back is where the reuse is (a conversation's
history, a document), so its home is the unit's own (units of one system prompt spread
over every replica, each prefilling that prompt once); a unit that does not come back
reuses only its head, so its home is the head's (one tenant's questions on one replica).
A long lead (an agent's instructions and tool list) costs a long prefill on every replica
it is spread to, so its units go to as many replicas as its share of the traffic needs.
"""

from __future__ import annotations

import math
from collections import OrderedDict

from gateway.request.prefix import BLOCK, PromptKey
from gateway.upstream.replicas import Replica, score

INDEX_ENTRIES = 1 << 16  # prefixes remembered (blocks of ~1 KiB: ~64 MiB of prompts)
RECENT_UNITS = 1 << 15
DECAY_EVERY = 2048  # requests between halvings of the per-head counts
REUSED = 0.4  # a head's units come back when this share of its requests repeat one
MIN_REQUESTS = 4.0  # ...seen over at least this many of its requests
HOLD = 2.0  # a replica holding a prompt's prefix keeps it up to HOLD x the others' load
HOLD_BLOCKS = 16  # ...times (1 + its prefix's blocks / HOLD_BLOCKS): moving costs its prefill
UNIT_BLOCKS = 2  # own text past the lead this long (blocks): routed by its unit at once
BIG_LEAD = 8 * BLOCK  # a lead this long is spread over its share of replicas, not all
PRIOR = 32.0  # requests' worth of an equal share that a head's share starts from
HYSTERESIS = 0.75  # replicas a head's share must move before its spread changes
HEAD_HOLDERS = 8  # replicas remembered per head routed by itself


class PrefixIndex:
    """Prefix hash -> the URL of the replica that last got a prompt with that prefix."""

    def __init__(self, capacity: int = INDEX_ENTRIES):
        self.capacity = capacity
        self._where: OrderedDict[int, str] = OrderedDict()
        self._heads: OrderedDict[int, tuple[str, ...]] = OrderedDict()

    def holder(self, key: PromptKey) -> tuple[str, int] | None:
        """Where this replica sent the deepest prefix of this prompt past its lead (the
        conversation's or document's own text), else its unit, with that prefix's length
        in blocks (a unit: the lead's)."""
        where = self._where
        for i in range(len(key.chain) - 1, -1, -1):
            if (i + 1) * BLOCK <= key.lead:
                break
            url = where.get(key.chain[i])
            if url is not None:
                return url, i + 1
        url = where.get(key.unit)
        return None if url is None else (url, key.lead // BLOCK)

    def head_holders(self, head: int) -> tuple[str, ...]:
        """The replicas this replica sent a head to (a head whose units are each new: a
        tenant's system prompt), most recent first."""
        return self._heads.get(head, ())

    def record(self, key: PromptKey, url: str, units: bool) -> None:
        """Remember where the prompt went: its own prefixes and unit, and when it was
        routed by its head, the head too (one of up to ``HEAD_HOLDERS`` replicas holding
        it). The prefixes are kept either way: a prompt routed by its head that comes back
        (a conversation's next turn, the same question again) finds where it is cached
        once its head is known to come back and it is routed by its unit."""
        if not units:
            held = self._heads.pop(key.head, ())
            self._heads[key.head] = (url, *(u for u in held if u != url))[:HEAD_HOLDERS]
            if len(self._heads) > self.capacity:
                self._heads.popitem(last=False)
        where = self._where
        for h in (*key.chain[key.lead // BLOCK :], key.unit):  # the lead's blocks: shared
            where[h] = url
            where.move_to_end(h)
        while len(where) > self.capacity:
            where.popitem(last=False)


class HeadStats:
    """Per prompt head: its requests, how many of them repeated a unit seen before, and over
    how many replicas its units are spread."""

    def __init__(self) -> None:
        self.total = 0.0
        self._heads: dict[int, list[float]] = {}  # head -> [requests, units seen again, k]
        self._units: OrderedDict[int, None] = OrderedDict()
        self._since_decay = 0

    def observe(self, key: PromptKey) -> None:
        seen = key.continued or key.unit in self._units
        self._units[key.unit] = None
        self._units.move_to_end(key.unit)
        if len(self._units) > RECENT_UNITS:
            self._units.popitem(last=False)
        counts = self._heads.setdefault(key.head, [0.0, 0.0, 0.0])
        counts[0] += 1
        counts[1] += seen
        self.total += 1
        self._since_decay += 1
        if self._since_decay >= DECAY_EVERY:
            self._decay()

    def _decay(self) -> None:
        """Halve every count: recent traffic counts most; heads no longer seen go."""
        self._since_decay = 0
        self.total /= 2
        for head, c in list(self._heads.items()):
            c[0] /= 2
            c[1] /= 2
            if c[0] < 0.5:
                del self._heads[head]

    def units_return(self, head: int) -> bool:
        """Whether this head's units come back: enough of its requests repeat a unit."""
        counts = self._heads.get(head)
        return counts is not None and counts[0] >= MIN_REQUESTS and counts[1] >= REUSED * counts[0]

    def spread(self, head: int, n: int) -> int:
        """Over how many of ``n`` replicas this head's units go: its share of the requests
        x ``n``, the share shrunk towards an equal share of the heads seen (``PRIOR``
        requests' worth) and kept until it moves ``HYSTERESIS`` away, so that gateway
        replicas, each seeing part of the traffic, settle on the same number."""
        counts = self._heads.get(head)
        if not counts:
            return n
        share = (counts[0] + PRIOR / len(self._heads)) / (self.total + PRIOR)
        want = share * n
        if not counts[2] or abs(want - counts[2]) > HYSTERESIS:
            counts[2] = float(min(n, max(1, round(want))))
        return int(counts[2])


class RouteBook:
    """One pool's routing memory and the choice it makes."""

    def __init__(self) -> None:
        self.index = PrefixIndex()
        self.heads = HeadStats()

    def choose(self, replicas: list[Replica], key: PromptKey, slack: float) -> Replica:
        """The replica for a prompt (loads: :attr:`Replica.load`).

        A prompt is routed by its *unit* when it is a later turn, when its own text past
        the lead is long (a document, a pasted file: ``UNIT_BLOCKS``), or when its head's
        units are known to come back; otherwise by its *head*.

        1. Where this replica last sent the prompt's own prefix (the history of its
           conversation, its document; routed by the head: the least loaded of the
           replicas it sent the head to, :meth:`_head_held`), unless that replica
           carries over ``HOLD`` x ``(1 + blocks / HOLD_BLOCKS)`` x ``(1 + slack)`` x the
           others' mean load (plus one): moving costs the prefill of all it holds, so a
           long document stays put where a short prompt moves. A later turn goes where
           this replica sent its previous turn; one whose previous turn this replica did
           not route goes to its home, where every replica sends its conversation.
        2. The first of its homes (:meth:`order`) within ``(1 + slack)`` x the mean load.
           While nothing says its unit comes back (a first question, a first sight of a
           document) and this replica is the engines' only client (its loads are exact),
           the least loaded instead, its homes breaking ties; with other clients (other
           gateway replicas) their counts are a scrape old, so the homes decide, and every
           gateway replica puts a new prompt on the same replica.
        3. The least loaded."""
        self.heads.observe(key)
        sure = key.continued or self.heads.units_return(key.head)
        units = sure or len(key.chain) - key.lead // BLOCK >= UNIT_BLOCKS
        live = [r for r in replicas if r.up] or replicas  # all down: try anyway
        if len(live) == 1:
            pick = live[0]
        else:
            pick = self._held(live, key, units, slack) or self._placed(
                live, key, units, sure, slack
            )
        self.index.record(key, pick.url, units)
        return pick

    def _held(
        self, live: list[Replica], key: PromptKey, units: bool, slack: float
    ) -> Replica | None:
        if not units:
            return self._head_held(live, key, slack)
        found = self.index.holder(key)
        if found is not None and key.continued and found[1] < key.prior // BLOCK:
            found = None  # an older turn than the previous one: others routed it since
        if found is None and not key.continued:
            return None
        if found is None:  # a later turn this replica did not see: at its home
            held, depth = self.order(live, key, units)[0], key.prior // BLOCK
        else:
            match = [r for r in live if r.url == found[0]]
            if not match:
                return None
            held, depth = match[0], found[1] or key.lead // BLOCK
        return held if _keeps(live, held, HOLD * (1 + depth / HOLD_BLOCKS) * (1 + slack)) else None

    def _head_held(self, live: list[Replica], key: PromptKey, slack: float) -> Replica | None:
        """The least loaded of the replicas this head went to, unless over
        ``(1 + blocks / HOLD_BLOCKS)`` x ``(1 + slack)`` x the others' mean (plus one): a
        busy tenant's questions spread over more replicas as its load grows, each
        prefilling its system prompt once."""
        holders = self.index.head_holders(key.head)
        held = [r for r in live if r.url in holders]
        if not held:
            return None
        best = min(held, key=lambda r: r.load)
        return (
            best
            if _keeps(live, best, (1 + key.lead // BLOCK / HOLD_BLOCKS) * (1 + slack))
            else None
        )

    def _placed(
        self, live: list[Replica], key: PromptKey, units: bool, sure: bool, slack: float
    ) -> Replica:
        bound = math.ceil((1 + slack) * (sum(r.load for r in live) + 1) / len(live))
        order = self.order(live, key, units)
        alone = sum(r.others for r in live) <= 1 + sum(r.in_flight for r in live) / 4
        if not sure and alone:
            order = sorted(order, key=lambda r: r.load)
        for r in order:
            if r.load + 1 <= bound:
                return r
        return min(live, key=lambda r: r.load)

    def order(self, live: list[Replica], key: PromptKey, units: bool) -> list[Replica]:
        """The replicas by preference, the same in every gateway replica: rendezvous ranking
        by the prompt's head, or by its unit, over the first k of its head's ranking when
        its lead is long (k: :meth:`HeadStats.spread`), over all when short."""
        ranked = sorted(live, key=lambda r: score(key.head, r.seed), reverse=True)
        if not units:
            return ranked
        k = self.heads.spread(key.head, len(live)) if key.lead >= BIG_LEAD else len(live)
        top = sorted(ranked[:k], key=lambda r: score(key.unit, r.seed), reverse=True)
        return top + ranked[k:]


def _keeps(live: list[Replica], r: Replica, factor: float) -> bool:
    """Whether ``r`` takes one more request while carrying at most ``factor`` x the other
    replicas' mean load (plus one)."""
    others = (sum(o.load for o in live) - r.load) / (len(live) - 1)
    return r.load + 1 <= factor * (others + 1)
