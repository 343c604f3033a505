"""The audit log and the shadow comparisons (:class:`~gateway.store.base.AuditStore`,
:class:`~gateway.store.base.ShadowStore`): two capped lists, newest first, in Redis
(LPUSH + LTRIM), in the embedded store's file (a table each, trimmed on insert) and in
this process.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import orjson

from gateway.store.base import AUDIT_MAX, SHADOW_MAX
from gateway.store.redis_conn import RedisPart
from gateway.store.sqlite_db import SqlitePart


class _RedisList(RedisPart):
    async def _push(self, name: str, cap: int, rec: dict[str, Any]) -> None:
        c = self._c
        pipe = c.pipeline()
        pipe.lpush(c.k(name), orjson.dumps(rec))
        pipe.ltrim(c.k(name), 0, cap - 1)
        await c.call(pipe.execute())

    async def _newest(self, name: str, limit: int) -> list[dict[str, Any]]:
        raws = await self._c.call(self._c.r.lrange(self._c.k(name), 0, limit - 1))
        return [orjson.loads(r) for r in raws]


class RedisAudit(_RedisList):
    async def audit(self, entry: dict[str, Any]) -> None:
        await self._push("audit", AUDIT_MAX, entry)

    async def audit_log(self, limit: int = 100) -> list[dict[str, Any]]:
        return await self._newest("audit", limit)


class RedisShadow(_RedisList):
    async def push_shadow(self, rec: dict[str, Any]) -> None:
        await self._push("shadow", SHADOW_MAX, rec)

    async def shadow_records(self, limit: int = 1000) -> list[dict[str, Any]]:
        return await self._newest("shadow", limit)


class MemoryAudit:
    def __init__(self) -> None:
        super().__init__()
        self._audit: list[dict[str, Any]] = []

    async def audit(self, entry: dict[str, Any]) -> None:
        self._audit.append(entry)
        del self._audit[:-AUDIT_MAX]

    async def audit_log(self, limit: int = 100) -> list[dict[str, Any]]:
        return list(reversed(self._audit[-limit:]))


class MemoryShadow:
    def __init__(self) -> None:
        super().__init__()
        self._shadow: list[dict[str, Any]] = []

    async def push_shadow(self, rec: dict[str, Any]) -> None:
        self._shadow.append(rec)
        del self._shadow[:-SHADOW_MAX]

    async def shadow_records(self, limit: int = 1000) -> list[dict[str, Any]]:
        return list(reversed(self._shadow[-limit:]))


class _SqliteList(SqlitePart):
    """A capped list as a table (``id``, one JSON column); the names are this module's own."""

    async def _push(self, table: str, column: str, cap: int, rec: dict[str, Any]) -> None:
        def write(c: sqlite3.Connection) -> None:
            cur = c.execute(f"INSERT INTO {table} ({column}) VALUES (?)", (orjson.dumps(rec),))
            c.execute(f"DELETE FROM {table} WHERE id <= ?", ((cur.lastrowid or 0) - cap,))

        await self._db.write(write)

    async def _newest(self, table: str, column: str, limit: int) -> list[dict[str, Any]]:
        rows = await self._db.read(
            lambda c: c.execute(
                f"SELECT {column} FROM {table} ORDER BY id DESC LIMIT ?", (limit,)
            ).fetchall()
        )
        return [orjson.loads(r[0]) for r in rows]


class SqliteAudit(_SqliteList):
    async def audit(self, entry: dict[str, Any]) -> None:
        await self._push("audit", "entry", AUDIT_MAX, entry)

    async def audit_log(self, limit: int = 100) -> list[dict[str, Any]]:
        return await self._newest("audit", "entry", limit)


class SqliteShadow(_SqliteList):
    async def push_shadow(self, rec: dict[str, Any]) -> None:
        await self._push("shadow", "rec", SHADOW_MAX, rec)

    async def shadow_records(self, limit: int = 1000) -> list[dict[str, Any]]:
        return await self._newest("shadow", "rec", limit)
