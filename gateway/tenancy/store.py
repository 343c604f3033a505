"""Where tenants, keys, usage, the audit log and rule versions live.

Two implementations of one interface (:class:`Store`):

* :class:`RedisStore` — shared by every gateway replica. Keys live under one prefix;
  per-tenant keys carry a ``{tenant}`` hash tag so a cluster keeps them on one shard.
  Tenant writes are optimistic (WATCH/MULTI, retried), so concurrent admin writes never
  lose an update. Admission is one Lua call (:mod:`gateway.tenancy.limits`). Every write is
  announced on a pub/sub channel so other replicas drop their cached copies at once.
* :class:`MemoryStore` — the same in one process: the embedded default (one replica).

Errors talking to Redis surface as :class:`StoreUnavailable`; callers decide whether
to serve from their cache (fail-open) or refuse (fail-closed).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

import orjson

from gateway.tenancy.limits import (
    ADMIT_LUA,
    DEBIT_LUA,
    SLOT_TTL_MS,
    Admission,
    LocalLimiter,
    admission_from_lua,
    budget_period,
)
from gateway.tenancy.tenants import ApiKey, Policy, Tenant

AUDIT_MAX = 10_000
SHADOW_MAX = 5_000  # shadow comparisons kept for `evals quality --shadow`
RULES_MAX = 100


class StoreUnavailable(Exception):
    """The store could not be reached (or answered too slowly)."""


class Conflict(Exception):
    """A versioned write lost too many races in a row."""


class Store(Protocol):
    async def ping(self) -> bool: ...
    async def close(self) -> None: ...

    async def create_tenant(self, t: Tenant) -> None: ...
    async def get_tenant(self, tenant_id: str) -> Tenant | None: ...
    async def list_tenants(self) -> list[Tenant]: ...
    async def update_tenant(
        self, tenant_id: str, change: Callable[[Tenant], Tenant]
    ) -> Tenant | None: ...
    async def delete_tenant(self, tenant_id: str) -> list[ApiKey] | None: ...

    async def add_key(self, k: ApiKey) -> None: ...
    async def get_key(self, key_id: str) -> ApiKey | None: ...
    async def key_by_digest(self, digest: str) -> tuple[ApiKey, Tenant] | None: ...
    async def list_keys(self, tenant_id: str) -> list[ApiKey]: ...
    async def delete_key(self, key_id: str) -> ApiKey | None: ...

    async def admit(self, tenant_id: str, rid: str, p: Policy) -> Admission: ...
    async def release(self, tenant_id: str, rid: str) -> None: ...
    async def record_usage(
        self,
        tenant_id: str,
        tier: str,
        prompt: int,
        completion: int,
        fallback: str | None,
        p: Policy,
    ) -> None: ...
    async def usage(self, tenant_id: str, day: str | None = None) -> dict[str, int]: ...

    async def audit(self, entry: dict[str, Any]) -> None: ...
    async def audit_log(self, limit: int = 100) -> list[dict[str, Any]]: ...

    async def push_shadow(self, rec: dict[str, Any]) -> None: ...
    async def shadow_records(self, limit: int = 1000) -> list[dict[str, Any]]: ...

    async def save_rules(self, text: str, meta: dict[str, Any]) -> int: ...
    async def set_current_rules(self, version: int) -> None: ...
    async def current_rules(self) -> tuple[int, str] | None: ...
    async def rules_versions(self) -> list[dict[str, Any]]: ...
    async def rules_text(self, version: int) -> str | None: ...

    async def publish(self, event: dict[str, Any]) -> None: ...
    def events(self) -> AsyncIterator[dict[str, Any]]: ...


def _today() -> str:
    return time.strftime("%Y%m%d", time.gmtime())


class MemoryStore:
    """Everything in this process; nothing survives a restart."""

    def __init__(self) -> None:
        self._tenants: dict[str, Tenant] = {}
        self._keys: dict[str, ApiKey] = {}
        self._by_digest: dict[str, str] = {}
        self._usage: dict[tuple[str, str], dict[str, int]] = {}
        self._audit: list[dict[str, Any]] = []
        self._shadow: list[dict[str, Any]] = []
        self._rules: list[tuple[str, dict[str, Any]]] = []
        self._current: int | None = None
        self._limiter = LocalLimiter()
        self._listeners: list[asyncio.Queue[dict[str, Any]]] = []
        self._lock = asyncio.Lock()

    async def ping(self) -> bool:
        return True

    async def close(self) -> None:
        return None

    async def create_tenant(self, t: Tenant) -> None:
        self._tenants[t.id] = t

    async def get_tenant(self, tenant_id: str) -> Tenant | None:
        return self._tenants.get(tenant_id)

    async def list_tenants(self) -> list[Tenant]:
        return sorted(self._tenants.values(), key=lambda t: t.created_at)

    async def update_tenant(
        self, tenant_id: str, change: Callable[[Tenant], Tenant]
    ) -> Tenant | None:
        async with self._lock:
            t = self._tenants.get(tenant_id)
            if t is None:
                return None
            new = change(t).model_copy(update={"version": t.version + 1, "updated_at": time.time()})
            self._tenants[tenant_id] = new
            return new

    async def delete_tenant(self, tenant_id: str) -> list[ApiKey] | None:
        if self._tenants.pop(tenant_id, None) is None:
            return None
        keys = [k for k in self._keys.values() if k.tenant_id == tenant_id]
        for k in keys:
            await self.delete_key(k.id)
        return keys

    async def add_key(self, k: ApiKey) -> None:
        self._keys[k.id] = k
        self._by_digest[k.digest] = k.id

    async def get_key(self, key_id: str) -> ApiKey | None:
        return self._keys.get(key_id)

    async def key_by_digest(self, digest: str) -> tuple[ApiKey, Tenant] | None:
        kid = self._by_digest.get(digest)
        k = self._keys.get(kid) if kid else None
        t = self._tenants.get(k.tenant_id) if k else None
        return (k, t) if k and t else None

    async def list_keys(self, tenant_id: str) -> list[ApiKey]:
        return [k for k in self._keys.values() if k.tenant_id == tenant_id]

    async def delete_key(self, key_id: str) -> ApiKey | None:
        k = self._keys.pop(key_id, None)
        if k is not None:
            self._by_digest.pop(k.digest, None)
        return k

    async def admit(self, tenant_id: str, rid: str, p: Policy) -> Admission:
        return self._limiter.admit(tenant_id, rid, p)

    async def release(self, tenant_id: str, rid: str) -> None:
        self._limiter.release(tenant_id, rid)

    async def record_usage(
        self,
        tenant_id: str,
        tier: str,
        prompt: int,
        completion: int,
        fallback: str | None,
        p: Policy,
    ) -> None:
        u = self._usage.setdefault((tenant_id, _today()), {})
        for k, n in _usage_fields(tier, prompt, completion, fallback):
            u[k] = u.get(k, 0) + n
        self._limiter.debit(tenant_id, prompt + completion, p)

    async def usage(self, tenant_id: str, day: str | None = None) -> dict[str, int]:
        return dict(self._usage.get((tenant_id, day or _today()), {}))

    async def audit(self, entry: dict[str, Any]) -> None:
        self._audit.append(entry)
        del self._audit[:-AUDIT_MAX]

    async def audit_log(self, limit: int = 100) -> list[dict[str, Any]]:
        return list(reversed(self._audit[-limit:]))

    async def push_shadow(self, rec: dict[str, Any]) -> None:
        self._shadow.append(rec)
        del self._shadow[:-SHADOW_MAX]

    async def shadow_records(self, limit: int = 1000) -> list[dict[str, Any]]:
        return list(reversed(self._shadow[-limit:]))

    async def save_rules(self, text: str, meta: dict[str, Any]) -> int:
        self._rules.append((text, meta))
        return len(self._rules)

    async def set_current_rules(self, version: int) -> None:
        self._current = version

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

    async def publish(self, event: dict[str, Any]) -> None:
        for q in self._listeners:
            q.put_nowait(event)

    async def events(self) -> AsyncIterator[dict[str, Any]]:
        q: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._listeners.append(q)
        try:
            while True:
                yield await q.get()
        finally:
            self._listeners.remove(q)


def _usage_fields(
    tier: str, prompt: int, completion: int, fallback: str | None
) -> list[tuple[str, int]]:
    out = [
        ("requests", 1),
        (f"tokens:{tier}", prompt + completion),
        ("prompt_tokens", prompt),
        ("completion_tokens", completion),
    ]
    if fallback:
        out.append((f"fallbacks:{fallback}", 1))
    return out


class RedisStore:
    """The shared store. ``timeout`` bounds every call: a slow Redis is a down Redis."""

    def __init__(self, url: str, prefix: str = "gw:", timeout: float = 0.5):
        import redis.asyncio as redis

        self._r = redis.Redis.from_url(
            url, socket_timeout=timeout, socket_connect_timeout=timeout, health_check_interval=5
        )
        self._p = prefix
        self._timeout = timeout
        self._admit = self._r.register_script(ADMIT_LUA)
        self._debit = self._r.register_script(DEBIT_LUA)
        self._channel = f"{prefix}events"

    # -- plumbing ---------------------------------------------------------------------------
    def _k(self, *parts: str) -> str:
        return self._p + ":".join(parts)

    def _t(self, tenant_id: str, what: str) -> str:
        return f"{self._p}{{{tenant_id}}}:{what}"

    async def _call(self, coro: Any) -> Any:
        import redis.exceptions as rexc

        try:
            async with asyncio.timeout(self._timeout * 2):
                return await coro
        except (rexc.ConnectionError, rexc.TimeoutError, TimeoutError, OSError) as e:
            raise StoreUnavailable(str(e) or type(e).__name__) from None

    async def ping(self) -> bool:
        try:
            return bool(await self._call(self._r.ping()))
        except StoreUnavailable:
            return False

    async def close(self) -> None:
        await self._r.aclose()

    async def delete_prefix(self) -> None:
        """Remove everything under this store's prefix (tests)."""
        async for key in self._r.scan_iter(match=self._p + "*", count=500):
            await self._r.delete(key)

    # -- tenants ----------------------------------------------------------------------------
    async def create_tenant(self, t: Tenant) -> None:
        pipe = self._r.pipeline(transaction=True)
        pipe.set(self._t(t.id, "tenant"), t.model_dump_json())
        pipe.sadd(self._k("tenants"), t.id)
        await self._call(pipe.execute())

    async def get_tenant(self, tenant_id: str) -> Tenant | None:
        raw = await self._call(self._r.get(self._t(tenant_id, "tenant")))
        return Tenant.model_validate_json(raw) if raw else None

    async def list_tenants(self) -> list[Tenant]:
        ids = sorted(i.decode() for i in await self._call(self._r.smembers(self._k("tenants"))))
        if not ids:
            return []
        raws = await self._call(self._r.mget([self._t(i, "tenant") for i in ids]))
        ts = [Tenant.model_validate_json(r) for r in raws if r]
        return sorted(ts, key=lambda t: t.created_at)

    async def update_tenant(
        self, tenant_id: str, change: Callable[[Tenant], Tenant]
    ) -> Tenant | None:
        import redis.exceptions as rexc

        key = self._t(tenant_id, "tenant")
        for _ in range(50):
            try:
                async with self._r.pipeline(transaction=True) as pipe:
                    await self._call(pipe.watch(key))
                    raw = await self._call(pipe.get(key))
                    if raw is None:
                        return None
                    old = Tenant.model_validate_json(raw)
                    new = change(old).model_copy(
                        update={"version": old.version + 1, "updated_at": time.time()}
                    )
                    pipe.multi()  # type: ignore[no-untyped-call]
                    pipe.set(key, new.model_dump_json())
                    await self._call(pipe.execute())
                    return new
            except rexc.WatchError:
                await asyncio.sleep(0.001)
        raise Conflict(f"tenant {tenant_id} is being changed too often; try again")

    async def delete_tenant(self, tenant_id: str) -> list[ApiKey] | None:
        if await self.get_tenant(tenant_id) is None:
            return None
        keys = await self.list_keys(tenant_id)
        for k in keys:
            await self.delete_key(k.id)
        pipe = self._r.pipeline(transaction=True)
        pipe.delete(self._t(tenant_id, "tenant"), self._t(tenant_id, "keys"))
        pipe.srem(self._k("tenants"), tenant_id)
        await self._call(pipe.execute())
        return keys

    # -- keys -------------------------------------------------------------------------------
    async def add_key(self, k: ApiKey) -> None:
        pipe = self._r.pipeline(transaction=True)
        pipe.set(self._k("key", k.digest), k.model_dump_json())
        pipe.set(self._k("keyid", k.id), k.digest)
        pipe.sadd(self._t(k.tenant_id, "keys"), k.id)
        await self._call(pipe.execute())

    async def get_key(self, key_id: str) -> ApiKey | None:
        digest = await self._call(self._r.get(self._k("keyid", key_id)))
        if digest is None:
            return None
        raw = await self._call(self._r.get(self._k("key", digest.decode())))
        return ApiKey.model_validate_json(raw) if raw else None

    async def key_by_digest(self, digest: str) -> tuple[ApiKey, Tenant] | None:
        raw = await self._call(self._r.get(self._k("key", digest)))
        if raw is None:
            return None
        k = ApiKey.model_validate_json(raw)
        t = await self.get_tenant(k.tenant_id)
        return (k, t) if t else None

    async def list_keys(self, tenant_id: str) -> list[ApiKey]:
        ids = await self._call(self._r.smembers(self._t(tenant_id, "keys")))
        keys = [await self.get_key(i.decode()) for i in sorted(ids)]
        return [k for k in keys if k is not None]

    async def delete_key(self, key_id: str) -> ApiKey | None:
        k = await self.get_key(key_id)
        if k is None:
            return None
        pipe = self._r.pipeline(transaction=True)
        pipe.delete(self._k("key", k.digest), self._k("keyid", k.id))
        pipe.srem(self._t(k.tenant_id, "keys"), k.id)
        await self._call(pipe.execute())
        return k

    # -- limits and usage -------------------------------------------------------------------
    async def admit(self, tenant_id: str, rid: str, p: Policy) -> Admission:
        now = time.time()
        budget_key = self._t(
            tenant_id,
            "budget:" + budget_period(p.token_budget.period if p.token_budget else "day", now),
        )
        keys = [
            self._t(tenant_id, "rpm"),
            self._t(tenant_id, "tpm"),
            self._t(tenant_id, "inflight"),
            budget_key,
        ]
        args: list[str | int] = [
            int(now * 1000),
            p.requests_per_minute or 0,
            p.tokens_per_minute or 0,
            p.max_concurrent_requests or 0,
            p.token_budget.tokens if p.token_budget else 0,
            rid,
            SLOT_TTL_MS,
        ]
        res = await self._call(self._admit(keys=keys, args=args))
        return admission_from_lua(res, p)

    async def release(self, tenant_id: str, rid: str) -> None:
        await self._call(self._r.zrem(self._t(tenant_id, "inflight"), rid))

    async def record_usage(
        self,
        tenant_id: str,
        tier: str,
        prompt: int,
        completion: int,
        fallback: str | None,
        p: Policy,
    ) -> None:
        now = time.time()
        period = p.token_budget.period if p.token_budget else "day"
        pipe = self._r.pipeline(transaction=False)
        ukey = self._t(tenant_id, "usage:" + _today())
        for k, n in _usage_fields(tier, prompt, completion, fallback):
            pipe.hincrby(ukey, k, n)
        pipe.expire(ukey, 40 * 86400)
        await self._call(pipe.execute())
        ttl = 2 * 86400 if period == "day" else 40 * 86400
        await self._call(
            self._debit(
                keys=[
                    self._t(tenant_id, "tpm"),
                    self._t(tenant_id, "budget:" + budget_period(period, now)),
                ],
                args=[int(now * 1000), p.tokens_per_minute or 0, prompt + completion, ttl],
            )
        )

    async def usage(self, tenant_id: str, day: str | None = None) -> dict[str, int]:
        raw = await self._call(self._r.hgetall(self._t(tenant_id, "usage:" + (day or _today()))))
        return {k.decode(): int(v) for k, v in raw.items()}

    # -- audit ------------------------------------------------------------------------------
    async def audit(self, entry: dict[str, Any]) -> None:
        pipe = self._r.pipeline(transaction=False)
        pipe.lpush(self._k("audit"), orjson.dumps(entry))
        pipe.ltrim(self._k("audit"), 0, AUDIT_MAX - 1)
        await self._call(pipe.execute())

    async def audit_log(self, limit: int = 100) -> list[dict[str, Any]]:
        raws = await self._call(self._r.lrange(self._k("audit"), 0, limit - 1))
        return [orjson.loads(r) for r in raws]

    async def push_shadow(self, rec: dict[str, Any]) -> None:
        pipe = self._r.pipeline(transaction=False)
        pipe.lpush(self._k("shadow"), orjson.dumps(rec))
        pipe.ltrim(self._k("shadow"), 0, SHADOW_MAX - 1)
        await self._call(pipe.execute())

    async def shadow_records(self, limit: int = 1000) -> list[dict[str, Any]]:
        raws = await self._call(self._r.lrange(self._k("shadow"), 0, limit - 1))
        return [orjson.loads(r) for r in raws]

    # -- rules ------------------------------------------------------------------------------
    async def save_rules(self, text: str, meta: dict[str, Any]) -> int:
        version = int(await self._call(self._r.incr(self._k("rules", "seq"))))
        pipe = self._r.pipeline(transaction=True)
        pipe.set(self._k("rules", "v", str(version)), text)
        pipe.rpush(self._k("rules", "meta"), orjson.dumps({"version": version, **meta}))
        await self._call(pipe.execute())
        return version

    async def set_current_rules(self, version: int) -> None:
        await self._call(self._r.set(self._k("rules", "current"), version))

    async def current_rules(self) -> tuple[int, str] | None:
        cur = await self._call(self._r.get(self._k("rules", "current")))
        if cur is None:
            return None
        text = await self.rules_text(int(cur))
        return (int(cur), text) if text is not None else None

    async def rules_versions(self) -> list[dict[str, Any]]:
        cur = await self._call(self._r.get(self._k("rules", "current")))
        raws = await self._call(self._r.lrange(self._k("rules", "meta"), -RULES_MAX, -1))
        out = [orjson.loads(r) for r in raws]
        for m in out:
            m["current"] = cur is not None and m["version"] == int(cur)
        return list(out)

    async def rules_text(self, version: int) -> str | None:
        raw = await self._call(self._r.get(self._k("rules", "v", str(version))))
        return raw.decode() if raw is not None else None

    # -- events -----------------------------------------------------------------------------
    async def publish(self, event: dict[str, Any]) -> None:
        await self._call(self._r.publish(self._channel, orjson.dumps(event)))

    async def events(self) -> AsyncIterator[dict[str, Any]]:
        """Events from every replica; reconnects by itself (the caller resyncs on a gap)."""
        while True:
            pubsub = self._r.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(self._channel)
                yield {"type": "resync"}  # (re)subscribed: whatever we missed, re-read it
                while True:
                    msg = await pubsub.get_message(timeout=1.0)
                    if msg is not None and msg.get("type") == "message":
                        yield orjson.loads(msg["data"])
            except Exception:  # any trouble: say so, reconnect, then the consumer resyncs
                yield {"type": "store_down"}
                await asyncio.sleep(0.5)
            finally:
                with contextlib.suppress(Exception):
                    await pubsub.aclose()  # type: ignore[no-untyped-call]
