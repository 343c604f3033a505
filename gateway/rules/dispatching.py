"""The ``dispatch`` section of ``routing_rules.yaml``: the attempt loop's settings (same-tier
retries and their backoff, hedging's budget, handing a hedge back, the reserve kept for
the next tier)."""

from __future__ import annotations

from pydantic import Field

from gateway.rules.base import Strict


class Dispatch(Strict):
    backoff_initial: float = Field(default=0.02, ge=0, description="s before retrying a tier")
    backoff_max: float = Field(default=0.5, ge=0, description="s: the longest wait before a retry")
    backoff_jitter: float = Field(default=0.02, ge=0)
    same_tier_retries: int = Field(
        default=1, ge=0, le=3, description="retries of a tier after a reset, 500, 502, 503, 429"
    )
    hedge_share: float = Field(
        default=0.1, ge=0, le=1, description="hedges may add at most this share of requests"
    )
    hedge_burst: float = Field(default=10.0, ge=1, description="hedges saved up for a burst")
    bridge: bool = Field(default=True, description="hand a hedge won by the next tier back")
    reserve_floor: float = Field(
        default=2.0, ge=0, description="seconds of the deadline always kept for the next tier"
    )
