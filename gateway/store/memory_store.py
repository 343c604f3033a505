"""The in-process :class:`gateway.store.base.Store`: the embedded default (one replica)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from gateway.store.base import AUDIT_MAX, SHADOW_MAX, Used, today, usage_fields
from gateway.tenancy.limits import NO_RESERVE, Admission, Hold, LocalLimiter, Reserve
from gateway.tenancy.tenants import ApiKey, Policy, Tenant


class MemoryStore:
    """Everything in this process; nothing survives a restart."""

    def __init__(self) -> None:
        self._tenants: dict[str, Tenant] = {}
        self._keys: dict[str, ApiKey] = {}
        self._by_digest: dict[str, str] = {}
        self._usage: dict[tuple[str, str], dict[str, int]] = {}
        self._audit: list[dict[str, Any]] = []
        self._shadow: list[dict[str, Any]] = []
        self._rules: list[tuple[str, dict[str, Any]]] = []
        self._current: int | None = None
        self._limiter = LocalLimiter()
        self._listeners: list[asyncio.Queue[dict[str, Any]]] = []
        self._lock = asyncio.Lock()

    async def ping(self) -> bool:
        return True

    async def close(self) -> None:
        return None

    async def create_tenant(self, t: Tenant) -> None:
        self._tenants[t.id] = t

    async def get_tenant(self, tenant_id: str) -> Tenant | None:
        return self._tenants.get(tenant_id)

    async def list_tenants(self) -> list[Tenant]:
        return sorted(self._tenants.values(), key=lambda t: t.created_at)

    async def update_tenant(
        self, tenant_id: str, change: Callable[[Tenant], Tenant]
    ) -> Tenant | None:
        async with self._lock:
            t = self._tenants.get(tenant_id)
            if t is None:
                return None
            new = change(t).model_copy(update={"version": t.version + 1, "updated_at": time.time()})
            self._tenants[tenant_id] = new
            return new

    async def delete_tenant(self, tenant_id: str) -> list[ApiKey] | None:
        if self._tenants.pop(tenant_id, None) is None:
            return None
        keys = [k for k in self._keys.values() if k.tenant_id == tenant_id]
        for k in keys:
            await self.delete_key(k.id)
        return keys

    async def add_key(self, k: ApiKey) -> None:
        self._keys[k.id] = k
        self._by_digest[k.digest] = k.id

    async def get_key(self, key_id: str) -> ApiKey | None:
        return self._keys.get(key_id)

    async def key_by_digest(self, digest: str) -> tuple[ApiKey, Tenant] | None:
        kid = self._by_digest.get(digest)
        k = self._keys.get(kid) if kid else None
        t = self._tenants.get(k.tenant_id) if k else None
        return (k, t) if k and t else None

    async def list_keys(self, tenant_id: str) -> list[ApiKey]:
        return [k for k in self._keys.values() if k.tenant_id == tenant_id]

    async def delete_key(self, key_id: str) -> ApiKey | None:
        k = self._keys.pop(key_id, None)
        if k is not None:
            self._by_digest.pop(k.digest, None)
        return k

    async def admit(
        self, tenant_id: str, rid: str, p: Policy, want: Reserve = NO_RESERVE
    ) -> Admission:
        return self._limiter.admit(tenant_id, rid, p, want=want)

    async def release(self, tenant_id: str, rid: str) -> None:
        self._limiter.release(tenant_id, rid)

    async def record_usage(
        self,
        tenant_id: str,
        used: Used,
        p: Policy,
        hold: Hold | None = None,
    ) -> None:
        u = self._usage.setdefault((tenant_id, today()), {})
        for k, n in usage_fields(used):
            u[k] = u.get(k, 0) + n
        self._limiter.debit(tenant_id, used.tokens, p, used.micro_usd, hold)

    async def usage(self, tenant_id: str, day: str | None = None) -> dict[str, int]:
        return dict(self._usage.get((tenant_id, day or today()), {}))

    async def audit(self, entry: dict[str, Any]) -> None:
        self._audit.append(entry)
        del self._audit[:-AUDIT_MAX]

    async def audit_log(self, limit: int = 100) -> list[dict[str, Any]]:
        return list(reversed(self._audit[-limit:]))

    async def push_shadow(self, rec: dict[str, Any]) -> None:
        self._shadow.append(rec)
        del self._shadow[:-SHADOW_MAX]

    async def shadow_records(self, limit: int = 1000) -> list[dict[str, Any]]:
        return list(reversed(self._shadow[-limit:]))

    async def save_rules(self, text: str, meta: dict[str, Any]) -> int:
        self._rules.append((text, meta))
        return len(self._rules)

    async def set_current_rules(self, version: int) -> None:
        self._current = version

    async def current_rules(self) -> tuple[int, str] | None:
        if self._current is None:
            return None
        return self._current, self._rules[self._current - 1][0]

    async def rules_versions(self) -> list[dict[str, Any]]:
        return [
            {"version": i + 1, **m, "current": i + 1 == self._current}
            for i, (_, m) in enumerate(self._rules)
        ]

    async def rules_text(self, version: int) -> str | None:
        if 1 <= version <= len(self._rules):
            return self._rules[version - 1][0]
        return None

    async def publish(self, event: dict[str, Any]) -> None:
        for q in self._listeners:
            q.put_nowait(event)

    async def events(self) -> AsyncIterator[dict[str, Any]]:
        q: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._listeners.append(q)
        try:
            while True:
                yield await q.get()
        finally:
            self._listeners.remove(q)
