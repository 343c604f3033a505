"""Rule versions (:class:`~gateway.rules.control.RulesVersions`): every accepted rules
text, numbered, and which one is current, in Redis, in the embedded store's file (SQLite)
and in this process.

Redis: ``rules:seq`` numbers them, ``rules:v:<n>`` holds each text, ``rules:meta`` lists
who stored which (the last :data:`~gateway.store.base.RULES_MAX`), ``rules:current`` says
which one runs. A text is stored before it is listed, so a listed version always reads.

The first version of an empty store (a fleet starting, a Redis that came back empty) is
claimed with ``SET NX`` on ``rules:current``: when every replica records its rules at once,
one version wins, the others adopt it, and the history lists only it.

SQLite: a row per version (numbered by the table), ``meta.rules_current`` names the
current one; a first claim is one write transaction, so one claim wins there too.

A version that becomes current announces itself (:class:`~gateway.store.events.RulesChanged`):
when it is set, and when a first version is claimed; a version only stored does not.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import orjson

from gateway.errors import StoreUnavailable
from gateway.store.base import RULES_MAX
from gateway.store.events import MemoryEvents, RedisEvents, RulesChanged, SqliteEvents, announce
from gateway.store.redis_conn import RedisConn

# rules:current := ARGV[2] if it still holds ARGV[1] (a version whose text was lost)
_REPLACE_LUA = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2])
  return 1
end
return 0
"""


class RedisRules(RedisEvents):
    def __init__(self, c: RedisConn):
        super().__init__(c)
        self._replace = c.script(_REPLACE_LUA)

    async def save_rules(self, text: str, meta: dict[str, Any]) -> int:
        c = self._c
        version = int(await c.call(c.r.incr(c.k("rules", "seq"))))
        await c.call(c.r.set(c.k("rules", "v", str(version)), text))
        await c.call(c.r.rpush(c.k("rules", "meta"), orjson.dumps({"version": version, **meta})))
        return version

    async def set_current_rules(self, version: int) -> None:
        await self._c.call(self._c.r.set(self._c.k("rules", "current"), version))
        await self.publish(RulesChanged(version))

    async def claim_first_rules(self, text: str, meta: dict[str, Any]) -> tuple[int, str, bool]:
        cur = await self.current_rules()
        if cur is not None:
            return (*cur, False)
        c = self._c
        version = int(await c.call(c.r.incr(c.k("rules", "seq"))))
        await c.call(c.r.set(c.k("rules", "v", str(version)), text))
        current = c.k("rules", "current")
        won = await c.call(c.r.set(current, version, nx=True))
        if not won:  # another replica's claim came first, or a current naming a lost text
            stale = await c.call(c.r.get(current))
            cur = await self.current_rules()
            replaced = cur is None and stale is not None
            if replaced:  # replaced only if it still names that version: a compare-and-set
                replaced = bool(await c.call(self._replace(keys=[current], args=[stale, version])))
            if not replaced:
                await c.call(c.r.delete(c.k("rules", "v", str(version))))
                cur = await self.current_rules()
                if cur is None:
                    raise StoreUnavailable("the current rules version changed while read")
                return (*cur, False)
        await c.call(c.r.rpush(c.k("rules", "meta"), orjson.dumps({"version": version, **meta})))
        await self.publish(RulesChanged(version))
        return version, text, True

    async def current_rules(self) -> tuple[int, str] | None:
        cur = await self._c.call(self._c.r.get(self._c.k("rules", "current")))
        if cur is None:
            return None
        text = await self.rules_text(int(cur))
        return (int(cur), text) if text is not None else None

    async def rules_versions(self) -> list[dict[str, Any]]:
        c = self._c
        cur = await c.call(c.r.get(c.k("rules", "current")))
        raws = await c.call(c.r.lrange(c.k("rules", "meta"), -RULES_MAX, -1))
        out = [orjson.loads(r) for r in raws]
        for m in out:
            m["current"] = cur is not None and m["version"] == int(cur)
        return list(out)

    async def rules_text(self, version: int) -> str | None:
        raw = await self._c.call(self._c.r.get(self._c.k("rules", "v", str(version))))
        return raw.decode() if raw is not None else None


class MemoryRules(MemoryEvents):
    def __init__(self) -> None:
        super().__init__()
        self._rules: list[tuple[str, dict[str, Any]]] = []
        self._current: int | None = None

    async def save_rules(self, text: str, meta: dict[str, Any]) -> int:
        self._rules.append((text, meta))
        return len(self._rules)

    async def set_current_rules(self, version: int) -> None:
        self._current = version
        await self.publish(RulesChanged(version))

    async def claim_first_rules(self, text: str, meta: dict[str, Any]) -> tuple[int, str, bool]:
        cur = await self.current_rules()
        if cur is not None:
            return (*cur, False)
        version = await self.save_rules(text, meta)
        await self.set_current_rules(version)
        return version, text, True

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


def _current(c: sqlite3.Connection) -> tuple[int, str] | None:
    row = c.execute(
        "SELECT r.version, r.text FROM meta m JOIN rules r ON r.version = CAST(m.value AS INTEGER)"
        " WHERE m.name = 'rules_current'"
    ).fetchone()
    return (int(row[0]), str(row[1])) if row else None


def _save(c: sqlite3.Connection, text: str, meta: dict[str, Any]) -> int:
    cur = c.execute("INSERT INTO rules (text, meta) VALUES (?, ?)", (text, orjson.dumps(meta)))
    assert cur.lastrowid is not None
    return int(cur.lastrowid)


def _make_current(c: sqlite3.Connection, version: int) -> None:
    c.execute("INSERT OR REPLACE INTO meta VALUES ('rules_current', ?)", (str(version),))
    announce(c, RulesChanged(version))


class SqliteRules(SqliteEvents):
    async def save_rules(self, text: str, meta: dict[str, Any]) -> int:
        version: int = await self._db.write(lambda c: _save(c, text, meta))
        return version

    async def set_current_rules(self, version: int) -> None:
        await self._write_said(lambda c: _make_current(c, version))

    async def claim_first_rules(self, text: str, meta: dict[str, Any]) -> tuple[int, str, bool]:
        def claim(c: sqlite3.Connection) -> tuple[int, str, bool]:
            cur = _current(c)
            if cur is not None:
                return (*cur, False)
            version = _save(c, text, meta)
            _make_current(c, version)
            return version, text, True

        out: tuple[int, str, bool] = await self._write_said(claim)
        return out

    async def current_rules(self) -> tuple[int, str] | None:
        return await self._db.read(_current)

    async def rules_versions(self) -> list[dict[str, Any]]:
        def read(c: sqlite3.Connection) -> list[dict[str, Any]]:
            cur = _current(c)
            rows = c.execute(
                "SELECT version, meta FROM rules ORDER BY version DESC LIMIT ?", (RULES_MAX,)
            ).fetchall()
            return [
                {"version": v, **orjson.loads(m), "current": cur is not None and v == cur[0]}
                for v, m in reversed(rows)
            ]

        return await self._db.read(read)

    async def rules_text(self, version: int) -> str | None:
        row = await self._db.read(
            lambda c: c.execute("SELECT text FROM rules WHERE version = ?", (version,)).fetchone()
        )
        return str(row[0]) if row else None
