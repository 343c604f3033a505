"""Leases (:class:`~gateway.store.base.LeaseStore`): one holder of a named job across every
gateway process sharing the store, in Redis, in the embedded store's file and in this
process.

A lease has an owner (one process) and an expiry. :meth:`hold_lease` takes it when it is
free or expired, and renews it for its owner; the holder renews it well within its
expiry, so a holder that dies or is cut off from the store loses it within one expiry, and
another process takes it on its next try. :meth:`drop_lease` gives it up at once (only its
owner's). A process that lost its lease learns it on its next renewal, which answers False.

Redis: ``lease:<name>`` holds the owner, with a ``PX`` expiry (a script: take, renew or
refuse in one step). SQLite: a row per lease, taken in one write transaction.
"""

from __future__ import annotations

import sqlite3
import time

from gateway.store.redis_conn import RedisConn, RedisPart
from gateway.store.sqlite_db import SqlitePart

# KEYS: the lease. ARGV: the owner, the expiry in ms. 1 when the owner holds it afterwards.
_HOLD_LUA = """
local cur = redis.call('GET', KEYS[1])
if cur == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if not cur then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0
"""

# KEYS: the lease. ARGV: the owner. Deleted only if it is the owner's.
_DROP_LUA = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


class RedisLeases(RedisPart):
    def __init__(self, c: RedisConn):
        super().__init__(c)
        self._hold = c.script(_HOLD_LUA)
        self._drop = c.script(_DROP_LUA)

    async def hold_lease(self, name: str, owner: str, ttl_s: float) -> bool:
        ttl = str(max(1, int(ttl_s * 1000)))
        return bool(
            await self._c.call(self._hold(keys=[self._c.k("lease", name)], args=[owner, ttl]))
        )

    async def drop_lease(self, name: str, owner: str) -> None:
        await self._c.call(self._drop(keys=[self._c.k("lease", name)], args=[owner]))

    async def lease_holder(self, name: str) -> str | None:
        raw = await self._c.call(self._c.r.get(self._c.k("lease", name)))
        return raw.decode() if raw is not None else None


class SqliteLeases(SqlitePart):
    async def hold_lease(self, name: str, owner: str, ttl_s: float) -> bool:
        def hold(c: sqlite3.Connection) -> bool:
            now = int(time.time() * 1000)
            row = c.execute("SELECT owner, until_ms FROM leases WHERE name = ?", (name,)).fetchone()
            if row is not None and row[0] != owner and row[1] > now:
                return False
            c.execute(
                "INSERT OR REPLACE INTO leases VALUES (?, ?, ?)",
                (name, owner, now + max(1, int(ttl_s * 1000))),
            )
            return True

        held: bool = await self._db.write(hold)
        return held

    async def drop_lease(self, name: str, owner: str) -> None:
        await self._db.write(
            lambda c: c.execute("DELETE FROM leases WHERE name = ? AND owner = ?", (name, owner))
        )

    async def lease_holder(self, name: str) -> str | None:
        row = await self._db.read(
            lambda c: c.execute(
                "SELECT owner FROM leases WHERE name = ? AND until_ms > ?",
                (name, int(time.time() * 1000)),
            ).fetchone()
        )
        return str(row[0]) if row else None


class MemoryLeases:
    def __init__(self) -> None:
        super().__init__()
        self._leases: dict[str, tuple[str, float]] = {}

    async def hold_lease(self, name: str, owner: str, ttl_s: float) -> bool:
        now = time.time()
        held = self._leases.get(name)
        if held is not None and held[0] != owner and held[1] > now:
            return False
        self._leases[name] = (owner, now + ttl_s)
        return True

    async def drop_lease(self, name: str, owner: str) -> None:
        if self._leases.get(name, ("", 0.0))[0] == owner:
            del self._leases[name]

    async def lease_holder(self, name: str) -> str | None:
        held = self._leases.get(name)
        return held[0] if held is not None and held[1] > time.time() else None
