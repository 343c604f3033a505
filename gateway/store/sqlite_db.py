"""The embedded store's database: one SQLite file that the gateway's worker processes share.

Done as Datasette and Grafana do theirs:

* **WAL** journal: readers never wait for the writer, and a reader never sees half a write;
  ``synchronous=NORMAL`` (a commit is durable once the WAL is checkpointed; a power cut
  loses at most the last commits, never the file).
* **One writer at a time**: every write is one ``BEGIN IMMEDIATE`` transaction (it takes
  the file's write lock first, so two processes never deadlock upgrading a read), and other
  processes wait for it up to :data:`BUSY_S` (``busy_timeout``). Inside a process every
  call runs on one thread of its own (:class:`SqliteDb`): the event loop never blocks on
  the file, and the process's calls run in order.
* **Migrations numbered in the code**: :data:`MIGRATIONS` is append-only; the file's
  ``PRAGMA user_version`` says how many were applied. A process applies the missing ones
  in one write transaction at start-up, so two workers starting at once apply each once.
  A new table (the review queue, say) is a new entry at the end, never an edit of one.

A call that fails (a disk full, a lock held past :data:`BUSY_S`, a file that went away)
raises :class:`~gateway.errors.StoreUnavailable` and counts in the store's health, like a
Redis call; the next call that succeeds clears it.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from gateway.errors import StoreUnavailable
from gateway.store.health import StoreHealth

T = TypeVar("T")
BUSY_S = 5.0  # how long a write waits for another process's write to finish

# Append-only: entry i (from 1) is migration i; ``PRAGMA user_version`` counts those applied.
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (  # 1: what the Redis store keeps, as tables
        "CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
        "CREATE TABLE tenants (id TEXT PRIMARY KEY, created_at REAL NOT NULL, doc TEXT NOT NULL)",
        "CREATE TABLE keys (id TEXT PRIMARY KEY, digest TEXT NOT NULL UNIQUE,"
        " tenant_id TEXT NOT NULL, doc TEXT NOT NULL)",
        "CREATE INDEX keys_by_tenant ON keys (tenant_id)",
        "CREATE TABLE rules (version INTEGER PRIMARY KEY AUTOINCREMENT, text TEXT NOT NULL,"
        " meta TEXT NOT NULL)",
        "CREATE TABLE audit (id INTEGER PRIMARY KEY AUTOINCREMENT, entry TEXT NOT NULL)",
        "CREATE TABLE shadow (id INTEGER PRIMARY KEY AUTOINCREMENT, rec TEXT NOT NULL)",
        "CREATE TABLE usage (tenant_id TEXT NOT NULL, day TEXT NOT NULL, field TEXT NOT NULL,"
        " n INTEGER NOT NULL, PRIMARY KEY (tenant_id, day, field)) WITHOUT ROWID",
        "CREATE TABLE budgets (tenant_id TEXT NOT NULL, kind TEXT NOT NULL,"
        " period TEXT NOT NULL, n INTEGER NOT NULL, PRIMARY KEY (tenant_id, kind, period))"
        " WITHOUT ROWID",
        "CREATE TABLE changes (seq INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL,"
        " event BLOB NOT NULL)",
        "CREATE TABLE fleet (member TEXT PRIMARY KEY, until_ms INTEGER NOT NULL)",
        "CREATE TABLE reveals (token TEXT PRIMARY KEY, until REAL NOT NULL, doc BLOB NOT NULL)",
    ),
    (  # 2: the quality circuit's demotions (gateway.store.demotions)
        "CREATE TABLE demotions (rule TEXT NOT NULL, tier TEXT NOT NULL, doc BLOB NOT NULL,"
        " PRIMARY KEY (rule, tier)) WITHOUT ROWID",
    ),
    (  # 3: the review queue (gateway.store.review)
        "CREATE TABLE review (id TEXT PRIMARY KEY, at REAL NOT NULL, check_name TEXT,"
        " label TEXT, doc BLOB NOT NULL)",
        "CREATE INDEX review_by_time ON review (at)",
    ),
    (  # 4: console sessions ended by a logout (gateway.store.sessions)
        "CREATE TABLE ended_sessions (sid TEXT PRIMARY KEY, until REAL NOT NULL) WITHOUT ROWID",
    ),
    (  # 5: judged rollouts' counts and records, and leases (gateway.store.rollouts, .leases)
        "CREATE TABLE rollout_counts (rule TEXT NOT NULL, bucket INTEGER NOT NULL,"
        " field TEXT NOT NULL, n INTEGER NOT NULL, PRIMARY KEY (rule, bucket, field))"
        " WITHOUT ROWID",
        "CREATE TABLE rollouts (rule TEXT PRIMARY KEY, doc BLOB NOT NULL)",
        "CREATE TABLE leases (name TEXT PRIMARY KEY, owner TEXT NOT NULL,"
        " until_ms INTEGER NOT NULL)",
    ),
    (  # 6: the latest probe verdicts of each demotion (gateway.store.demotions)
        "CREATE TABLE demotion_probes (rule TEXT NOT NULL, tier TEXT NOT NULL,"
        " version INTEGER NOT NULL, verdicts TEXT NOT NULL, PRIMARY KEY (rule, tier))"
        " WITHOUT ROWID",
    ),
)


def reason_of(e: sqlite3.Error) -> str:
    """A short name for what went wrong (a metric label, a log word)."""
    text = str(e).lower()
    for words, reason in (
        ("locked", "locked"),
        ("busy", "locked"),
        ("full", "disk full"),
        ("readonly", "read-only file"),
        ("unable to open", "cannot open"),
        ("disk i/o", "disk error"),
        ("malformed", "corrupt file"),
    ):
        if words in text:
            return reason
    return "error"


class SqliteDb:
    """One connection to the file, used from one thread of its own."""

    def __init__(self, path: str, health: StoreHealth):
        self.path = path
        self.health = health
        if path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite3.connect(
            path, timeout=BUSY_S, isolation_level=None, check_same_thread=False
        )
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="gateway-sqlite")
        self._conn.execute(f"PRAGMA busy_timeout = {int(BUSY_S * 1000)}")
        if path != ":memory:":
            self._conn.execute("PRAGMA journal_mode = WAL")
        self._conn.execute("PRAGMA synchronous = NORMAL")
        self.transaction(migrate)

    @property
    def schema_version(self) -> int:
        return int(self._conn.execute("PRAGMA user_version").fetchone()[0])

    def transaction(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """``fn`` in one write transaction, in the calling thread (start-up, the thread)."""
        c = self._conn
        c.execute("BEGIN IMMEDIATE")
        try:
            out = fn(c)
        except BaseException:
            c.execute("ROLLBACK")
            raise
        c.execute("COMMIT")
        return out

    async def write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """``fn`` in one write transaction on the store's thread."""
        return await self._run(lambda: self.transaction(fn))

    async def read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """``fn`` on the store's thread, outside a write transaction (WAL: a consistent read)."""
        return await self._run(lambda: fn(self._conn))

    async def _run(self, call: Callable[[], T]) -> T:
        loop = asyncio.get_running_loop()
        try:
            out = await loop.run_in_executor(self._thread, call)
        except sqlite3.Error as e:
            reason = reason_of(e)
            self.health.failed(reason, f"{type(e).__name__}: {e}")
            raise StoreUnavailable(reason) from None
        self.health.succeeded()
        self.health.recovered()
        return out

    def key_secret(self) -> bytes:
        """The HMAC secret of API key digests kept in the file (made on first use), so keys
        keep working after a restart and on every worker without GATEWAY_KEY_SECRET."""

        def get(c: sqlite3.Connection) -> str:
            fresh = secrets.token_hex(32)
            c.execute("INSERT OR IGNORE INTO meta VALUES ('key_secret', ?)", (fresh,))
            return str(c.execute("SELECT value FROM meta WHERE name = 'key_secret'").fetchone()[0])

        return bytes.fromhex(self.transaction(get))

    def close(self) -> None:
        self._thread.shutdown(wait=True)
        with contextlib.suppress(sqlite3.Error):
            self._conn.close()


def migrate(c: sqlite3.Connection) -> None:
    """Apply the migrations this file lacks (inside the caller's write transaction)."""
    have = int(c.execute("PRAGMA user_version").fetchone()[0])
    if have > len(MIGRATIONS):
        raise sqlite3.DatabaseError(
            f"the store file is from a newer gateway (schema {have}, this one knows "
            f"{len(MIGRATIONS)})"
        )
    for number in range(have + 1, len(MIGRATIONS) + 1):
        for statement in MIGRATIONS[number - 1]:
            c.execute(statement)
        c.execute(f"PRAGMA user_version = {number}")


class SqlitePart:
    """One concern's share of the embedded store: the file all of them share."""

    def __init__(self, db: SqliteDb):
        self._db = db
