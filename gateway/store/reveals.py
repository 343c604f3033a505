"""One-time reveals (:class:`~gateway.store.base.RevealStore`): a value kept for one
reading, then gone, in Redis (``SET ... EX`` and ``GETDEL``), in the embedded store's file
and in this process.

The console shows a new API key this way (Post/Redirect/Get): the POST keeps the key under
a random token and redirects to a page that takes it, so a refresh shows it no more and
mints nothing. Whichever worker process serves that page finds it. The caller stores the
key masked by a one-time pad that only the redirect carries: the store alone never holds
a usable key, and the token alone reveals nothing once taken.
"""

from __future__ import annotations

import sqlite3
import time

from gateway.store.redis_conn import RedisPart
from gateway.store.sqlite_db import SqlitePart


class RedisReveals(RedisPart):
    async def put_reveal(self, token: str, doc: bytes, ttl_s: float) -> None:
        c = self._c
        await c.call(c.r.set(c.k("reveal", token), doc, px=max(1, int(ttl_s * 1000))))

    async def take_reveal(self, token: str) -> bytes | None:
        out = await self._c.call(self._c.r.getdel(self._c.k("reveal", token)))
        return bytes(out) if out is not None else None


class SqliteReveals(SqlitePart):
    async def put_reveal(self, token: str, doc: bytes, ttl_s: float) -> None:
        until = time.time() + ttl_s
        await self._db.write(
            lambda c: c.execute(
                "INSERT OR REPLACE INTO reveals VALUES (?, ?, ?)", (token, until, doc)
            )
        )

    async def take_reveal(self, token: str) -> bytes | None:
        def take(c: sqlite3.Connection) -> bytes | None:
            row = c.execute(
                "DELETE FROM reveals WHERE token = ? RETURNING until, doc", (token,)
            ).fetchone()
            return bytes(row[1]) if row and row[0] >= time.time() else None

        return await self._db.write(take)


class MemoryReveals:
    def __init__(self) -> None:
        super().__init__()
        self._reveals: dict[str, tuple[float, bytes]] = {}

    async def put_reveal(self, token: str, doc: bytes, ttl_s: float) -> None:
        now = time.time()
        self._reveals = {t: v for t, v in self._reveals.items() if v[0] >= now}
        self._reveals[token] = (now + ttl_s, doc)

    async def take_reveal(self, token: str) -> bytes | None:
        until, doc = self._reveals.pop(token, (0.0, b""))
        return doc if until >= time.time() else None
