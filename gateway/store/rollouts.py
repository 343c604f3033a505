"""Judged rollouts' shared data (:class:`~gateway.store.base.RolloutStore`): each arm's
counts, summed over every replica, and each analysed rule's rollout record, in Redis, in
the embedded store's file and in this process.

* **Counts** (:mod:`gateway.rollout.counts`): a field ``(bucket start in ms, name)`` and a
  number, added to by every replica (:meth:`count_rollout`); the replica that judges reads
  each name's sum over the buckets of the step it judges (:meth:`rollout_counts`, which
  drops the older buckets), summed where the counts are: a long step's many buckets never
  travel. Redis: one hash per rule, ``rollout:counts:<rule>`` (field ``<bucket>|<name>``,
  ``HINCRBY``; read and pruned by one script), which expires :data:`RETAIN_S` after its last
  write. SQLite: a row per field, added to with an upsert.
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

from gateway.store.redis_conn import RedisConn, RedisPart
from gateway.store.sqlite_db import SqlitePart

Field = tuple[int, str]
RETAIN_S = 86_400  # a rule's counts outlive their last write by this much


def _text(v: bytes | str) -> str:
    return v.decode() if isinstance(v, bytes) else v


# KEYS: the counts hash. ARGV: the step's first bucket (ms). Each name's sum over the
# buckets from it on, as [name, n, name, n ...]; the older buckets' fields are deleted.
_SUMS_LUA = """
local all = redis.call('HGETALL', KEYS[1])
local since = tonumber(ARGV[1])
local sums, old = {}, {}
for i = 1, #all, 2 do
  local f = all[i]
  local sep = string.find(f, '|', 1, true)
  local bucket = sep and tonumber(string.sub(f, 1, sep - 1))
  if bucket == nil or bucket < since then
    old[#old + 1] = f
  else
    local name = string.sub(f, sep + 1)
    sums[name] = (sums[name] or 0) + tonumber(all[i + 1])
  end
end
for i = 1, #old, 1000 do
  redis.call('HDEL', KEYS[1], unpack(old, i, math.min(i + 999, #old)))
end
local out = {}
for name, n in pairs(sums) do
  out[#out + 1] = name
  out[#out + 1] = n
end
return out
"""


class RedisRollouts(RedisPart):
    def __init__(self, c: RedisConn):
        super().__init__(c)
        self._sums = c.script(_SUMS_LUA)

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

    async def rollout_counts(self, rule: str, since_ms: int) -> dict[str, int]:
        raw = await self._c.call(self._sums(keys=[self._counts_key(rule)], args=[since_ms]))
        return {_text(raw[i]): int(raw[i + 1]) for i in range(0, len(raw), 2)}

    async def put_rollout(self, rule: str, doc: dict[str, Any]) -> None:
        await self._c.call(self._c.r.hset(self._c.k("rollout", "state"), rule, orjson.dumps(doc)))

    async def rollouts(self) -> dict[str, dict[str, Any]]:
        raw = await self._c.call(self._c.r.hgetall(self._c.k("rollout", "state")))
        return {_text(k): orjson.loads(v) for k, v in raw.items()}


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

    async def rollout_counts(self, rule: str, since_ms: int) -> dict[str, int]:
        def read(c: sqlite3.Connection) -> list[Any]:
            c.execute("DELETE FROM rollout_counts WHERE rule = ? AND bucket < ?", (rule, since_ms))
            return c.execute(
                "SELECT field, SUM(n) FROM rollout_counts WHERE rule = ? GROUP BY field", (rule,)
            ).fetchall()

        rows = await self._db.write(read)
        return {str(f): int(n) for f, n in rows}

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

    async def rollout_counts(self, rule: str, since_ms: int) -> dict[str, int]:
        kept = {f: n for f, n in self._rollout_counts.get(rule, {}).items() if f[0] >= since_ms}
        self._rollout_counts[rule] = Counter(kept)
        sums: Counter[str] = Counter()
        for (_, name), n in kept.items():
            sums[name] += n
        return dict(sums)

    async def put_rollout(self, rule: str, doc: dict[str, Any]) -> None:
        self._rollouts[rule] = orjson.dumps(doc)  # a copy: the caller's dict may change

    async def rollouts(self) -> dict[str, dict[str, Any]]:
        return {r: orjson.loads(d) for r, d in self._rollouts.items()}
