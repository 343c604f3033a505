"""A tier's circuit breaker: consecutive upstream failures open it for a cooldown.

Open, the tier gets no traffic (the router skips it); past the cooldown it is half-open
and one request may probe it: its success closes the circuit, its failure opens it again.
Check failures and the request's own 4xx do not count (:mod:`gateway.dispatch.fallback`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class Circuit:
    threshold: int
    cooldown: float
    failures: int = 0
    opened_at: float | None = None
    probe_at: float | None = None  # half-open: when the one probe went out

    def available(self, now: float) -> bool:
        """Closed; or open past its cooldown (half-open) with no probe out: one request may
        probe it. A probe that never reports (cancelled) frees the way after a cooldown."""
        if self.opened_at is None:
            return True
        if now - self.opened_at < self.cooldown:
            return False
        return self.probe_at is None or now - self.probe_at >= self.cooldown

    def begin(self, now: float) -> None:
        """An attempt starts on this tier: on a half-open circuit, it is the probe."""
        if self.opened_at is not None and self.available(now):
            self.probe_at = now

    @property
    def is_open(self) -> bool:
        return self.opened_at is not None

    def success(self) -> None:
        self.failures = 0
        self.opened_at = self.probe_at = None

    def failure(self, now: float) -> None:
        self.failures += 1
        if self.probe_at is not None or self.failures >= self.threshold:
            self.opened_at, self.probe_at = now, None  # a failed probe: open again
