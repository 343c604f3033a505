"""The Redis cache store, shared by every gateway replica.

A tenant's cache is four keys, all hash-tagged ``{tenant}`` (one cluster slot, so every
script declares every key it touches):

* ``<p>{t}:cache:data``   hash: entry key -> encoded entry
* ``<p>{t}:cache:exp``    sorted set: entry key -> expiry (ms); the eviction order
* ``<p>{t}:cache:meta``   hash: ``bytes``, the size of ``data``'s values
* ``<p>{t}:cache:scopes`` set: the semantic scopes, each a hash ``<p>{t}:cache:sem:<scope>``

A put is one Lua call: drop expired entries, then the ones closest to expiry until the new
one fits under ``tenant_max_bytes``, store, refresh the keys' own expiry (a tenant whose
cache goes unused leaves nothing behind). A get is one Lua call too (an expired entry is a
miss, and dropped). Every call is bounded by the store's timeout.
"""

from __future__ import annotations

import asyncio
from typing import Any

from gateway.cache.backend import Put, Usage
from gateway.errors import StoreUnavailable
from gateway.rules.cache import MAX_TTL_S

# KEYS: data, exp, meta   ARGV: key, now_ms
GET_LUA = """
local exp = redis.call('ZSCORE', KEYS[2], ARGV[1])
if not exp then return false end
if tonumber(exp) <= tonumber(ARGV[2]) then
  local n = redis.call('HSTRLEN', KEYS[1], ARGV[1])
  redis.call('HDEL', KEYS[1], ARGV[1])
  redis.call('ZREM', KEYS[2], ARGV[1])
  redis.call('HINCRBY', KEYS[3], 'bytes', -n)
  return false
end
return redis.call('HGET', KEYS[1], ARGV[1])
"""

# KEYS: data, exp, meta   ARGV: key, value, now_ms, expires_ms, max_bytes, keep_ms
# returns {evicted, freed, size}; size -1: the value alone is over max_bytes
PUT_LUA = """
local key, val = ARGV[1], ARGV[2]
local now, maxb = tonumber(ARGV[3]), tonumber(ARGV[5])
if #val > maxb then return {0, 0, -1} end
local size = tonumber(redis.call('HGET', KEYS[3], 'bytes') or '0')
local freed, evicted = 0, 0
local function drop(m)
  local n = redis.call('HSTRLEN', KEYS[1], m)
  redis.call('HDEL', KEYS[1], m)
  redis.call('ZREM', KEYS[2], m)
  size = size - n
  freed = freed + n
end
for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, 256)) do
  drop(m)
end
if redis.call('HEXISTS', KEYS[1], key) == 1 then drop(key) end
while size + #val > maxb do
  local first = redis.call('ZRANGE', KEYS[2], 0, 0)
  if #first == 0 then size = 0 break end
  drop(first[1])
  evicted = evicted + 1
end
redis.call('HSET', KEYS[1], key, val)
redis.call('ZADD', KEYS[2], tonumber(ARGV[4]), key)
size = size + #val
redis.call('HSET', KEYS[3], 'bytes', size)
for i = 1, 3 do redis.call('PEXPIRE', KEYS[i], tonumber(ARGV[6])) end
return {evicted, freed, size}
"""

# KEYS: the scope's hash, scopes set   ARGV: key, record, expires_ms, keep, keep_ms, scope key
ADD_VECTOR_LUA = """
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3] .. ':' .. ARGV[2])
redis.call('SADD', KEYS[2], ARGV[6])
local keep = tonumber(ARGV[4])
if redis.call('HLEN', KEYS[1]) > keep then
  local all = redis.call('HGETALL', KEYS[1])
  local order = {}
  for i = 1, #all, 2 do
    local at = string.find(all[i + 1], ':', 1, true)
    order[#order + 1] = {tonumber(string.sub(all[i + 1], 1, at - 1)), all[i]}
  end
  table.sort(order, function(a, b) return a[1] < b[1] end)
  for i = 1, #order - keep do redis.call('HDEL', KEYS[1], order[i][2]) end
end
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[5]))
redis.call('PEXPIRE', KEYS[2], tonumber(ARGV[5]))
return 1
"""

_KEEP_MS = int(MAX_TTL_S * 1000) + 60_000


class RedisBackend:
    name = "redis"

    def __init__(self, client: Any, prefix: str, timeout: float, tenant_max_bytes: int):
        self._r = client
        self._p = prefix
        self._timeout = timeout
        self.tenant_max_bytes = tenant_max_bytes
        self._get = client.register_script(GET_LUA)
        self._put = client.register_script(PUT_LUA)
        self._add = client.register_script(ADD_VECTOR_LUA)

    def _k(self, tenant: str, what: str) -> str:
        return f"{self._p}{{{tenant}}}:cache:{what}"

    def _keys(self, tenant: str) -> list[str]:
        return [self._k(tenant, "data"), self._k(tenant, "exp"), self._k(tenant, "meta")]

    async def _call(self, coro: Any) -> Any:
        import redis.exceptions as rexc

        try:
            async with asyncio.timeout(self._timeout * 2):
                return await coro
        except (rexc.ConnectionError, rexc.TimeoutError, TimeoutError, OSError) as e:
            raise StoreUnavailable(str(e) or type(e).__name__) from None

    async def get(self, tenant: str, key: str, now: float) -> bytes | None:
        raw = await self._call(self._get(self._keys(tenant), [key, int(now * 1000)]))
        return bytes(raw) if raw else None

    async def put(self, tenant: str, key: str, value: bytes, expires_at: float) -> Put:
        import time

        args = [
            key,
            value,
            int(time.time() * 1000),
            int(expires_at * 1000),
            self.tenant_max_bytes,
            _KEEP_MS,
        ]
        evicted, freed, size = await self._call(self._put(self._keys(tenant), args))
        return Put(int(evicted), int(freed), int(size))

    async def delete(self, tenant: str, key: str) -> bool:
        data, exp, meta = self._keys(tenant)
        n = await self._call(self._r.hstrlen(data, key))
        if not n:
            return False
        pipe = self._r.pipeline(transaction=True)
        pipe.hdel(data, key).zrem(exp, key).hincrby(meta, "bytes", -int(n))
        await self._call(pipe.execute())
        return True

    async def purge(self, tenant: str) -> int:
        data, exp, meta = self._keys(tenant)
        scopes_key = self._k(tenant, "scopes")
        n = await self._call(self._r.zcard(exp))
        scopes = await self._call(self._r.smembers(scopes_key))
        sem = [self._k(tenant, "sem:" + s.decode()) for s in scopes]
        await self._call(self._r.delete(data, exp, meta, scopes_key, *sem))
        return int(n)

    async def usage(self, tenant: str) -> Usage:
        _, exp, meta = self._keys(tenant)
        pipe = self._r.pipeline(transaction=False)
        pipe.zcard(exp).hget(meta, "bytes").smembers(self._k(tenant, "scopes"))
        n, size, scopes = await self._call(pipe.execute())
        pipe = self._r.pipeline(transaction=False)
        for s in scopes:
            pipe.hlen(self._k(tenant, "sem:" + s.decode()))
        vectors = sum(await self._call(pipe.execute())) if scopes else 0
        return Usage(int(n), int(size or 0), self.tenant_max_bytes, int(vectors))

    async def entries(self, tenant: str, limit: int) -> list[tuple[str, bytes]]:
        data, exp, _ = self._keys(tenant)
        keys = await self._call(self._r.zrange(exp, 0, limit - 1, desc=True))
        if not keys:
            return []
        values = await self._call(self._r.hmget(data, keys))
        return [(k.decode(), bytes(v)) for k, v in zip(keys, values, strict=True) if v]

    async def add_vector(
        self, tenant: str, scope: str, key: str, record: bytes, expires_at: float, keep: int
    ) -> None:
        keys = [self._k(tenant, "sem:" + scope), self._k(tenant, "scopes")]
        args = [key, record, int(expires_at * 1000), keep, _KEEP_MS, scope]
        await self._call(self._add(keys, args))

    async def vectors(self, tenant: str, scope: str, now: float) -> list[tuple[str, bytes]]:
        raw = await self._call(self._r.hgetall(self._k(tenant, "sem:" + scope)))
        out, now_ms = [], now * 1000
        for k, v in raw.items():
            at, _, rec = bytes(v).partition(b":")
            if at and float(at) > now_ms:
                out.append((k.decode(), rec))
        return out
