"""The in-process cache store: the embedded default, one replica.

Least recently used first out, bounded twice: per tenant (``tenant_max_bytes``) and in
total (``max_bytes``). Expired entries go when they are next read or when room is
needed. A semantic index record belongs to the entry it points at: its bytes count in both
bounds, and it goes when the entry goes (evicted, expired, deleted, purged); a scope keeps
the records of its newest ``keep`` entries.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from gateway.cache.backend import Put, Usage


@dataclass(slots=True)
class _Item:
    value: bytes
    expires_at: float
    scope: str | None = None  # the semantic scope its record is indexed in
    record: bytes = b""

    @property
    def size(self) -> int:
        return len(self.value) + len(self.record)


class MemoryBackend:
    name = "memory"

    def __init__(self, max_bytes: int, tenant_max_bytes: int):
        self.max_bytes = max_bytes
        self.tenant_max_bytes = min(tenant_max_bytes, max_bytes)
        self._lru: OrderedDict[tuple[str, str], None] = OrderedDict()  # oldest use first
        self._items: dict[str, OrderedDict[str, _Item]] = {}  # tenant -> key -> item
        self._sizes: dict[str, int] = {}
        self.size = 0
        # (tenant, scope) -> the keys of the entries with a record there, oldest first
        self._scopes: dict[tuple[str, str], OrderedDict[str, None]] = {}

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
        evicted, more = self._room(tenant, n, key)
        self._items.setdefault(tenant, OrderedDict())[key] = _Item(value, expires_at)
        self._lru[(tenant, key)] = None
        self._grow(tenant, n)
        return Put(evicted, freed + more, self._sizes[tenant])

    def _room(self, tenant: str, n: int, keep: str) -> tuple[int, int]:
        """Evict until ``n`` more bytes fit both bounds, never ``tenant``'s ``keep``:
        (entries evicted, bytes freed)."""
        evicted = freed = 0
        own = self._items.get(tenant) or OrderedDict()
        while self._sizes.get(tenant, 0) + n > self.tenant_max_bytes:
            victim = next((k for k in own if k != keep), None)
            if victim is None:
                break
            freed += self._drop(tenant, victim)
            evicted += 1
        while self.size + n > self.max_bytes:
            victim2 = next((tk for tk in self._lru if tk != (tenant, keep)), None)
            if victim2 is None:
                break
            freed += self._drop(*victim2)
            evicted += 1
        return evicted, freed

    def _grow(self, tenant: str, n: int) -> None:
        self._sizes[tenant] = self._sizes.get(tenant, 0) + n
        self.size += n

    def _drop(self, tenant: str, key: str) -> int:
        own = self._items.get(tenant)
        item = own.pop(key, None) if own is not None else None
        if item is None:
            return 0
        self._lru.pop((tenant, key), None)
        n = len(item.value)
        self._sizes[tenant] -= n
        self.size -= n
        n += self._unindex(tenant, key, item)
        if not own:
            del self._items[tenant]
            del self._sizes[tenant]
        return n

    def _unindex(self, tenant: str, key: str, item: _Item) -> int:
        """Take ``item``'s record out of its scope; the bytes freed."""
        if item.scope is None:
            return 0
        scope = self._scopes.get((tenant, item.scope))
        if scope is not None:
            scope.pop(key, None)
            if not scope:
                del self._scopes[(tenant, item.scope)]
        n = len(item.record)
        item.scope, item.record = None, b""
        self._sizes[tenant] -= n
        self.size -= n
        return n

    async def delete(self, tenant: str, key: str) -> bool:
        return self._drop(tenant, key) > 0

    async def purge(self, tenant: str) -> int:
        keys = list(self._items.get(tenant) or ())
        for k in keys:
            self._drop(tenant, k)
        return len(keys)

    async def usage(self, tenant: str) -> Usage:
        own: dict[str, _Item] = self._items.get(tenant) or {}
        vectors = sum(1 for item in own.values() if item.scope is not None)
        return Usage(len(own), self._sizes.get(tenant, 0), self.tenant_max_bytes, vectors)

    async def entries(self, tenant: str, limit: int) -> list[tuple[str, bytes]]:
        own = self._items.get(tenant)
        return [(k, own[k].value) for k in reversed(own)][:limit] if own else []

    async def add_vector(self, tenant: str, scope: str, key: str, record: bytes, keep: int) -> bool:
        own = self._items.get(tenant)
        item = own.get(key) if own is not None else None
        if own is None or item is None:
            return False  # evicted meanwhile: nothing to point at
        self._unindex(tenant, key, item)
        if item.size + len(record) > self.tenant_max_bytes:
            return False
        self._room(tenant, len(record), key)
        item.scope, item.record = scope, record
        self._grow(tenant, len(record))
        bucket = self._scopes.setdefault((tenant, scope), OrderedDict())
        bucket[key] = None
        while len(bucket) > keep:  # the scope's oldest records go; their answers stay
            oldest = next(iter(bucket))
            self._unindex(tenant, oldest, own[oldest])
        return True

    async def vectors(
        self, tenant: str, scope: str, now: float, limit: int
    ) -> list[tuple[str, bytes]]:
        bucket = self._scopes.get((tenant, scope))
        own = self._items.get(tenant)
        if not bucket or own is None:
            return []
        out = []
        for key in list(bucket)[-limit:]:
            item = own[key]
            if item.expires_at <= now:
                self._drop(tenant, key)
            else:
                out.append((key, item.record))
        return out
