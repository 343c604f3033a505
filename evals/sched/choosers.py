"""How a gateway replica picks an engine replica, per policy of ``python -m evals sched``,
and how many prefixes a hashing scheme moves when one engine replica leaves.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field

from gateway.request.prefix import PromptKey
from gateway.rules.schema import Tier
from gateway.upstream.pools import Pool
from gateway.upstream.replicas import Replica, score

Choose = Callable[[Pool, PromptKey, "Gw"], Replica]


@dataclass
class Gw:
    """One gateway replica's view: its own pool (in-flight counts) and round-robin turn."""

    pool: Pool
    rr: itertools.count[int] = field(default_factory=itertools.count)


def _rr(pool: Pool, key: PromptKey, gw: Gw) -> Replica:
    return pool.replicas[next(gw.rr) % len(pool.replicas)]


def _least(pool: Pool, key: PromptKey, gw: Gw) -> Replica:
    return min(pool.replicas, key=lambda r: r.in_flight)


def _modulo(pool: Pool, key: PromptKey, gw: Gw) -> Replica:
    """Hash of the prompt's head mod n, kept unless 25% (and 2) over the least."""
    live = pool.replicas
    preferred = live[key.head % len(live)]
    least = min(live, key=lambda r: r.load)
    return preferred if preferred.load <= least.load * 1.25 + 2 else least


def _rendezvous(pool: Pool, key: PromptKey, gw: Gw) -> Replica:
    """Rendezvous hashing of the prompt's head with bounded load, nothing remembered: the
    highest-scoring replica within (1 + slack) x the mean load (the previous scheme)."""
    live = [r for r in pool.replicas if r.up] or pool.replicas
    bound = math.ceil((1 + pool.tier.affinity_slack) * (sum(r.load for r in live) + 1) / len(live))
    within = [r for r in live if r.load + 1 <= bound]
    if not within:
        return min(live, key=lambda r: r.load)
    return max(within, key=lambda r: score(key.head, r.seed))


def _prefix(pool: Pool, key: PromptKey, gw: Gw) -> Replica:
    """The gateway's choice: where the prompt's prefix went, else its home (affinity.py)."""
    return pool.choose(lambda: key)


CHOOSERS: dict[str, Choose] = {
    "round-robin": _rr,
    "least-load": _least,
    "modulo": _modulo,
    "rendezvous": _rendezvous,
    "prefix": _prefix,
}


def moved(name: str, n: int) -> float | None:
    """Share of 20,000 prefixes whose engine changes when engine 3 of ``n`` leaves."""
    if name not in ("modulo", "rendezvous", "prefix"):
        return None
    urls = tuple(f"http://engine-{i}:30000" for i in range(n))
    full = Pool.create("x", Tier(endpoints=urls, model="m"))
    less = Pool.create("x", Tier(endpoints=urls, model="m"))
    less.replicas = [r for r in less.replicas if not r.url.startswith("http://engine-3:")]
    gw = Gw(full)
    keys = range(0, 20_000 * 7919, 7919)
    chooser = CHOOSERS[name]
    changed = sum(
        chooser(full, PromptKey.of_hash(k), gw).url != chooser(less, PromptKey.of_hash(k), gw).url
        for k in keys
    )
    return changed / len(keys)
