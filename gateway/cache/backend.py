"""Where cached answers live: the interface both stores implement.

Every call names the tenant, and an implementation keeps each tenant's entries apart
(in Redis under keys hash-tagged ``{tenant}``, so a cluster keeps a tenant's cache on one
shard and its scripts see every key they touch). Values are opaque bytes
(:meth:`gateway.cache.entry.Entry.encode`); vectors are a semantic index's records, each
attached to the entry it points at. Sizes are bounded per tenant (and in process, in
total), records included: a put evicts the entries closest to expiry until the new one
fits, and an entry evicted, expired or deleted takes its record with it. A store that
cannot be reached raises :class:`~gateway.errors.StoreUnavailable`; the cache then answers
as a miss.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Put:
    """What a put did: entries evicted to make room (and expired ones dropped on the way),
    bytes freed, and the tenant's cache size after it (-1: the value was refused, too big)."""

    evicted: int
    freed: int
    size: int


@dataclass(frozen=True, slots=True)
class Usage:
    entries: int
    bytes: int  # entries and their semantic records
    max_bytes: int
    vectors: int = 0  # records in the semantic index


class Backend(Protocol):
    name: str  # "memory" | "redis"

    async def get(self, tenant: str, key: str, now: float) -> bytes | None: ...
    async def put(self, tenant: str, key: str, value: bytes, expires_at: float) -> Put: ...
    async def delete(self, tenant: str, key: str) -> bool: ...
    async def purge(self, tenant: str) -> int: ...
    async def usage(self, tenant: str) -> Usage: ...
    async def entries(self, tenant: str, limit: int) -> list[tuple[str, bytes]]: ...
    async def add_vector(self, tenant: str, scope: str, key: str, record: bytes, keep: int) -> bool:
        """Index entry ``key`` in ``scope`` (which keeps its newest ``keep`` records); False
        when the entry is gone, or its record cannot fit beside it."""
        ...

    async def vectors(
        self, tenant: str, scope: str, now: float, limit: int
    ) -> list[tuple[str, bytes]]:
        """The scope's newest ``limit`` records of live entries (key, record), oldest first."""
        ...
