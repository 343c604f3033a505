"""The response cache: only answers that passed every check are kept, and a hit is
replayed in the client's own format.

* ``cache``          :class:`ResponseCache`: lookup (exact, semantic, single flight), keep
* ``lookup``         one request's part: hit / miss / bypass, and the answer handed back
* ``key``            the cache key and the semantic scope (pure)
* ``entry``          a cached answer, and the judgement that lets one in
* ``replay``         a hit as the client's JSON or SSE stream
* ``flight``         single flight: a burst of one request reaches the engine once
* ``tee``            a stream recorded on its way to the client
* ``backend``, ``memory``, ``redis_backend``   where entries live
* ``semantic``, ``guard``, ``minilm``   near duplicates: embedders, the index, the guard

See docs/cache.md.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from gateway.cache.backend import Backend
from gateway.cache.cache import ResponseCache
from gateway.cache.lookup import Ask, Lookup
from gateway.cache.memory import MemoryBackend
from gateway.cache.redis_backend import RedisBackend
from gateway.settings import Settings
from gateway.store.base import Store
from gateway.store.redis_store import RedisStore
from gateway.telemetry.recorder import Telemetry

__all__ = ("Ask", "Lookup", "ResponseCache", "build_cache")


def build_cache(
    settings: Settings,
    store: Store | None,
    telemetry: Telemetry,
    spawn: Callable[[Coroutine[Any, Any, None]], Any],
) -> ResponseCache:
    """Over the gateway's Redis when it has one (every replica shares the cache), else in
    this process."""
    backend: Backend
    if isinstance(store, RedisStore):
        backend = RedisBackend(
            store.client,
            settings.redis_prefix,
            settings.redis_timeout,
            settings.cache_tenant_max_bytes,
        )
    else:
        backend = MemoryBackend(settings.cache_max_bytes, settings.cache_tenant_max_bytes)
    return ResponseCache(backend, telemetry.cache, spawn, settings.cache_embed_threads)
