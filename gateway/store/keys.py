"""API keys (:class:`~gateway.store.base.KeyStore`): in Redis, in the embedded store's
file (SQLite) and in this process.

Redis: a key is one JSON value under ``key:<digest>`` (the lookup of every request),
with ``keyid:<id>`` -> digest and the tenant's set ``{tenant}:keys`` as indexes. Those are
in different hash slots, so a write is two ordered steps that are safe to interrupt: a
new key gets its indexes first and becomes usable last; a deleted key stops working
first and loses its indexes after (an index without its key is skipped when read).

SQLite: a row per key, unique by digest and indexed by tenant; a lookup reads the key and
its tenant in one query.

Every write announces itself (:class:`~gateway.store.events.KeyChanged`): a revoked key
stops working on every replica at once, and a new one is not refused by a replica that
remembered its digest as unknown.
"""

from __future__ import annotations

import sqlite3
from typing import Protocol

from gateway.store.events import KeyChanged, MemoryEvents, RedisEvents, SqliteEvents, announce
from gateway.tenancy.tenants import ApiKey, Tenant


class _WithTenants(Protocol):
    """What a lookup needs of the tenant concern it is joined with."""

    async def get_tenant(self, tenant_id: str) -> Tenant | None: ...
    async def _key_only(self, digest: str) -> ApiKey | None: ...


async def _with_tenant(store: _WithTenants, digest: str) -> tuple[ApiKey, Tenant] | None:
    k = await store._key_only(digest)
    t = await store.get_tenant(k.tenant_id) if k is not None else None
    return (k, t) if k is not None and t is not None else None


class RedisKeys(RedisEvents):
    async def add_key(self, k: ApiKey) -> None:
        c = self._c
        pipe = c.pipeline()
        pipe.set(c.k("keyid", k.id), k.digest)
        pipe.sadd(c.t(k.tenant_id, "keys"), k.id)
        await c.call(pipe.execute())
        await c.call(c.r.set(c.k("key", k.digest), k.model_dump_json()))
        await self.publish(KeyChanged(k.digest))

    async def get_key(self, key_id: str) -> ApiKey | None:
        digest = await self._c.call(self._c.r.get(self._c.k("keyid", key_id)))
        return None if digest is None else await self._key_only(digest.decode())

    async def _key_only(self, digest: str) -> ApiKey | None:
        raw = await self._c.call(self._c.r.get(self._c.k("key", digest)))
        return ApiKey.model_validate_json(raw) if raw else None

    async def key_by_digest(self: _WithTenants, digest: str) -> tuple[ApiKey, Tenant] | None:
        return await _with_tenant(self, digest)

    async def list_keys(self, tenant_id: str) -> list[ApiKey]:
        ids = await self._c.call(self._c.r.smembers(self._c.t(tenant_id, "keys")))
        keys = [await self.get_key(i.decode()) for i in sorted(ids)]
        return [k for k in keys if k is not None]

    async def delete_key(self, key_id: str) -> ApiKey | None:
        c = self._c
        k = await self.get_key(key_id)
        if k is None:
            return None
        await c.call(c.r.delete(c.k("key", k.digest)))
        pipe = c.pipeline()
        pipe.delete(c.k("keyid", k.id))
        pipe.srem(c.t(k.tenant_id, "keys"), k.id)
        await c.call(pipe.execute())
        await self.publish(KeyChanged(k.digest))
        return k


class MemoryKeys(MemoryEvents):
    def __init__(self) -> None:
        super().__init__()
        self._keys: dict[str, ApiKey] = {}
        self._by_digest: dict[str, str] = {}

    async def add_key(self, k: ApiKey) -> None:
        self._keys[k.id] = k
        self._by_digest[k.digest] = k.id
        await self.publish(KeyChanged(k.digest))

    async def get_key(self, key_id: str) -> ApiKey | None:
        return self._keys.get(key_id)

    async def _key_only(self, digest: str) -> ApiKey | None:
        kid = self._by_digest.get(digest)
        return self._keys.get(kid) if kid else None

    async def key_by_digest(self: _WithTenants, digest: str) -> tuple[ApiKey, Tenant] | None:
        return await _with_tenant(self, digest)

    async def list_keys(self, tenant_id: str) -> list[ApiKey]:
        return [k for k in self._keys.values() if k.tenant_id == tenant_id]

    async def delete_key(self, key_id: str) -> ApiKey | None:
        k = self._keys.pop(key_id, None)
        if k is not None:
            self._by_digest.pop(k.digest, None)
            await self.publish(KeyChanged(k.digest))
        return k


class SqliteKeys(SqliteEvents):
    async def add_key(self, k: ApiKey) -> None:
        def write(c: sqlite3.Connection) -> None:
            c.execute(
                "INSERT OR REPLACE INTO keys VALUES (?, ?, ?, ?)",
                (k.id, k.digest, k.tenant_id, k.model_dump_json()),
            )
            announce(c, KeyChanged(k.digest))

        await self._write_said(write)

    async def get_key(self, key_id: str) -> ApiKey | None:
        row = await self._db.read(
            lambda c: c.execute("SELECT doc FROM keys WHERE id = ?", (key_id,)).fetchone()
        )
        return ApiKey.model_validate_json(row[0]) if row else None

    async def key_by_digest(self, digest: str) -> tuple[ApiKey, Tenant] | None:
        row = await self._db.read(
            lambda c: c.execute(
                "SELECT k.doc, t.doc FROM keys k JOIN tenants t ON t.id = k.tenant_id"
                " WHERE k.digest = ?",
                (digest,),
            ).fetchone()
        )
        if row is None:
            return None
        return ApiKey.model_validate_json(row[0]), Tenant.model_validate_json(row[1])

    async def list_keys(self, tenant_id: str) -> list[ApiKey]:
        rows = await self._db.read(
            lambda c: c.execute(
                "SELECT doc FROM keys WHERE tenant_id = ? ORDER BY rowid", (tenant_id,)
            ).fetchall()
        )
        return [ApiKey.model_validate_json(r[0]) for r in rows]

    async def delete_key(self, key_id: str) -> ApiKey | None:
        def write(c: sqlite3.Connection) -> ApiKey | None:
            row = c.execute("SELECT doc FROM keys WHERE id = ?", (key_id,)).fetchone()
            if row is None:
                return None
            k = ApiKey.model_validate_json(row[0])
            c.execute("DELETE FROM keys WHERE id = ?", (key_id,))
            announce(c, KeyChanged(k.digest))
            return k

        out: ApiKey | None = await self._write_said(write)
        return out
