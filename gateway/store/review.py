"""The review queue (:class:`~gateway.store.base.ReviewStore`): a sample of the answers the
quality gate caught, kept for people to label, in Redis, in the embedded store's file and in
this process.

An item is a JSON document (:mod:`gateway.dispatch.review` builds it: the request with its
configured fields redacted, the answer that failed and the one the client got, the check
and its reason, tiers, timings, tenant) with an ``id``, a time ``at`` (epoch seconds) and
a ``label`` (null until a reviewer sets ``true_degradation``, ``false_alarm`` or
``unsure``, with ``labeled_by`` and ``labeled_at``). The queue is bounded twice: at most
``cap`` items (the oldest go first) and none older than ``ttl_s``.

Redis: each item a key of its own with the TTL (``review:item:<id>``) and a sorted set of
ids by time (``review:index``), trimmed on every push. SQLite: a table, trimmed on insert.
"""

from __future__ import annotations

import sqlite3
from collections import OrderedDict
from typing import Any, Final

import orjson

from gateway.store.redis_conn import RedisPart
from gateway.store.sqlite_db import SqlitePart

LABELS: Final = ("true_degradation", "false_alarm", "unsure")
_PAGE = 500  # items read at once while filtering


def _matches(item: dict[str, Any], check: str | None, label: str | None) -> bool:
    if check is not None and item.get("check") != check:
        return False
    if label is None:
        return True
    return item.get("label") is None if label == "none" else item.get("label") == label


def labeled(item: dict[str, Any], label: str, by: str, at: float) -> dict[str, Any]:
    return {**item, "label": label, "labeled_by": by, "labeled_at": at}


class RedisReview(RedisPart):
    async def push_review(self, item: dict[str, Any], cap: int, ttl_s: float) -> None:
        c, at = self._c, float(item["at"])
        index = c.k("review:index")
        pipe = c.pipeline()
        pipe.set(c.k(f"review:item:{item['id']}"), orjson.dumps(item), ex=max(1, int(ttl_s)))
        pipe.zadd(index, {item["id"]: at})
        pipe.zremrangebyscore(index, "-inf", f"({at - ttl_s}")  # their keys expired
        pipe.zcard(index)
        *_, n = await c.call(pipe.execute())
        over = int(n) - cap
        if over > 0:  # the oldest go
            old = await c.call(c.r.zrange(index, 0, over - 1))
            if old:
                pipe = c.pipeline()
                pipe.zrem(index, *old)
                pipe.delete(*(c.k(f"review:item:{_s(i)}") for i in old))
                await c.call(pipe.execute())

    async def reviews(
        self, limit: int = 100, check: str | None = None, label: str | None = None
    ) -> list[dict[str, Any]]:
        c, start = self._c, 0
        out: list[dict[str, Any]] = []
        while len(out) < limit:
            ids = await c.call(c.r.zrevrange(c.k("review:index"), start, start + _PAGE - 1))
            if not ids:
                break
            raws = await c.call(c.r.mget([c.k(f"review:item:{_s(i)}") for i in ids]))
            for raw in raws:
                if raw is not None:
                    item = orjson.loads(raw)
                    if _matches(item, check, label):
                        out.append(item)
            start += _PAGE
        return out[:limit]

    async def review(self, rid: str) -> dict[str, Any] | None:
        raw = await self._c.call(self._c.r.get(self._c.k(f"review:item:{rid}")))
        return None if raw is None else dict(orjson.loads(raw))

    async def label_review(self, rid: str, label: str, by: str, at: float) -> dict[str, Any] | None:
        item = await self.review(rid)
        if item is None:
            return None
        item = labeled(item, label, by, at)
        key = self._c.k(f"review:item:{rid}")
        await self._c.call(self._c.r.set(key, orjson.dumps(item), keepttl=True, xx=True))
        return item


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


class MemoryReview:
    def __init__(self) -> None:
        super().__init__()
        self._review: OrderedDict[str, dict[str, Any]] = OrderedDict()

    def _trim(self, cap: int, ttl_s: float, now: float) -> None:
        while self._review and (
            len(self._review) > cap or next(iter(self._review.values()))["at"] < now - ttl_s
        ):
            self._review.popitem(last=False)

    async def push_review(self, item: dict[str, Any], cap: int, ttl_s: float) -> None:
        self._review[item["id"]] = item
        self._trim(cap, ttl_s, float(item["at"]))

    async def reviews(
        self, limit: int = 100, check: str | None = None, label: str | None = None
    ) -> list[dict[str, Any]]:
        found = (i for i in reversed(self._review.values()) if _matches(i, check, label))
        return [i for _, i in zip(range(limit), found, strict=False)]

    async def review(self, rid: str) -> dict[str, Any] | None:
        return self._review.get(rid)

    async def label_review(self, rid: str, label: str, by: str, at: float) -> dict[str, Any] | None:
        if rid not in self._review:
            return None
        self._review[rid] = labeled(self._review[rid], label, by, at)
        return self._review[rid]


class SqliteReview(SqlitePart):
    async def push_review(self, item: dict[str, Any], cap: int, ttl_s: float) -> None:
        at = float(item["at"])

        def write(c: sqlite3.Connection) -> None:
            c.execute(
                "INSERT OR REPLACE INTO review (id, at, check_name, label, doc) "
                "VALUES (?, ?, ?, ?, ?)",
                (item["id"], at, item.get("check"), item.get("label"), orjson.dumps(item)),
            )
            c.execute("DELETE FROM review WHERE at < ?", (at - ttl_s,))
            c.execute(
                "DELETE FROM review WHERE id IN (SELECT id FROM review ORDER BY at DESC "
                "LIMIT -1 OFFSET ?)",
                (cap,),
            )

        await self._db.write(write)

    async def reviews(
        self, limit: int = 100, check: str | None = None, label: str | None = None
    ) -> list[dict[str, Any]]:
        where: list[str] = ["at >= ?"]
        args: list[Any] = [0.0]
        if check is not None:
            where.append("check_name = ?")
            args.append(check)
        if label == "none":
            where.append("label IS NULL")
        elif label is not None:
            where.append("label = ?")
            args.append(label)
        sql = f"SELECT doc FROM review WHERE {' AND '.join(where)} ORDER BY at DESC LIMIT ?"
        rows = await self._db.read(lambda c: c.execute(sql, (*args, limit)).fetchall())
        return [orjson.loads(r[0]) for r in rows]

    async def review(self, rid: str) -> dict[str, Any] | None:
        rows = await self._db.read(
            lambda c: c.execute("SELECT doc FROM review WHERE id = ?", (rid,)).fetchall()
        )
        return dict(orjson.loads(rows[0][0])) if rows else None

    async def label_review(self, rid: str, label: str, by: str, at: float) -> dict[str, Any] | None:
        def write(c: sqlite3.Connection) -> dict[str, Any] | None:
            row = c.execute("SELECT doc FROM review WHERE id = ?", (rid,)).fetchone()
            if row is None:
                return None
            item = labeled(orjson.loads(row[0]), label, by, at)
            c.execute(
                "UPDATE review SET label = ?, doc = ? WHERE id = ?",
                (label, orjson.dumps(item), rid),
            )
            return item

        return await self._db.write(write)
