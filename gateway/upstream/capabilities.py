"""What each tier can do for another tier's answer and for accounting, said at start (the
log) and in ``/readyz``: whether it continues a text another tier began, how a stream
broken before it would be finished there (``gateway.dispatch.finish``), whether its price
is known.

A hosted tier is the one that may lack them: a LiteLLM model takes an assistant prefill
only where LiteLLM's model map says so, and is priced only where the map (or the rules'
``price``) knows it; an unpriced tier reports no cost, and no tenant with a USD budget is
sent to it (the router's ``priced`` input).
"""

from __future__ import annotations

import logging

from gateway.upstream.pools import Pool, Pools

log = logging.getLogger("gateway.upstream.pools")


def capabilities(pool: Pool) -> dict[str, object]:
    """One tier's: its provider, whether it continues (until it refuses once), how it would
    finish another tier's broken stream, whether it is priced."""
    t = pool.tier
    continues = t.continuation != "off" and pool.continues
    finish = "continue" if continues else ("prompt" if t.continuation_prompt else "restart")
    return {
        "provider": t.provider,
        "continues": continues,
        "finish": finish,
        "priced": pool.price is not None,
    }


def all_capabilities(pools: Pools) -> dict[str, dict[str, object]]:
    return {name: capabilities(p) for name, p in pools.by_tier.items()}


def say_lacks(pools: Pools) -> None:
    """A line in the log per hosted tier: what it lacks (a warning), or that it lacks
    nothing."""
    for name, pool in pools.by_tier.items():
        if pool.tier.provider != "litellm":
            continue
        c = capabilities(pool)
        lacks = []
        if not c["continues"]:
            lacks.append(f"no assistant prefill (a stream broken before it: {c['finish']})")
        if not c["priced"]:
            lacks.append("no known price (no cost reported; USD budgets are not spent on it)")
        model = (pool.tier.litellm_params or {}).get("model")
        if lacks:
            log.warning("hosted tier %s (%s): %s", name, model, "; ".join(lacks))
        else:
            log.info("hosted tier %s (%s): continues by prefill, priced", name, model)
