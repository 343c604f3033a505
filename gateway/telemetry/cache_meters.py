"""The response cache's metric names and counters (:mod:`gateway.cache`).

Beside :mod:`gateway.telemetry.recorder`, which holds the request metrics' names and
builds these with its meter (it is at its size cap). Lookups are counted from the request
records, batched like every request metric; stores, evictions and bytes are counted
where they happen, off the request's path.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

M_CACHE_HITS = "gateway_cache_hits"  # {match: exact|semantic|coalesced}
M_CACHE_MISSES = "gateway_cache_misses"
M_CACHE_BYPASSES = "gateway_cache_bypasses"  # {reason: no-cache|no-store|nondeterministic|...}
M_CACHE_STORES = "gateway_cache_stores"
M_CACHE_REFUSED = "gateway_cache_refused"  # answers not kept {reason: check|finish_reason|...}
M_CACHE_EVICTIONS = "gateway_cache_evictions"
M_CACHE_BYTES = "gateway_cache_bytes"  # up-down: bytes this process added minus freed
M_CACHE_SAVED = "gateway_cache_saved_tokens"  # engine tokens a hit did not spend
M_CACHE_ERRORS = "gateway_cache_errors"  # the cache's store unreachable: answered as a miss
A_MATCH, A_REASON = "match", "reason"

Count = Callable[..., None]


class CacheMeters:
    def __init__(self, m: Any):
        self.hits = m.create_counter(M_CACHE_HITS, description="answers served from the cache")
        self.misses = m.create_counter(M_CACHE_MISSES, description="cacheable, not found")
        self.bypasses = m.create_counter(M_CACHE_BYPASSES, description="cache not consulted")
        self.stores = m.create_counter(M_CACHE_STORES, description="answers kept")
        self.refused = m.create_counter(M_CACHE_REFUSED, description="answers not kept")
        self.evictions = m.create_counter(M_CACHE_EVICTIONS, description="entries evicted")
        self.bytes = m.create_up_down_counter(M_CACHE_BYTES, description="bytes kept")
        self.saved = m.create_counter(M_CACHE_SAVED, description="engine tokens not spent")
        self.errors = m.create_counter(M_CACHE_ERRORS, description="store unreachable")

    def lookup(self, result: str, count: Count) -> None:
        """One request's lookup (``hit/exact``, ``miss``, ``bypass/no-cache``), summed into
        the recorder's batch by ``count(counter, n, *labels)``."""
        status, _, detail = result.partition("/")
        if status == "hit":
            count(self.hits, 1, (A_MATCH, detail or "exact"))
        elif status == "miss":
            count(self.misses, 1)
        else:
            count(self.bypasses, 1, (A_REASON, detail or "unknown"))
