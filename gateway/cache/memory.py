"""The in-process cache store: the embedded default, one replica.

Least recently used first out, bounded twice: per tenant (``tenant_max_bytes``) and in
total (``max_bytes``). Expired entries go when they are next read or when room is
needed. A semantic index keeps the newest ``keep`` records of a scope.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from gateway.cache.backend import Put, Usage

MAX_SCOPES = 10_000  # semantic scopes kept in total (least recently added out)


@dataclass(slots=True)
class _Item:
    value: bytes
    expires_at: float


class MemoryBackend:
    name = "memory"

    def __init__(self, max_bytes: int, tenant_max_bytes: int):
        self.max_bytes = max_bytes
        self.tenant_max_bytes = min(tenant_max_bytes, max_bytes)
        self._lru: OrderedDict[tuple[str, str], None] = OrderedDict()  # oldest use first
        self._items: dict[str, OrderedDict[str, _Item]] = {}  # tenant -> key -> item
        self._sizes: dict[str, int] = {}
        self.size = 0
        self._scopes: OrderedDict[tuple[str, str], OrderedDict[str, tuple[bytes, float]]] = (
            OrderedDict()
        )

    async def get(self, tenant: str, key: str, now: float) -> bytes | None:
        own = self._items.get(tenant)
        item = own.get(key) if own is not None else None
        if item is None:
            return None
        if item.expires_at <= now:
            self._drop(tenant, key)
            return None
        self._lru.move_to_end((tenant, key))
        self._items[tenant].move_to_end(key)
        return item.value

    async def put(self, tenant: str, key: str, value: bytes, expires_at: float) -> Put:
        n = len(value)
        if n > self.tenant_max_bytes:
            return Put(0, 0, -1)
        freed = self._drop(tenant, key)
        evicted = 0
        own = self._items.setdefault(tenant, OrderedDict())
        while own and self._sizes.get(tenant, 0) + n > self.tenant_max_bytes:
            freed += self._drop(tenant, next(iter(own)))
            evicted += 1
        while self._lru and self.size + n > self.max_bytes:
            t, k = next(iter(self._lru))
            freed += self._drop(t, k)
            evicted += 1
        self._items.setdefault(tenant, own)[key] = _Item(value, expires_at)
        self._lru[(tenant, key)] = None
        self._sizes[tenant] = self._sizes.get(tenant, 0) + n
        self.size += n
        return Put(evicted, freed, self._sizes[tenant])

    def _drop(self, tenant: str, key: str) -> int:
        own = self._items.get(tenant)
        item = own.pop(key, None) if own is not None else None
        if item is None:
            return 0
        self._lru.pop((tenant, key), None)
        n = len(item.value)
        self._sizes[tenant] -= n
        self.size -= n
        if not own:
            del self._items[tenant]
            del self._sizes[tenant]
        return n

    async def delete(self, tenant: str, key: str) -> bool:
        return self._drop(tenant, key) > 0

    async def purge(self, tenant: str) -> int:
        keys = list(self._items.get(tenant) or ())
        for k in keys:
            self._drop(tenant, k)
        for scope in [s for s in self._scopes if s[0] == tenant]:
            del self._scopes[scope]
        return len(keys)

    async def usage(self, tenant: str) -> Usage:
        vectors = sum(len(b) for (t, _), b in self._scopes.items() if t == tenant)
        n = len(self._items.get(tenant) or ())
        return Usage(n, self._sizes.get(tenant, 0), self.tenant_max_bytes, vectors)

    async def entries(self, tenant: str, limit: int) -> list[tuple[str, bytes]]:
        own = self._items.get(tenant)
        return [(k, own[k].value) for k in reversed(own)][:limit] if own else []

    async def add_vector(
        self, tenant: str, scope: str, key: str, record: bytes, expires_at: float, keep: int
    ) -> None:
        bucket = self._scopes.setdefault((tenant, scope), OrderedDict())
        self._scopes.move_to_end((tenant, scope))
        bucket.pop(key, None)
        bucket[key] = (record, expires_at)
        while len(bucket) > keep:
            bucket.popitem(last=False)
        while len(self._scopes) > MAX_SCOPES:
            self._scopes.popitem(last=False)

    async def vectors(self, tenant: str, scope: str, now: float) -> list[tuple[str, bytes]]:
        bucket = self._scopes.get((tenant, scope))
        if not bucket:
            return []
        for k in [k for k, (_, exp) in bucket.items() if exp <= now]:
            del bucket[k]
        return [(k, rec) for k, (rec, _) in bucket.items()]
