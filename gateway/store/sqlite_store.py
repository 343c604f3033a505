"""The embedded :class:`gateway.store.base.Store`: one SQLite file (the default
``.gateway/gateway.db``, ``GATEWAY_STORE_PATH``) that every worker process of one machine
shares, kept across restarts. Each concern's SQLite part, joined over one
:class:`~gateway.store.sqlite_db.SqliteDb`.

What a fleet of machines shares is Redis (:mod:`gateway.store.redis_store`); this is the
store of one machine, ``--workers N`` included: writes are announced through the file
(:class:`~gateway.store.events.SqliteEvents`), limits are each process's share
(:class:`~gateway.store.admission.SqliteLimits`).
"""

from __future__ import annotations

import sqlite3
import time

from gateway.store.admission import SqliteAdmission
from gateway.store.demotions import SqliteDemotions
from gateway.store.events import SqliteEvents
from gateway.store.health import StoreHealth
from gateway.store.keys import SqliteKeys
from gateway.store.leases import SqliteLeases
from gateway.store.records import SqliteAudit, SqliteShadow
from gateway.store.reveals import SqliteReveals
from gateway.store.review import SqliteReview
from gateway.store.rollouts import SqliteRollouts
from gateway.store.sessions import SqliteSessions
from gateway.store.sqlite_db import SqliteDb
from gateway.store.tenants import SqliteTenants
from gateway.store.usage import SqliteUsage
from gateway.store.versions import SqliteRules

USAGE_DAYS = 40  # the daily usage kept, as in Redis


class SqliteStore(
    SqliteTenants,
    SqliteKeys,
    SqliteAdmission,
    SqliteUsage,
    SqliteAudit,
    SqliteShadow,
    SqliteReview,
    SqliteReveals,
    SqliteRules,
    SqliteDemotions,
    SqliteSessions,
    SqliteRollouts,
    SqliteLeases,
    SqliteEvents,
):
    """The file at ``path`` (created with its folder; migrated to this gateway's schema).
    Raises :class:`sqlite3.Error` when it cannot be opened or is from a newer gateway."""

    def __init__(self, path: str, health: StoreHealth | None = None):
        db = SqliteDb(path, health or StoreHealth("sqlite"))
        super().__init__(db)
        db.transaction(_prune)

    @property
    def path(self) -> str:
        return self._db.path

    @property
    def health(self) -> StoreHealth:
        return self._db.health

    def key_secret(self) -> bytes:
        """The API keys' HMAC secret kept in the file (see :meth:`SqliteDb.key_secret`)."""
        return self._db.key_secret()

    async def ping(self) -> bool:
        try:
            await self._db.read(lambda c: c.execute("SELECT 1").fetchone())
        except Exception:
            return False
        return True

    async def close(self) -> None:
        await self._stop_polling()
        await self._stop_flushing()
        self._db.close()


def _prune(c: sqlite3.Connection) -> None:
    """Start-up: drop usage past :data:`USAGE_DAYS` and budget periods that ended."""
    now = time.time()
    day = time.strftime("%Y%m%d", time.gmtime(now - USAGE_DAYS * 86400))
    c.execute("DELETE FROM usage WHERE day < ?", (day,))
    c.execute(
        "DELETE FROM budgets WHERE (length(period) = 8 AND period < ?)"
        " OR (length(period) = 6 AND period < ?)",
        (
            time.strftime("%Y%m%d", time.gmtime(now - 2 * 86400)),
            time.strftime("%Y%m", time.gmtime(now - 62 * 86400)),
        ),
    )
