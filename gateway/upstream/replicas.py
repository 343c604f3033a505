"""The replicas of a pool: what the gateway knows of each, and which one a request goes to.

A :class:`Replica` is one engine's URL with our requests in flight there and what its
``/metrics`` last said (SGLang's ``sglang:num_queue_reqs``, :func:`parse_metrics`).
:func:`choose` picks one for a prompt: rendezvous hashing of the prompt's head with
bounded load, so every gateway replica sends a prefix to the same engine replica (its
radix/prefix cache hits) unless that one carries more than ``1 + affinity_slack`` times
the mean load; an engine joining or leaving moves only its share of prefixes.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from types import MappingProxyType

_M64 = (1 << 64) - 1


def _mix(x: int) -> int:
    """splitmix64's finaliser: a cheap, well-spread 64-bit hash (same in every process)."""
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9 & _M64
    x = (x ^ (x >> 27)) * 0x94D049BB133111EB & _M64
    return x ^ (x >> 31)


@dataclass(slots=True)
class Replica:
    url: str
    in_flight: int = 0
    up: bool = True
    queued: float = 0.0  # engine-side queue from its last /metrics scrape
    running: float = 0.0
    cache_hit_rate: float | None = None
    last_probe: float | None = None  # monotonic time of the last probe answer
    seed: int = 0  # its rendezvous-hash seed, from its URL
    others: float = 0.0  # requests in the engine not ours, at its last scrape

    def __post_init__(self) -> None:
        self.seed = _mix(zlib.crc32(self.url.encode()))

    @property
    def load(self) -> float:
        """Requests on it: ours in flight now, and the others' (other gateway replicas',
        other clients') as the engine's last scrape counted them."""
        return self.in_flight + self.others

    def observe(self, figures: dict[str, float]) -> None:
        """What a scrape of its ``/metrics`` said (:func:`parse_metrics`)."""
        for key, value in figures.items():
            setattr(self, key, value)
        self.others = max(0.0, self.running + self.queued - self.in_flight)

    def state(self) -> dict[str, object]:
        return {
            "url": self.url,
            "up": self.up,
            "in_flight": self.in_flight,
            "queued": self.queued,
            "running": self.running,
            "cache_hit_rate": self.cache_hit_rate,
        }


_METRICS = MappingProxyType(
    {
        b"sglang:num_queue_reqs": "queued",
        b"sglang:num_running_reqs": "running",
        b"sglang:cache_hit_rate": "cache_hit_rate",
    }
)


def parse_metrics(text: bytes) -> dict[str, float]:
    """Sum SGLang's gauges we use over their label sets (Prometheus text format)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith(b"sglang:"):
            continue
        name = line.split(b"{", 1)[0].split(b" ", 1)[0]
        key = _METRICS.get(name)
        if key is None:
            continue
        try:
            out[key] = out.get(key, 0.0) + float(line.rsplit(b" ", 1)[1])
        except (ValueError, IndexError):
            continue
    return out


def score(key: int, seed: int) -> int:
    """A replica's rendezvous (highest random weight) score for a key: the replica with the
    highest score for a key is its home, the same in every process."""
    x = (key ^ seed) * 0x9E3779B97F4A7C15 & _M64  # seed is well mixed already
    return x ^ (x >> 29)
