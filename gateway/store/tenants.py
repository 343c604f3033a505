"""Tenants (:class:`~gateway.store.base.TenantStore`): in Redis, in the embedded store's
file (SQLite) and in this process.

Redis: a tenant is one JSON value under its hash-tagged key, and the set ``tenants``
lists their ids. An update is compare-and-set (:data:`CAS_LUA`: written only if the value
is still the one the change was computed from, else re-read and retried), so concurrent
admin writes on any replicas never lose an update, on a Cluster too (no WATCH needed).
Deleting a tenant deletes its keys first (the one write that spans two concerns).

SQLite: a row per tenant (its JSON); an update reads, changes and writes it in one write
transaction, and the file has one writer at a time, so no update is lost either.

Every write announces itself (:class:`~gateway.store.events.TenantChanged`; a deleted
tenant's keys each a :class:`~gateway.store.events.KeyChanged`, by the key part).
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable
from typing import Protocol

from gateway.store.base import Conflict
from gateway.store.events import (
    MemoryEvents,
    RedisEvents,
    SqliteEvents,
    TenantChanged,
    announce,
)
from gateway.store.redis_conn import RedisConn
from gateway.tenancy.tenants import ApiKey, Tenant

CAS_LUA = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2])
return 1
"""
_CAS_TRIES = 50


class _WithKeys(Protocol):
    """What deleting a tenant needs of the key concern it is joined with."""

    async def list_keys(self, tenant_id: str) -> list[ApiKey]: ...
    async def delete_key(self, key_id: str) -> ApiKey | None: ...
    async def get_tenant(self, tenant_id: str) -> Tenant | None: ...
    async def _drop_tenant(self, tenant_id: str) -> None: ...


def _bumped(old: Tenant, change: Callable[[Tenant], Tenant]) -> Tenant:
    return change(old).model_copy(update={"version": old.version + 1, "updated_at": time.time()})


async def _delete_with_keys(store: _WithKeys, tenant_id: str) -> list[ApiKey] | None:
    if await store.get_tenant(tenant_id) is None:
        return None
    keys = await store.list_keys(tenant_id)
    for k in keys:
        await store.delete_key(k.id)
    await store._drop_tenant(tenant_id)
    return keys


class RedisTenants(RedisEvents):
    def __init__(self, c: RedisConn):
        super().__init__(c)
        self._cas = c.script(CAS_LUA)

    async def create_tenant(self, t: Tenant) -> None:
        c = self._c
        pipe = c.pipeline()
        pipe.set(c.t(t.id, "tenant"), t.model_dump_json())
        pipe.sadd(c.k("tenants"), t.id)
        await c.call(pipe.execute())
        await self.publish(TenantChanged(t.id))

    async def get_tenant(self, tenant_id: str) -> Tenant | None:
        raw = await self._c.call(self._c.r.get(self._c.t(tenant_id, "tenant")))
        return Tenant.model_validate_json(raw) if raw else None

    async def list_tenants(self) -> list[Tenant]:
        c = self._c
        ids = sorted(i.decode() for i in await c.call(c.r.smembers(c.k("tenants"))))
        if not ids:
            return []
        pipe = c.r.pipeline(transaction=False)  # one GET each: the values are in many slots
        for i in ids:
            pipe.get(c.t(i, "tenant"))
        ts = [Tenant.model_validate_json(r) for r in await c.call(pipe.execute()) if r]
        return sorted(ts, key=lambda t: t.created_at)

    async def update_tenant(
        self, tenant_id: str, change: Callable[[Tenant], Tenant]
    ) -> Tenant | None:
        key = self._c.t(tenant_id, "tenant")
        for _ in range(_CAS_TRIES):
            raw = await self._c.call(self._c.r.get(key))
            if raw is None:
                return None
            new = _bumped(Tenant.model_validate_json(raw), change)
            if await self._c.call(self._cas(keys=[key], args=[raw, new.model_dump_json()])):
                await self.publish(TenantChanged(tenant_id))
                return new
            await asyncio.sleep(0.001)
        raise Conflict(f"tenant {tenant_id} is being changed too often; try again")

    async def delete_tenant(self: _WithKeys, tenant_id: str) -> list[ApiKey] | None:
        return await _delete_with_keys(self, tenant_id)

    async def _drop_tenant(self, tenant_id: str) -> None:
        c = self._c
        pipe = c.pipeline()
        pipe.delete(c.t(tenant_id, "tenant"))
        pipe.delete(c.t(tenant_id, "keys"))
        pipe.srem(c.k("tenants"), tenant_id)
        await c.call(pipe.execute())
        await self.publish(TenantChanged(tenant_id))


class MemoryTenants(MemoryEvents):
    def __init__(self) -> None:
        super().__init__()
        self._tenants: dict[str, Tenant] = {}
        self._tenant_lock = asyncio.Lock()

    async def create_tenant(self, t: Tenant) -> None:
        self._tenants[t.id] = t
        await self.publish(TenantChanged(t.id))

    async def get_tenant(self, tenant_id: str) -> Tenant | None:
        return self._tenants.get(tenant_id)

    async def list_tenants(self) -> list[Tenant]:
        return sorted(self._tenants.values(), key=lambda t: t.created_at)

    async def update_tenant(
        self, tenant_id: str, change: Callable[[Tenant], Tenant]
    ) -> Tenant | None:
        async with self._tenant_lock:
            t = self._tenants.get(tenant_id)
            if t is None:
                return None
            self._tenants[tenant_id] = new = _bumped(t, change)
        await self.publish(TenantChanged(tenant_id))
        return new

    async def delete_tenant(self: _WithKeys, tenant_id: str) -> list[ApiKey] | None:
        return await _delete_with_keys(self, tenant_id)

    async def _drop_tenant(self, tenant_id: str) -> None:
        self._tenants.pop(tenant_id, None)
        await self.publish(TenantChanged(tenant_id))


class SqliteTenants(SqliteEvents):
    async def create_tenant(self, t: Tenant) -> None:
        def write(c: sqlite3.Connection) -> None:
            c.execute(
                "INSERT OR REPLACE INTO tenants VALUES (?, ?, ?)",
                (t.id, t.created_at, t.model_dump_json()),
            )
            announce(c, TenantChanged(t.id))

        await self._write_said(write)

    async def get_tenant(self, tenant_id: str) -> Tenant | None:
        row = await self._db.read(
            lambda c: c.execute("SELECT doc FROM tenants WHERE id = ?", (tenant_id,)).fetchone()
        )
        return Tenant.model_validate_json(row[0]) if row else None

    async def list_tenants(self) -> list[Tenant]:
        rows = await self._db.read(
            lambda c: c.execute("SELECT doc FROM tenants ORDER BY created_at, rowid").fetchall()
        )
        return [Tenant.model_validate_json(r[0]) for r in rows]

    async def update_tenant(
        self, tenant_id: str, change: Callable[[Tenant], Tenant]
    ) -> Tenant | None:
        def write(c: sqlite3.Connection) -> Tenant | None:
            row = c.execute("SELECT doc FROM tenants WHERE id = ?", (tenant_id,)).fetchone()
            if row is None:
                return None
            new = _bumped(Tenant.model_validate_json(row[0]), change)
            c.execute("UPDATE tenants SET doc = ? WHERE id = ?", (new.model_dump_json(), tenant_id))
            announce(c, TenantChanged(tenant_id))
            return new

        out: Tenant | None = await self._write_said(write)
        return out

    async def delete_tenant(self: _WithKeys, tenant_id: str) -> list[ApiKey] | None:
        return await _delete_with_keys(self, tenant_id)

    async def _drop_tenant(self, tenant_id: str) -> None:
        def write(c: sqlite3.Connection) -> None:
            c.execute("DELETE FROM tenants WHERE id = ?", (tenant_id,))
            announce(c, TenantChanged(tenant_id))

        await self._write_said(write)
