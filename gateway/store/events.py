"""Events (:class:`~gateway.store.base.EventBus`): every store write announced to every
replica, as typed values, through Redis pub/sub, the embedded store's file, or in this
process.

The events, one frozen value per kind; a consumer ``match``es on them::

    RulesChanged(version)      a rules version became current (stored, rolled back to,
                               or claimed as the first one of an empty store)
    TenantChanged(tenant_id)   a tenant was created, changed (name, policy) or deleted
    KeyChanged(digest)         an API key was added or deleted (revoked, rotated, its tenant
                               deleted)
    DemotionChanged(rule, tier, version)
                               the quality circuit demoted a tier for a rule (``version``:
                               the record's), or its demotion ended (``version`` 0)
    Resync()                   this subscriber is (re)subscribed: whatever it may have
                               missed meanwhile, it re-reads
    StoreDown()                this subscriber lost the channel; it reconnects by itself
    Unknown(tag, data)         a kind this version does not know (a newer replica's) or a
                               message it cannot read: never an error, ignored by consumers

A write announces itself: the store method that performs it publishes its event (the
tenants, keys and versions parts), once, whoever called it. ``Resync`` and ``StoreDown``
are said by the subscriber, never published.

One encoding, :func:`encode` / :func:`decode`: a JSON object tagged by ``"type"``
(``{"type": "tenant", "id": "ten_1"}``), the wire format replicas have always spoken, so
old and new replicas understand each other during a rolling upgrade. Nothing else reads
the tag.

The embedded store (SQLite) has no pub/sub: a write inserts its event into the file's
``changes`` table in the same transaction (:func:`announce`), and every process reads the
rows past the last one it saw every :data:`POLL_S` (one indexed read that usually finds
nothing), and at once after a write of its own. Another worker process hears a change
within about :data:`POLL_S`; rows older than :data:`CHANGES_KEEP_S` are pruned.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any, ClassVar, get_type_hints

import orjson

from gateway.errors import StoreUnavailable
from gateway.store.redis_conn import RedisPart
from gateway.store.sqlite_db import SqlitePart

_RECONNECT_S = 0.5
POLL_S = 0.2  # embedded store: how often a process reads the changes of the others
CHANGES_KEEP_S = 3600.0


@dataclass(frozen=True, slots=True)
class RulesChanged:
    version: int
    tag: ClassVar[str] = "rules"


@dataclass(frozen=True, slots=True)
class TenantChanged:
    tenant_id: str = field(metadata={"wire": "id"})
    tag: ClassVar[str] = "tenant"


@dataclass(frozen=True, slots=True)
class KeyChanged:
    digest: str
    tag: ClassVar[str] = "key"


@dataclass(frozen=True, slots=True)
class DemotionChanged:
    rule: str
    tier: str
    version: int  # the demotion's record; 0: it ended (restored, released, expired)
    tag: ClassVar[str] = "demotion"


@dataclass(frozen=True, slots=True)
class Resync:
    tag: ClassVar[str] = "resync"


@dataclass(frozen=True, slots=True)
class StoreDown:
    tag: ClassVar[str] = "store_down"


@dataclass(frozen=True, slots=True)
class Unknown:
    tag: str  # "" when the message had none
    data: Mapping[str, Any] = field(default_factory=dict)  # the rest of the message


Known = RulesChanged | TenantChanged | KeyChanged | DemotionChanged | Resync | StoreDown
Event = Known | Unknown

KINDS: tuple[type[Known], ...] = (
    RulesChanged,
    TenantChanged,
    KeyChanged,
    DemotionChanged,
    Resync,
    StoreDown,
)


@dataclass(frozen=True, slots=True)
class _Kind:
    """How one kind of event is read: its class and its fields (name, wire name, type)."""

    make: Callable[..., Known]
    fields: tuple[tuple[str, str, type], ...]


def _kind(cls: type[Known]) -> _Kind:
    hints = get_type_hints(cls)
    return _Kind(
        cls, tuple((f.name, f.metadata.get("wire", f.name), hints[f.name]) for f in fields(cls))
    )


_BY_TAG: Mapping[str, _Kind] = MappingProxyType({c.tag: _kind(c) for c in KINDS})


def encode(ev: Event) -> bytes:
    """The event as it travels: a JSON object tagged by ``"type"``."""
    match ev:
        case Unknown(tag=tag, data=extra):
            return orjson.dumps({**extra, "type": tag})
        case _:
            kind = _BY_TAG[ev.tag]
            return orjson.dumps({"type": ev.tag, **{w: getattr(ev, n) for n, w, _ in kind.fields}})


def decode(raw: bytes | str) -> Event:
    """The event of a message; :class:`Unknown` for one it cannot read, never an error."""
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return Unknown("")
    if not isinstance(doc, dict):
        return Unknown("")
    tag = doc.get("type")
    tag = tag if isinstance(tag, str) else ""
    extra = {k: v for k, v in doc.items() if k != "type"}
    kind = _BY_TAG.get(tag)
    if kind is None:
        return Unknown(tag, extra)
    args = {n: doc.get(w) for n, w, _ in kind.fields}
    if any(type(args[n]) is not t for n, _, t in kind.fields):  # bool is no int here
        return Unknown(tag, extra)
    return kind.make(**args)


class RedisEvents(RedisPart):
    """Pub/sub on ``events``. The Redis parts that write (tenants, keys, versions) are
    event parts too, so each write publishes its own event."""

    @property
    def _channel(self) -> str:
        return self._c.k("events")

    async def publish(self, event: Event) -> None:
        await self._c.call(self._c.r.publish(self._channel, encode(event)))

    async def events(self) -> AsyncIterator[Event]:
        while True:
            sub = self._c.subscriber()
            try:
                await sub.subscribe(self._channel)
                yield Resync()  # (re)subscribed: whatever we missed, re-read it
                while True:
                    msg = await sub.get_message(timeout=1.0)
                    if msg is not None and isinstance(msg.get("data"), bytes):  # a message
                        yield decode(msg["data"])
            except Exception:  # any trouble: say so, reconnect, then the consumer resyncs
                yield StoreDown()
                await asyncio.sleep(_RECONNECT_S)
            finally:
                with contextlib.suppress(Exception):
                    await sub.aclose()


class MemoryEvents:
    def __init__(self) -> None:
        super().__init__()
        self._listeners: list[asyncio.Queue[Event]] = []

    async def publish(self, event: Event) -> None:
        for q in self._listeners:
            q.put_nowait(event)

    async def events(self) -> AsyncIterator[Event]:
        q: asyncio.Queue[Event] = asyncio.Queue()
        self._listeners.append(q)
        try:
            yield Resync()  # subscribed, as every store says
            while True:
                yield await q.get()
        finally:
            self._listeners.remove(q)


def announce(c: sqlite3.Connection, event: Event) -> None:
    """Record ``event`` in the embedded store's file, inside the caller's write."""
    c.execute("INSERT INTO changes (at, event) VALUES (?, ?)", (time.time(), encode(event)))


def _changes_after(seq: int) -> Callable[[sqlite3.Connection], list[tuple[int, bytes]]]:
    def read(c: sqlite3.Connection) -> list[tuple[int, bytes]]:
        rows = c.execute("SELECT seq, event FROM changes WHERE seq > ? ORDER BY seq", (seq,))
        return [(int(s), bytes(e)) for s, e in rows]

    return read


class SqliteEvents(SqlitePart):
    """The embedded store's events: its ``changes`` table, read by every process."""

    def __init__(self, *a: Any) -> None:
        super().__init__(*a)
        self._listeners: list[asyncio.Queue[Event]] = []
        self._seen = self._db.transaction(
            lambda c: int(c.execute("SELECT coalesce(max(seq), 0) FROM changes").fetchone()[0])
        )
        self._poke = asyncio.Event()
        self._poller: asyncio.Task[None] | None = None

    async def publish(self, event: Event) -> None:
        await self._db.write(lambda c: announce(c, event))
        self._poke.set()

    async def _write_said(self, fn: Callable[[sqlite3.Connection], Any]) -> Any:
        """A write that announces itself (``fn`` calls :func:`announce`); this process's
        listeners hear it at once, the others within :data:`POLL_S`."""
        out = await self._db.write(fn)
        self._poke.set()
        return out

    async def events(self) -> AsyncIterator[Event]:
        q: asyncio.Queue[Event] = asyncio.Queue()
        self._listeners.append(q)
        if self._poller is None or self._poller.done():
            self._poller = asyncio.get_running_loop().create_task(self._poll())
        try:
            yield Resync()
            while True:
                yield await q.get()
        finally:
            self._listeners.remove(q)

    def _tell(self, ev: Event) -> None:
        for q in self._listeners:
            q.put_nowait(ev)

    async def _poll(self) -> None:
        lost = False
        while self._listeners:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(POLL_S):
                    await self._poke.wait()
            self._poke.clear()
            try:
                rows = await self._db.read(_changes_after(self._seen))
            except StoreUnavailable:
                if not lost:
                    lost = True
                    self._tell(StoreDown())
                continue
            if lost or (rows and rows[0][0] != self._seen + 1):  # some may have been missed
                lost = False
                self._tell(Resync())
            for seq, raw in rows:
                self._seen = seq
                self._tell(decode(raw))

    async def _stop_polling(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller
