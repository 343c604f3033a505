"""The simulator's settings (one replica's command line as a frozen value) and the
body type every module reads and writes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Json = dict[str, Any]


@dataclass(frozen=True)
class SimConfig:
    """One replica's settings: its command line (:func:`engines.sim.cli.parse_args`)."""

    port: int
    host: str = "127.0.0.1"
    profile: str = "highspeed"
    seed: int = 0
    model: str = ""
    time_scale: float = 1.0
    max_running_requests: int | None = None
    max_total_tokens: int | None = None
    context_length: int = 131072
    faults: dict[str, float] = field(default_factory=dict)
    fault_draw: str = "order"  # or "content"
    retry_after: float = 1.0

    @property
    def served_model_name(self) -> str:
        return self.model or f"sim-{self.profile}"
