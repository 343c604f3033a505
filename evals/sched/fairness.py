"""Fair share under one tenant's burst: the gateway's queue (:class:`Gate`) against the
engine's FIFO alone, in process (the second table of ``python -m evals sched``).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from evals.bench.common import percentile
from evals.report import md_table
from gateway.upstream.scheduler import Gate, Ticket

FAIR = (
    "One engine replica lets 4 requests generate at once (50 ms each; the rest wait FIFO). "
    "Tenant A keeps 48 requests in flight; tenant B sends 12 interactive requests one after "
    "another. Latency per request, in wall time (the gateway's own queue, "
    "`gateway/upstream/scheduler.py`, in process)."
)


async def fairness(queue: bool, slots: int = 4, service: float = 0.05) -> dict[str, Any]:
    """Tenant A keeps 48 requests in flight; B sends 12 interactive ones, one after another.
    The engine lets ``slots`` generate at once (the rest wait FIFO, as its batch limit
    does). With ``queue``, the gateway's :class:`Gate` holds the excess instead."""
    engine = asyncio.Semaphore(slots)  # FIFO
    gate = Gate(slots if queue else None)
    stop = asyncio.Event()
    a_lat: list[float] = []

    async def one(ticket: Ticket) -> float:
        t0 = time.perf_counter()
        await gate.acquire(ticket, time.monotonic() + 60)
        try:
            async with engine:
                await asyncio.sleep(service)
        finally:
            gate.release(service)
        return time.perf_counter() - t0

    async def tenant_a() -> None:
        while not stop.is_set():
            a_lat.append(await one(Ticket("a", 0)))

    workers = [asyncio.create_task(tenant_a()) for _ in range(48)]
    await asyncio.sleep(0.5)
    b = sorted([await one(Ticket("b", 0)) for _ in range(12)])
    stop.set()
    await asyncio.gather(*workers)
    a_sorted = sorted(a_lat)
    return {
        "mode": "gateway queue (fair share)" if queue else "engine FIFO only",
        "b_p50_ms": (percentile(b, 50) or 0) * 1000,
        "b_p95_ms": (percentile(b, 95) or 0) * 1000,
        "a_p50_ms": (percentile(a_sorted, 50) or 0) * 1000,
        "a_done": len(a_lat),
        "service_ms": service * 1000,
    }


def fair_table(rows: list[dict[str, Any]]) -> str:
    return md_table(
        ["mode", "B P50 (ms)", "B P95 (ms)", "A P50 (ms)", "A answered meanwhile", "service (ms)"],
        [
            [
                r["mode"],
                f"{r['b_p50_ms']:.0f}",
                f"{r['b_p95_ms']:.0f}",
                f"{r['a_p50_ms']:.0f}",
                r["a_done"],
                f"{r['service_ms']:.0f}",
            ]
            for r in rows
        ],
    )
