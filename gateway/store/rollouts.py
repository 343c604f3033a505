"""Judged rollouts' shared data (:class:`~gateway.store.base.RolloutStore`): each arm's
counts, summed over every replica, and each analysed rule's rollout record, in Redis, in
the embedded store's file and in this process.

* **Counts** (:mod:`gateway.rollout.counts`): a field ``(bucket start in ms, name)`` and a
  number, added to by every replica (:meth:`count_rollout`); the replica that judges reads
  the buckets of the step it judges (:meth:`rollout_counts`, which drops the older ones).
  Redis: one hash per rule, ``rollout:counts:<rule>`` (field ``<bucket>|<name>``,
  ``HINCRBY``), which expires :data:`RETAIN_S` after its last write. SQLite: a row per
  field, added to with an upsert.
* **Records**: the latest state of each analysed rule's rollout (its step, since when, the
  last decision and the steps taken), written by the judging replica only, read by every
  replica's admin API. Redis: the hash ``rollout:state`` (field: the rule, value: JSON).
"""

from __future__ import annotations

import sqlite3
import time
from collections import Counter
from collections.abc import Mapping
from typing import Any

import orjson

from gateway.store.redis_conn import RedisPart
from gateway.store.sqlite_db import SqlitePart

Field = tuple[int, str]
RETAIN_S = 86_400  # a rule's counts outlive their last write by this much


def _split(raw: bytes | str) -> Field | None:
    text = raw.decode() if isinstance(raw, bytes) else raw
    bucket, sep, name = text.partition("|")
    if not sep or not bucket.lstrip("-").isdigit():
        return None
    return int(bucket), name


class RedisRollouts(RedisPart):
    def _counts_key(self, rule: str) -> str:
        return self._c.k("rollout", "counts", rule)

    async def count_rollout(self, rule: str, counts: Mapping[Field, int]) -> None:
        if not counts:
            return
        c = self._c
        key = self._counts_key(rule)
        pipe = c.pipeline()
        for (bucket, name), n in counts.items():
            pipe.hincrby(key, f"{bucket}|{name}", n)
        pipe.expire(key, RETAIN_S)
        await c.call(pipe.execute())

    async def rollout_counts(self, rule: str, since_ms: int) -> dict[Field, int]:
        c = self._c
        key = self._counts_key(rule)
        raw = await c.call(c.r.hgetall(key))
        out: dict[Field, int] = {}
        old = []
        for f, n in raw.items():
            field = _split(f)
            if field is None or field[0] < since_ms:
                old.append(f)
            else:
                out[field] = int(n)
        if old:
            await c.call(c.r.hdel(key, *old))
        return out

    async def put_rollout(self, rule: str, doc: dict[str, Any]) -> None:
        await self._c.call(self._c.r.hset(self._c.k("rollout", "state"), rule, orjson.dumps(doc)))

    async def rollouts(self) -> dict[str, dict[str, Any]]:
        raw = await self._c.call(self._c.r.hgetall(self._c.k("rollout", "state")))
        return {
            (k.decode() if isinstance(k, bytes) else str(k)): orjson.loads(v)
            for k, v in raw.items()
        }


class SqliteRollouts(SqlitePart):
    async def count_rollout(self, rule: str, counts: Mapping[Field, int]) -> None:
        if not counts:
            return
        rows = [(rule, bucket, name, n) for (bucket, name), n in counts.items()]
        horizon = int((time.time() - RETAIN_S) * 1000)

        def add(c: sqlite3.Connection) -> None:
            c.executemany(
                "INSERT INTO rollout_counts VALUES (?, ?, ?, ?) ON CONFLICT (rule, bucket, field)"
                " DO UPDATE SET n = n + excluded.n",
                rows,
            )
            c.execute("DELETE FROM rollout_counts WHERE rule = ? AND bucket < ?", (rule, horizon))

        await self._db.write(add)

    async def rollout_counts(self, rule: str, since_ms: int) -> dict[Field, int]:
        def read(c: sqlite3.Connection) -> list[Any]:
            c.execute("DELETE FROM rollout_counts WHERE rule = ? AND bucket < ?", (rule, since_ms))
            return c.execute(
                "SELECT bucket, field, n FROM rollout_counts WHERE rule = ?", (rule,)
            ).fetchall()

        rows = await self._db.write(read)
        return {(int(b), str(f)): int(n) for b, f, n in rows}

    async def put_rollout(self, rule: str, doc: dict[str, Any]) -> None:
        await self._db.write(
            lambda c: c.execute(
                "INSERT OR REPLACE INTO rollouts VALUES (?, ?)", (rule, orjson.dumps(doc))
            )
        )

    async def rollouts(self) -> dict[str, dict[str, Any]]:
        rows = await self._db.read(lambda c: c.execute("SELECT rule, doc FROM rollouts").fetchall())
        return {str(r): orjson.loads(d) for r, d in rows}


class MemoryRollouts:
    def __init__(self) -> None:
        super().__init__()
        self._rollout_counts: dict[str, Counter[Field]] = {}
        self._rollouts: dict[str, bytes] = {}

    async def count_rollout(self, rule: str, counts: Mapping[Field, int]) -> None:
        self._rollout_counts.setdefault(rule, Counter()).update(counts)

    async def rollout_counts(self, rule: str, since_ms: int) -> dict[Field, int]:
        kept = {f: n for f, n in self._rollout_counts.get(rule, {}).items() if f[0] >= since_ms}
        self._rollout_counts[rule] = Counter(kept)
        return dict(kept)

    async def put_rollout(self, rule: str, doc: dict[str, Any]) -> None:
        self._rollouts[rule] = orjson.dumps(doc)  # a copy: the caller's dict may change

    async def rollouts(self) -> dict[str, dict[str, Any]]:
        return {r: orjson.loads(d) for r, d in self._rollouts.items()}
