"""Whether the store answers: one breaker in front of every call, and what it tells.

Every failed call counts, whatever the reason (unreachable, timed out, read-only replica,
out of memory, loading, a script busy, a cluster slot moved...). ``failures`` of them in a
row, over at least ``span`` seconds (the call timeout), open the breaker: the store is
*degraded*. The span keeps one wave of calls that time out together (a process starved of
CPU for a moment) from opening it; a store that still fails a timeout later does. While
it is open, calls fail at once (a stalled store stops costing every request its timeout)
and a probe tries the store every ``probe_interval`` seconds; the first probe that
succeeds closes it. Degraded is one mode, whatever made it: the data plane serves what it
has seen (:mod:`gateway.access.guard`).

It logs one line when the store goes bad and one when it comes back, never one per call,
and tells ``/readyz`` (:meth:`StoreHealth.state`) and ``/metrics``
(:meth:`StoreHealth.prometheus`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

from gateway.errors import StoreUnavailable

log = logging.getLogger("gateway.store")

# Set by the admin API for its requests: a call refused by the open breaker waits for a
# probe of the store (at most one probe's bound) and goes ahead if the store is back. An
# operator's call may wait that long; a data-plane request is refused at once.
PATIENT: ContextVar[bool] = ContextVar("store_patient", default=False)


class StoreHealth:
    """The breaker's state; pure bookkeeping (the store runs the calls and the probe)."""

    def __init__(
        self,
        kind: str,
        failures: int = 3,
        probe_interval: float = 0.5,
        span: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.kind = kind  # "memory", "single", "sentinel", "cluster"
        self.failures = failures
        self.probe_interval = probe_interval
        self.span = span
        self._clock = clock
        self.reason: str | None = None  # why it is degraded; None: healthy
        self._since = clock()
        self._in_a_row = 0
        self._first = 0.0  # when the failures in a row began
        self.errors: dict[str, int] = {}  # failed calls by reason
        self.refused = 0  # calls failed at once because the breaker was open
        self.outages = 0
        self._listeners: list[Callable[[bool], None]] = []
        self._on_failure: list[Callable[[], None]] = []

    @property
    def degraded(self) -> bool:
        return self.reason is not None

    @property
    def failing(self) -> bool:
        """Degraded, or the latest call failed (the breaker may not be open yet)."""
        return self.reason is not None or self._in_a_row > 0

    def on_change(self, listener: Callable[[bool], None]) -> None:
        """Call ``listener(degraded)`` on every transition."""
        self._listeners.append(listener)

    def on_failure(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` on every failed call, the breaker open or not (what the store
        holds may then differ from what this process thinks it wrote)."""
        self._on_failure.append(listener)

    def check(self) -> None:
        """Before a call: refuse it at once while the breaker is open."""
        if self.reason is not None:
            self.refused += 1
            raise StoreUnavailable(f"degraded, {self.reason}")

    def succeeded(self) -> None:
        self._in_a_row = 0

    def failed(self, reason: str, detail: str = "") -> bool:
        """Count a failed call; True when this one opened the breaker. ``detail`` (the
        error itself) goes only to the log line that says the store went bad."""
        self.errors[reason] = self.errors.get(reason, 0) + 1
        for fn in list(self._on_failure):
            try:
                fn()
            except Exception:  # a listener's bug must not break the store's calls
                log.exception("store failure listener failed")
        now = self._clock()
        if self._in_a_row == 0:
            self._first = now
        self._in_a_row += 1
        if self.reason is not None or self._in_a_row < self.failures:
            return False
        if now - self._first < self.span:
            return False
        self.reason, self._since = reason, now
        self.outages += 1
        log.warning(
            "store degraded: %s (%s%s); serving what this replica knows",
            reason,
            self.kind,
            f": {detail[:200]}" if detail else "",
        )
        self._tell(True)
        return True

    def still(self, reason: str) -> None:
        """A probe failed: stay open, with the latest reason."""
        if self.reason is not None:
            self.reason = reason

    def recovered(self) -> None:
        """A probe succeeded: close the breaker."""
        if self.reason is None:
            return
        now = self._clock()
        took = now - self._since
        self.reason, self._since, self._in_a_row = None, now, 0
        log.warning("store back after %.1f s", took)
        self._tell(False)

    def _tell(self, degraded: bool) -> None:
        for fn in list(self._listeners):
            try:
                fn(degraded)
            except Exception:  # a listener's bug must not break the store's calls
                log.exception("store health listener failed")

    def state(self) -> dict[str, Any]:
        """For ``/readyz``: ``ok`` or ``degraded``, why, and for how long."""
        out: dict[str, Any] = {"kind": self.kind, "state": "degraded" if self.reason else "ok"}
        if self.reason is not None:
            out["reason"] = self.reason
            out["for_s"] = round(self._clock() - self._since, 1)
        return out

    def prometheus(self) -> bytes:
        lines = [
            "# HELP gateway_store_degraded 1 while the store's breaker is open",
            "# TYPE gateway_store_degraded gauge",
            f'gateway_store_degraded{{kind="{self.kind}"}} {int(self.degraded)}',
            "# HELP gateway_store_errors_total failed store calls, by reason",
            "# TYPE gateway_store_errors_total counter",
        ]
        lines += [f'gateway_store_errors_total{{reason="{r}"}} {n}' for r, n in self.errors.items()]
        lines += [
            "# HELP gateway_store_refused_total calls failed at once by the open breaker",
            "# TYPE gateway_store_refused_total counter",
            f"gateway_store_refused_total {self.refused}",
            "# HELP gateway_store_outages_total times the breaker opened",
            "# TYPE gateway_store_outages_total counter",
            f"gateway_store_outages_total {self.outages}",
        ]
        return ("\n".join(lines) + "\n").encode()
