"""Console sessions ended before their time (:class:`~gateway.store.base.SessionStore`): the
ids of sessions logged out, each kept until the session would have expired anyway, in
Redis (``<prefix>session:ended:<id>``, expiring with it), in the embedded store's file
and in this process. Every worker and replica that shares the store refuses a session
ended on any of them (:mod:`gateway.admin.session`).
"""

from __future__ import annotations

import sqlite3
import time

from gateway.store.redis_conn import RedisPart
from gateway.store.sqlite_db import SqlitePart

ENDED_MAX = 10_000  # sessions ended and not yet expired that this process remembers


class RedisSessions(RedisPart):
    async def end_session(self, sid: str, until: float) -> None:
        c = self._c
        ttl_ms = max(1, int((until - time.time()) * 1000))
        await c.call(c.r.set(c.k("session", "ended", sid), 1, px=ttl_ms))

    async def session_ended(self, sid: str) -> bool:
        c = self._c
        return bool(await c.call(c.r.exists(c.k("session", "ended", sid))))


class SqliteSessions(SqlitePart):
    async def end_session(self, sid: str, until: float) -> None:
        def end(c: sqlite3.Connection) -> None:
            c.execute("DELETE FROM ended_sessions WHERE until < ?", (time.time(),))
            c.execute("INSERT OR REPLACE INTO ended_sessions VALUES (?, ?)", (sid, until))

        await self._db.write(end)

    async def session_ended(self, sid: str) -> bool:
        def ended(c: sqlite3.Connection) -> bool:
            q = "SELECT 1 FROM ended_sessions WHERE sid = ? AND until >= ?"
            return c.execute(q, (sid, time.time())).fetchone() is not None

        return await self._db.read(ended)


class MemorySessions:
    def __init__(self) -> None:
        super().__init__()
        self._ended: dict[str, float] = {}

    async def end_session(self, sid: str, until: float) -> None:
        remember(self._ended, sid, until, time.time())

    async def session_ended(self, sid: str) -> bool:
        return self._ended.get(sid, 0.0) >= time.time()


def remember(ended: dict[str, float], sid: str, until: float, now: float) -> None:
    """Add ``sid`` (ended, expiring at ``until``) to ``ended``, dropping what expired and,
    past :data:`ENDED_MAX`, the soonest to expire."""
    for old in [s for s, u in ended.items() if u < now]:
        del ended[old]
    ended[sid] = until
    if len(ended) > ENDED_MAX:
        for old in sorted(ended, key=ended.__getitem__)[: len(ended) - ENDED_MAX]:
            del ended[old]
