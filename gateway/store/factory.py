"""Which store a gateway uses, what ``gateway serve`` says of it, and the API keys' secret.

* ``GATEWAY_REDIS_URL`` set: Redis (:mod:`gateway.store.redis_store`), shared by every
  replica; ``GATEWAY_KEY_SECRET`` is required (every replica hashes keys alike).
* else, with ``GATEWAY_ADMIN_TOKEN`` (tenants and keys exist only with an admin API): the
  embedded store, the SQLite file ``GATEWAY_STORE_PATH`` (default ``.gateway/gateway.db``
  under the working directory), kept across restarts and shared by ``--workers N``; the
  keys' secret is kept in the file unless ``GATEWAY_KEY_SECRET`` is set.
  ``GATEWAY_STORE_PATH=:memory:`` keeps everything in the process instead and forgets it
  when the process stops (tests; one worker).
* else no store: open access, no tenants.
"""

from __future__ import annotations

import contextlib
import secrets
import sqlite3
from pathlib import Path
from urllib.parse import urlsplit

from gateway.settings import Settings
from gateway.store.base import Store
from gateway.store.health import StoreHealth
from gateway.store.memory_store import MemoryStore
from gateway.store.redis_store import RedisStore
from gateway.store.sqlite_db import SqliteDb
from gateway.store.sqlite_store import SqliteStore
from gateway.storeurl import store_target

MEMORY = ":memory:"


class StoreFileError(RuntimeError):
    """The embedded store's file cannot be used (unwritable, not a database, too new)."""


def open_store(settings: Settings) -> tuple[Store | None, bytes]:
    """The store these settings name (None: no tenancy) and the secret of key digests."""
    given = settings.key_secret.get_secret_value().encode() if settings.key_secret else None
    if settings.redis_url:
        return RedisStore.from_settings(settings), given or secrets.token_bytes(32)
    if settings.admin_token is None:
        return None, given or secrets.token_bytes(32)
    if settings.store_path == MEMORY:
        return MemoryStore(), given or secrets.token_bytes(32)  # keys die with it anyway
    try:
        store = SqliteStore(settings.store_path)
    except sqlite3.Error as e:
        raise StoreFileError(_cannot(settings.store_path, e)) from None
    return store, given or store.key_secret()


def prepare_file(settings: Settings) -> str | None:
    """Create or migrate the embedded store's file once, before any worker opens it; why it
    cannot be used, or None (also None when these settings use no file)."""
    if settings.redis_url or settings.admin_token is None or settings.store_path == MEMORY:
        return None
    db = None
    try:
        db = SqliteDb(settings.store_path, StoreHealth("sqlite"))
        db.key_secret()
    except (sqlite3.Error, OSError) as e:
        return _cannot(settings.store_path, e)
    finally:
        if db is not None:
            db.close()
    return None


def _cannot(path: str, e: BaseException) -> str:
    return f"the store file {Path(path).resolve()} cannot be used: {e}"


def store_line(settings: Settings) -> str:
    """What ``gateway serve`` says at start: which store, where its data lives."""
    if settings.redis_url:
        t = store_target(settings.redis_url)
        where = ",".join(f"{h}:{p}" for h, p in t.nodes)
        if t.kind == "single":
            with contextlib.suppress(ValueError):
                u = urlsplit(settings.redis_url)
                where = u.path if u.scheme == "unix" else f"{u.hostname}:{u.port or 6379}"
        return f"gateway: store: Redis ({t.kind}) at {where}, shared by every replica"
    if settings.admin_token is None:
        return (
            "gateway: store: none (no GATEWAY_ADMIN_TOKEN): open access, no tenants or keys; "
            "rules changes last until the gateway stops"
        )
    if settings.store_path == MEMORY:
        return (
            "gateway: store: in memory (GATEWAY_STORE_PATH=:memory:): tenants, keys, "
            "policies, rules versions, usage and the audit log are FORGOTTEN when the "
            "gateway stops"
        )
    return (
        f"gateway: store: SQLite file {Path(settings.store_path).resolve()}: tenants, keys, "
        "policies, rules versions, usage and the audit log are kept across restarts"
    )
