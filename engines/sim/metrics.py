"""``GET /metrics``: one replica's Prometheus text under SGLang's metric names."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from engines.sim_model import Replica

TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
ITL_BUCKETS = (
    0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.06, 0.08,
    0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8,
)  # fmt: skip
E2E_BUCKETS = (*TTFT_BUCKETS, 600, 1200, 1800, 2400)
QUEUE_BUCKETS = (0, 0.1, 0.2, 0.5, 1, 2, 3, 4, 5, 10, 15, 20, 30, 40, 50, 60, 100, 200, 300)


def _num(v: float) -> str:
    return repr(float(v)) if math.isfinite(v) else ("+Inf" if v > 0 else "-Inf")


class Histogram:
    """A Prometheus histogram (cumulative buckets rendered on demand)."""

    def __init__(self, name: str, doc: str, buckets: Sequence[float]):
        self.name, self.doc = name, doc
        self.bounds = [float(b) for b in buckets]
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        i = next((i for i, b in enumerate(self.bounds) if value <= b), len(self.bounds))
        self.counts[i] += 1
        self.sum += value
        self.count += 1

    def render(self, labels: str) -> list[str]:
        lines = [f"# HELP {self.name} {self.doc}", f"# TYPE {self.name} histogram"]
        total = 0
        for bound, n in zip([*self.bounds, math.inf], self.counts, strict=True):
            total += n
            lines.append(f'{self.name}_bucket{{{labels},le="{_num(bound)}"}} {_num(total)}')
        lines.append(f"{self.name}_sum{{{labels}}} {_num(self.sum)}")
        lines.append(f"{self.name}_count{{{labels}}} {_num(self.count)}")
        return lines


@dataclass
class Metrics:
    """SGLang's metric names (python/sglang/srt/metrics/collector.py)."""

    prompt_tokens: float = 0
    generation_tokens: float = 0
    cached_tokens: float = 0
    requests: float = 0
    aborted: float = 0
    ttft: Histogram = field(
        default_factory=lambda: Histogram(
            "sglang:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            TTFT_BUCKETS,
        )
    )
    itl: Histogram = field(
        default_factory=lambda: Histogram(
            "sglang:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            ITL_BUCKETS,
        )
    )
    e2e: Histogram = field(
        default_factory=lambda: Histogram(
            "sglang:e2e_request_latency_seconds",
            "Histogram of End-to-end request latency in seconds",
            E2E_BUCKETS,
        )
    )
    queue: Histogram = field(
        default_factory=lambda: Histogram(
            "sglang:queue_time_seconds", "Histogram of queueing time in seconds.", QUEUE_BUCKETS
        )
    )

    def render(self, model: str, replica: Replica) -> str:
        labels = f'model_name="{model}"'
        prof = replica.profile
        batch = replica.running
        gauges = {
            "num_running_reqs": ("The number of running requests.", batch),
            "num_queue_reqs": ("The number of requests in the waiting queue.", replica.queued),
            "cache_hit_rate": ("The prefix cache hit rate.", self.hit_rate()),
            "gen_throughput": (
                "The generation throughput (token/s).",
                batch * 1000.0 / prof.tpot_ms(batch) if batch else 0.0,
            ),
            "spec_accept_length": (
                "The average acceptance length of speculative decoding.",
                prof.accept_len(max(batch, 1)) if prof.speculative else 0.0,
            ),
            "num_used_tokens": ("The number of used tokens.", replica.cache.size_tokens),
            "token_usage": (
                "The token usage.",
                replica.cache.size_tokens / prof.max_total_num_tokens,
            ),
            "max_total_num_tokens": (
                "Maximum total number of tokens in the KV cache pool.",
                prof.max_total_num_tokens,
            ),
        }
        counters = {
            "prompt_tokens": ("Number of prefill tokens processed.", self.prompt_tokens),
            "generation_tokens": ("Number of generation tokens processed.", self.generation_tokens),
            "cached_tokens": ("Number of cached prompt tokens.", self.cached_tokens),
            "num_requests": ("Number of requests processed.", self.requests),
            "num_aborted_requests": ("Number of requests aborted.", self.aborted),
        }
        lines: list[str] = []
        for name, (doc, value) in gauges.items():
            lines += [f"# HELP sglang:{name} {doc}", f"# TYPE sglang:{name} gauge"]
            lines.append(f"sglang:{name}{{{labels}}} {_num(value)}")
        for name, (doc, value) in counters.items():
            lines += [f"# HELP sglang:{name} {doc}", f"# TYPE sglang:{name} counter"]
            lines.append(f"sglang:{name}_total{{{labels}}} {_num(value)}")
        for h in (self.ttft, self.itl, self.e2e, self.queue):
            lines += h.render(labels)
        return "\n".join(lines) + "\n"

    def hit_rate(self) -> float:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0
