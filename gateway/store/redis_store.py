"""The Redis :class:`gateway.store.base.Store`, shared by every gateway replica.

See :mod:`gateway.store.base` for the key layout and the consistency rules.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson

from gateway.errors import StoreUnavailable
from gateway.store.base import (
    AUDIT_MAX,
    RULES_MAX,
    SHADOW_MAX,
    Conflict,
    Used,
    today,
    usage_fields,
)
from gateway.tenancy.limits import (
    ADMIT_LUA,
    DEBIT_LUA,
    NO_RESERVE,
    SLOT_TTL_MS,
    Admission,
    Hold,
    Reserve,
    admission_from_lua,
    budget_period,
    hold_for,
    period_ttl,
)
from gateway.tenancy.tenants import ApiKey, Policy, Tenant


class RedisStore:
    """The shared store. ``timeout`` bounds every call: a slow Redis is a down Redis."""

    def __init__(
        self,
        url: str,
        prefix: str = "gw:",
        timeout: float = 0.5,
        max_connections: int = 128,
        pool_wait: float | None = None,
    ):
        import redis.asyncio as redis
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff
        from redis.exceptions import ConnectionError as RedisConnectionError

        # A sized pool that waits (up to ``pool_wait``) for a free connection: redis-py's
        # default fails at once when full, which made a busy Redis look down. A command on
        # a pooled connection that a restarted Redis dropped reconnects once (otherwise the
        # first use of each stale connection fails, a fresh key's lookup included).
        self._pool_wait = timeout if pool_wait is None else pool_wait
        pool = redis.BlockingConnectionPool.from_url(
            url,
            max_connections=max_connections,
            timeout=self._pool_wait,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            health_check_interval=5,
            retry=Retry(NoBackoff(), 1),
            retry_on_error=[RedisConnectionError],
        )
        self._r = redis.Redis.from_pool(pool)  # closes the pool with the client
        self._p = prefix
        self._timeout = timeout
        self._admit = self._r.register_script(ADMIT_LUA)
        self._debit = self._r.register_script(DEBIT_LUA)
        self._channel = f"{prefix}events"

    @property
    def client(self) -> Any:
        """The Redis client (its pool), for what keeps its own keys here: the response cache."""
        return self._r

    # -- plumbing ---------------------------------------------------------------------------
    def _k(self, *parts: str) -> str:
        return self._p + ":".join(parts)

    def _t(self, tenant_id: str, what: str) -> str:
        return f"{self._p}{{{tenant_id}}}:{what}"

    async def _call(self, coro: Any) -> Any:
        import redis.exceptions as rexc

        try:
            async with asyncio.timeout(self._timeout * 2 + self._pool_wait):
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
    async def admit(
        self, tenant_id: str, rid: str, p: Policy, want: Reserve = NO_RESERVE
    ) -> Admission:
        now = time.time()
        hold = hold_for(p, want, now)
        tp = budget_period(p.token_budget.period if p.token_budget else "day", now)
        cp = budget_period(p.cost_budget.period if p.cost_budget else "day", now)
        keys = [
            self._t(tenant_id, "rpm"),
            self._t(tenant_id, "tpm"),
            self._t(tenant_id, "inflight"),
            self._t(tenant_id, "budget:" + tp),
            self._t(tenant_id, "cost:" + cp),
        ]
        args: list[str | int] = [
            int(now * 1000),
            p.requests_per_minute or 0,
            p.tokens_per_minute or 0,
            p.max_concurrent_requests or 0,
            p.token_budget.tokens if p.token_budget else 0,
            rid,
            SLOT_TTL_MS,
            round(p.cost_budget.usd * 1e6) if p.cost_budget else 0,
            hold.tokens if hold else 0,
            hold.micro_usd if hold else 0,
            period_ttl(tp),
            period_ttl(cp),
        ]
        res = await self._call(self._admit(keys=keys, args=args))
        adm = admission_from_lua(res, p)
        return dataclasses.replace(adm, hold=hold) if adm.ok and hold is not None else adm

    async def release(self, tenant_id: str, rid: str) -> None:
        await self._call(self._r.zrem(self._t(tenant_id, "inflight"), rid))

    async def record_usage(
        self,
        tenant_id: str,
        used: Used,
        p: Policy,
        hold: Hold | None = None,
    ) -> None:
        """Settle the admission's hold and count the usage against the limits, in one
        atomic script (idempotent with ``used.settle_id``: a retry after a lost reply counts
        once), then the usage statistics."""
        now = time.time()
        tp = budget_period(p.token_budget.period if p.token_budget else "day", now)
        cp = budget_period(p.cost_budget.period if p.cost_budget else "day", now)
        keys = [
            self._t(tenant_id, "tpm"),
            self._t(tenant_id, "budget:" + tp),
            self._t(tenant_id, "cost:" + cp),
            self._t(tenant_id, "budget:" + (hold.token_period if hold else tp)),
            self._t(tenant_id, "cost:" + (hold.cost_period if hold else cp)),
        ]
        args = [
            int(now * 1000),
            p.tokens_per_minute or 0,
            used.tokens,
            period_ttl(tp),
            used.micro_usd,
            period_ttl(cp),
            hold.tokens if hold else 0,
            hold.micro_usd if hold else 0,
        ]
        if used.settle_id:
            keys.append(self._t(tenant_id, "settled:" + used.settle_id))
        await self._call(self._debit(keys=keys, args=args))
        pipe = self._r.pipeline(transaction=False)
        ukey = self._t(tenant_id, "usage:" + today())
        for k, n in usage_fields(used):
            pipe.hincrby(ukey, k, n)
        pipe.expire(ukey, 40 * 86400)
        await self._call(pipe.execute())

    async def usage(self, tenant_id: str, day: str | None = None) -> dict[str, int]:
        raw = await self._call(self._r.hgetall(self._t(tenant_id, "usage:" + (day or today()))))
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
