"""Capacity-aware queueing in front of one pool: who may send, who waits, who is refused.

Each pool may have ``tiers.<t>.max_concurrency`` requests in flight per replica (unset:
unlimited, and a request passes straight through). Beyond that, requests wait here, in the
gateway, not in the engine's FIFO:

* **Priority bands** first: interactive (0) before standard (1) before batch (2); a tenant
  policy may shift its requests up or down a band.
* **Weighted fair share within a band**: one FIFO per tenant, the tenants served in
  weighted round-robin (a tenant's policy ``share_weight`` requests per turn, default 1),
  so a tenant sending 10x the traffic waits behind its own requests, not everyone else's.
* **Capacity refined by the engines**: while SGLang's scraped metrics show requests
  queued inside an engine (``num_queue_reqs``), the capacity is what is in flight now
  (at least one): new requests wait here, in priority and fair-share order, not in the
  engine's FIFO, and go as slots are given back.
* **Shedding**: a request whose estimated start (the queue ahead of it x the pool's
  observed service time / capacity) is past its attempt's end is refused at once
  (:class:`~gateway.upstream.failures.Shed`: the next tier, or a 429 with ``Retry-After``). With
  ``max_queue`` set, a full queue sheds the newest waiter of the lowest band below an
  arrival (batch first), else the arrival.

A slot is handed from the releasing request straight to the next waiter; a waiter that
leaves (cancelled, timed out) leaves the queue, and one that was handed a slot while
leaving passes it on.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from types import MappingProxyType

from gateway.upstream.failures import QueueTimeout, Shed

PRIORITY = MappingProxyType({"interactive": 0, "standard": 1, "batch": 2})
BANDS = 3
_ALPHA = 0.2  # weight of a new service-time sample in the moving average


@dataclass(frozen=True, slots=True)
class Ticket:
    """Who is asking: the tenant (its fair share) and the priority band (0 = first)."""

    tenant: str = ""
    priority: int = 1
    weight: int = 1  # requests served per turn of the round-robin

    @classmethod
    def of(cls, tenant: str | None, sla: str, shift: int = 0, weight: int = 1) -> Ticket:
        band = PRIORITY.get(sla, 1) + shift
        return cls(tenant or "", min(BANDS - 1, max(0, band)), max(1, weight))


ANYONE = Ticket()  # no tenant, the standard band


@dataclass(slots=True, eq=False)
class _Waiter:
    ticket: Ticket
    fut: asyncio.Future[None]
    since: float = field(default_factory=time.monotonic)


class Gate:
    """The queue of one pool. ``capacity`` None: unlimited (nobody ever waits)."""

    def __init__(self, capacity: int | None, max_queue: int | None = None):
        self.capacity = capacity
        self.max_queue = max_queue
        self.busy = 0
        self.waiting = 0
        self.shed = 0  # requests refused since start (a metric)
        self.engine_backlog = False  # the engines queue requests themselves (scraped)
        self.service_s: float | None = None  # moving average of a slot's hold time
        self._bands: list[OrderedDict[str, deque[_Waiter]]] = [OrderedDict() for _ in range(BANDS)]
        self._turn: dict[tuple[int, str], int] = {}  # served in the current turn, by tenant

    @property
    def saturated(self) -> bool:
        """Every slot taken and someone waiting: a load balancer should send elsewhere."""
        return self.waiting > 0

    def state(self) -> dict[str, object]:
        return {
            "capacity": self.capacity,
            "in_flight": self.busy,
            "waiting": self.waiting,
            "waiting_by_band": [sum(len(q) for q in b.values()) for b in self._bands],
            "service_ms": None if self.service_s is None else round(self.service_s * 1000, 1),
            "shed": self.shed,
            "saturated": self.saturated,
        }

    async def acquire(self, ticket: Ticket, until: float) -> float:
        """Take a slot, waiting at most until ``until`` (monotonic); the seconds waited."""
        if self.capacity is None or (
            self.busy < self.capacity
            and not self.waiting
            and (not self.engine_backlog or not self.busy)  # one always goes: progress
        ):
            self.busy += 1
            return 0.0
        self._admit(ticket, until)
        w = _Waiter(ticket, asyncio.get_running_loop().create_future())
        self._push(w)
        try:
            async with asyncio.timeout(max(0.0, until - time.monotonic())):
                await w.fut
        except BaseException as e:
            if w.fut.done() and not w.fut.cancelled() and w.fut.exception() is None:
                self.release(None)  # handed a slot while leaving: pass it on
            elif not w.fut.done() or w.fut.cancelled():
                self._remove(w)
            if isinstance(e, TimeoutError):
                raise QueueTimeout("no free slot within the budget") from None
            raise
        return time.monotonic() - w.since

    def release(self, held_s: float | None) -> None:
        """A slot is free: the next waiter gets it. ``held_s``: how long it was held."""
        if held_s is not None:
            s = self.service_s
            self.service_s = held_s if s is None else s + _ALPHA * (held_s - s)
        w = self._pop()
        if w is None:
            self.busy -= 1
        else:
            w.fut.set_result(None)  # the slot passes on; busy is unchanged

    def estimate(self, priority: int) -> float:
        """Seconds until a request of ``priority`` arriving now would start."""
        if self.capacity is None or self.service_s is None:
            return 0.0
        ahead = sum(sum(len(q) for q in b.values()) for b in self._bands[: priority + 1])
        return math.ceil((ahead + 1) / self.capacity) * self.service_s

    def _admit(self, ticket: Ticket, until: float) -> None:
        """Refuse at once a request that cannot start in time, or that a full queue has no
        room for (making room by shedding a lower band's newest waiter first)."""
        est = self.estimate(ticket.priority)
        if est > until - time.monotonic():
            self._refuse(est, f"the queue ahead needs ~{est:.2f}s, more than the time left")
        if self.max_queue is not None and self.waiting >= self.max_queue:
            victim = self._newest_below(ticket.priority)
            if victim is None:
                self._refuse(est, f"the queue is full ({self.waiting} waiting)")
            else:
                self._remove(victim)
                self.shed += 1
                victim.fut.set_exception(_shed(est, "shed for a request of higher priority"))

    def _refuse(self, est: float, why: str) -> None:
        self.shed += 1
        raise _shed(est, why)

    def _push(self, w: _Waiter) -> None:
        band = self._bands[w.ticket.priority]
        q = band.get(w.ticket.tenant)
        if q is None:
            q = band[w.ticket.tenant] = deque()
        q.append(w)
        self.waiting += 1

    def _pop(self) -> _Waiter | None:
        for b, band in enumerate(self._bands):
            while band:
                tenant, q = next(iter(band.items()))
                w = q.popleft()
                key = (b, tenant)
                served = self._turn.pop(key, 0) + 1
                if not q:
                    del band[tenant]
                elif served >= w.ticket.weight:
                    band.move_to_end(tenant)  # weighted round-robin: the next tenant's turn
                else:
                    self._turn[key] = served
                self.waiting -= 1
                if not w.fut.done():
                    return w
        return None

    def _remove(self, w: _Waiter) -> None:
        band = self._bands[w.ticket.priority]
        q = band.get(w.ticket.tenant)
        if q is not None and w in q:
            q.remove(w)
            self.waiting -= 1
            if not q:
                del band[w.ticket.tenant]
                self._turn.pop((w.ticket.priority, w.ticket.tenant), None)

    def _newest_below(self, priority: int) -> _Waiter | None:
        for band in reversed(self._bands[priority + 1 :]):
            newest = max((q[-1] for q in band.values()), key=lambda w: w.since, default=None)
            if newest is not None:
                return newest
        return None


def _shed(est: float, why: str) -> Shed:
    return Shed(why, retry_after=float(max(1, min(60, math.ceil(est)))))
