"""Demotions (:class:`~gateway.store.base.DemotionStore`): the quality circuit's shared
decisions, one record per rule and tier, in Redis, in the embedded store's file (SQLite)
and in this process.

A record (:class:`Demotion`) says that a tier is out of a rule's rotation: why, since
when, until when (it ends by itself then: every reader ignores it past ``until``), who
decided (a replica's circuit, or an operator who pinned it) and its version, numbered by
the store. A write is compare-and-set, so two replicas that decide at once keep one
record, and a restore never removes a newer demotion than the one it judged:

* :meth:`demote` records a demotion unless a live one of that rule and tier is there
  already (a replica's circuit); with ``replace`` it overwrites it (an operator's pin);
  either way it answers the record that holds now;
* :meth:`restore` removes it, only if it is still ``version`` when one is given;
* :meth:`probed` adds one probe's verdict to the record's (of that version only) and answers
  the latest ones, so that the fleet's probes, not one replica's, decide a restore.

Redis: one hash, ``{quality}:demotions`` (field ``<rule>\\n<tier>``, the record as JSON; field
``<rule>\\n<tier>\\nprobes``, its probes as ``<version>:<verdicts>``), and its counter
``{quality}:seq``, hash-tagged to one slot so that each write is one script.
SQLite: two tables of their own. Every write that changes a record announces itself
(:class:`~gateway.store.events.DemotionChanged`), so every replica applies it at once.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import asdict, dataclass, replace
from typing import Any

import orjson

from gateway.store.events import (
    DemotionChanged,
    MemoryEvents,
    RedisEvents,
    SqliteEvents,
    announce,
)
from gateway.store.redis_conn import RedisConn


@dataclass(frozen=True, slots=True)
class Demotion:
    """A tier out of a rule's rotation (see the module)."""

    rule: str
    tier: str
    reason: str  # e.g. "92% check failures (23 of 25 answers in 60 s)": x-gateway-route says it
    since: float  # epoch seconds
    until: float | None = None  # epoch seconds it ends by itself; None: when released
    by: str = "circuit"  # "circuit <replica>", or the operator who pinned it
    pinned: bool = False  # an operator's: no probes, never restored by them
    version: int = 0  # numbered by the store; 0: not stored (this process only)

    @property
    def key(self) -> tuple[str, str]:
        return self.rule, self.tier

    def live(self, now: float) -> bool:
        return self.until is None or now < self.until

    def encode(self) -> bytes:
        return orjson.dumps(asdict(self))

    @classmethod
    def decode(cls, raw: bytes | str) -> Demotion | None:
        """The record, or None for one this version cannot read (never an error)."""
        try:
            doc = orjson.loads(raw)
            until = doc.get("until")
            return cls(
                rule=str(doc["rule"]),
                tier=str(doc["tier"]),
                reason=str(doc.get("reason", "")),
                since=float(doc["since"]),
                until=None if until is None else float(until),
                by=str(doc.get("by", "")),
                pinned=bool(doc.get("pinned", False)),
                version=int(doc.get("version", 0)),
            )
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
            return None


def _field(rule: str, tier: str) -> str:
    return f"{rule}\n{tier}"


def _said(d: Demotion | None, rule: str, tier: str) -> DemotionChanged:
    return DemotionChanged(rule, tier, d.version if d is not None else 0)


# KEYS: the hash, the counter. ARGV: the field, the record without its version (a JSON
# object), now (epoch s), "1" to replace a live record. The record that holds afterwards.
_DEMOTE_LUA = """
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if cur and ARGV[4] ~= '1' then
  local d = cjson.decode(cur)
  local u = d['until']
  if u == nil or u == cjson.null or tonumber(u) > tonumber(ARGV[3]) then
    return {0, cur}
  end
end
local v = redis.call('INCR', KEYS[2])
local rec = '{"version":' .. v .. ',' .. string.sub(ARGV[2], 2)
redis.call('HSET', KEYS[1], ARGV[1], rec)
return {1, rec}
"""

# KEYS: the hash. ARGV: the field, the version to remove ("" for any). The record removed.
_RESTORE_LUA = """
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if not cur then return false end
if ARGV[2] ~= '' and tonumber(cjson.decode(cur)['version']) ~= tonumber(ARGV[2]) then
  return false
end
redis.call('HDEL', KEYS[1], ARGV[1], ARGV[1] .. '\\nprobes')
return cur
"""

# KEYS: the hash. ARGV: the field, the version, the verdict ("1" failed, "0" passed), how
# many to keep. The latest verdicts, newest first; false when the record is not that version.
_PROBED_LUA = """
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if not cur or tonumber(cjson.decode(cur)['version']) ~= tonumber(ARGV[2]) then
  return false
end
local f = ARGV[1] .. '\\nprobes'
local was = redis.call('HGET', KEYS[1], f) or ''
local v, seen = string.match(was, '^(%d+):(.*)$')
if v ~= ARGV[2] then seen = '' end
seen = string.sub(ARGV[3] .. seen, 1, tonumber(ARGV[4]))
redis.call('HSET', KEYS[1], f, ARGV[2] .. ':' .. seen)
return seen
"""


def _unversioned(d: Demotion) -> bytes:
    doc = asdict(d)
    del doc["version"]
    return orjson.dumps(doc)


class RedisDemotions(RedisEvents):
    def __init__(self, c: RedisConn):
        super().__init__(c)
        self._demote = c.script(_DEMOTE_LUA)
        self._restore = c.script(_RESTORE_LUA)
        self._probed = c.script(_PROBED_LUA)

    @property
    def _keys(self) -> list[str]:
        return [self._c.k("{quality}", "demotions"), self._c.k("{quality}", "seq")]

    async def demote(self, d: Demotion, replace: bool = False) -> Demotion:
        args = [_field(d.rule, d.tier), _unversioned(d), repr(time.time()), "1" if replace else "0"]
        wrote, raw = await self._c.call(self._demote(keys=self._keys, args=args))
        held = Demotion.decode(raw) or d
        if wrote:
            await self.publish(_said(held, d.rule, d.tier))
        return held

    async def restore(self, rule: str, tier: str, version: int | None = None) -> Demotion | None:
        args = [_field(rule, tier), "" if version is None else str(version)]
        raw = await self._c.call(self._restore(keys=self._keys[:1], args=args))
        if raw is None:
            return None
        await self.publish(_said(None, rule, tier))
        return Demotion.decode(raw)

    async def probed(self, d: Demotion, failed: bool, keep: int) -> str | None:
        args = [_field(d.rule, d.tier), str(d.version), _verdict(failed), str(keep)]
        out = await self._c.call(self._probed(keys=self._keys[:1], args=args))
        return None if out is None else bytes(out).decode()

    async def demotions(self) -> list[Demotion]:
        raws = await self._c.call(self._c.r.hvals(self._keys[0]))
        return _live(Demotion.decode(r) for r in raws)


class MemoryDemotions(MemoryEvents):
    def __init__(self) -> None:
        super().__init__()
        self._demotions: dict[tuple[str, str], Demotion] = {}
        self._demotion_seq = 0
        self._probe_verdicts: dict[tuple[str, str], tuple[int, str]] = {}

    async def probed(self, d: Demotion, failed: bool, keep: int) -> str | None:
        held = self._demotions.get(d.key)
        if held is None or held.version != d.version:
            return None
        version, seen = self._probe_verdicts.get(d.key, (d.version, ""))
        seen = (_verdict(failed) + (seen if version == d.version else ""))[:keep]
        self._probe_verdicts[d.key] = (d.version, seen)
        return seen

    async def demote(self, d: Demotion, replace: bool = False) -> Demotion:
        held = self._demotions.get(d.key)
        if held is not None and held.live(time.time()) and not replace:
            return held
        self._demotion_seq += 1
        held = self._demotions[d.key] = _numbered(d, self._demotion_seq)
        await self.publish(_said(held, d.rule, d.tier))
        return held

    async def restore(self, rule: str, tier: str, version: int | None = None) -> Demotion | None:
        held = self._demotions.get((rule, tier))
        if held is None or (version is not None and held.version != version):
            return None
        del self._demotions[(rule, tier)]
        await self.publish(_said(None, rule, tier))
        return held

    async def demotions(self) -> list[Demotion]:
        return _live(self._demotions.values())


def _verdict(failed: bool) -> str:
    return "1" if failed else "0"


def _numbered(d: Demotion, version: int) -> Demotion:
    return replace(d, version=version)


def _live(found: Any) -> list[Demotion]:
    now = time.time()
    return sorted((d for d in found if d is not None and d.live(now)), key=lambda d: d.key)


def _sqlite_demote(d: Demotion, replace_live: bool) -> Any:
    def write(c: sqlite3.Connection) -> tuple[Demotion, bool]:
        row = c.execute(
            "SELECT doc FROM demotions WHERE rule = ? AND tier = ?", (d.rule, d.tier)
        ).fetchone()
        held = Demotion.decode(row[0]) if row else None
        if held is not None and held.live(time.time()) and not replace_live:
            return held, False
        c.execute("INSERT OR IGNORE INTO meta VALUES ('demotion_seq', '0')")
        c.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE name = 'demotion_seq'")
        seq = int(c.execute("SELECT value FROM meta WHERE name = 'demotion_seq'").fetchone()[0])
        held = _numbered(d, seq)
        c.execute(
            "INSERT OR REPLACE INTO demotions (rule, tier, doc) VALUES (?, ?, ?)",
            (d.rule, d.tier, held.encode()),
        )
        announce(c, _said(held, d.rule, d.tier))
        return held, True

    return write


class SqliteDemotions(SqliteEvents):
    async def demote(self, d: Demotion, replace: bool = False) -> Demotion:
        held: Demotion
        held, _ = await self._write_said(_sqlite_demote(d, replace))
        return held

    async def restore(self, rule: str, tier: str, version: int | None = None) -> Demotion | None:
        def write(c: sqlite3.Connection) -> Demotion | None:
            row = c.execute(
                "SELECT doc FROM demotions WHERE rule = ? AND tier = ?", (rule, tier)
            ).fetchone()
            held = Demotion.decode(row[0]) if row else None
            if held is None or (version is not None and held.version != version):
                return None
            c.execute("DELETE FROM demotions WHERE rule = ? AND tier = ?", (rule, tier))
            announce(c, _said(None, rule, tier))
            return held

        out: Demotion | None = await self._write_said(write)
        return out

    async def probed(self, d: Demotion, failed: bool, keep: int) -> str | None:
        def write(c: sqlite3.Connection) -> str | None:
            row = c.execute(
                "SELECT doc FROM demotions WHERE rule = ? AND tier = ?", (d.rule, d.tier)
            ).fetchone()
            held = Demotion.decode(row[0]) if row else None
            if held is None or held.version != d.version:
                return None
            row = c.execute(
                "SELECT version, verdicts FROM demotion_probes WHERE rule = ? AND tier = ?",
                (d.rule, d.tier),
            ).fetchone()
            seen = str(row[1]) if row and row[0] == d.version else ""
            seen = (_verdict(failed) + seen)[:keep]
            c.execute(
                "INSERT OR REPLACE INTO demotion_probes VALUES (?, ?, ?, ?)",
                (d.rule, d.tier, d.version, seen),
            )
            return seen

        out: str | None = await self._db.write(write)
        return out

    async def demotions(self) -> list[Demotion]:
        rows = await self._db.read(lambda c: c.execute("SELECT doc FROM demotions").fetchall())
        return _live(Demotion.decode(r[0]) for r in rows)
