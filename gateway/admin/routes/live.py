"""Live numbers: pool state and per-tier figures from the gateway's own metrics.

The one answer the operator console's tiers page polls; it takes the admin token or the
console's session cookie.
"""

from __future__ import annotations

import time

from gateway.admin.deps import GatewayDep, LiveDep, admin_or_console
from gateway.admin.live import read_totals, summary
from gateway.admin.models import LiveOut
from gateway.admin.routes.base import admin_router

router = admin_router("operations", auth=admin_or_console)


@router.get(
    "/admin/live",
    summary="Pool state and live numbers per tier: rate, latency and TTFT percentiles, "
    "fallbacks, check failures, cache hit rate",
    response_model=LiveOut,
)
async def live(gw: GatewayDep, window: LiveDep) -> LiveOut:
    reading = window.read(time.monotonic(), read_totals(gw.prometheus().decode()))
    rt = gw.runtime
    return LiveOut(
        at=time.time(),
        pools=rt.pools.state(),
        store_degraded=gw.access.degraded,
        **summary(reading, rt.rules.tiers),
    )
