"""A USD budget is kept only where every answer can be priced: a tenant with a
``cost_budget`` is answered by tiers whose price is known (the rules' ``price``, or
LiteLLM's model map for a hosted tier), never by one whose answers would cost nothing
against it. Where the route has no priced tier the request is refused before it starts."""

from __future__ import annotations

from dataclasses import replace

from gateway.errors import PermissionDenied
from gateway.routing.router import RouteDecision
from gateway.upstream.pools import Pools


def priced_route(d: RouteDecision, pools: Pools) -> RouteDecision:
    """``d`` without its unpriced tiers (said in its route header); 403 ``tier_unpriced``
    when none is left."""
    unpriced = [t for t in d.tiers if t in pools and pools[t].price is None]
    if not unpriced:
        return d
    tiers = tuple(t for t in d.tiers if t not in unpriced)
    if not tiers:
        raise PermissionDenied(
            f"This key has a USD budget and rule {d.rule!r} routes to tiers without a known "
            f"price ({', '.join(unpriced)}), whose cost could not be counted against it; "
            "the operator sets tiers.<name>.price.",
            code="tier_unpriced",
        )
    return replace(d, tiers=tiers, reason=f"{d.reason} unpriced: {','.join(unpriced)}")
