"""The Redis cache store, shared by every gateway replica.

A tenant's cache is five keys, all hash-tagged ``{tenant}`` (one cluster slot, and every
script declares every key it touches):

* ``<p>{t}:cache:data``  hash: entry key -> encoded entry
* ``<p>{t}:cache:exp``   sorted set: entry key -> expiry (ms); the eviction order
* ``<p>{t}:cache:meta``  hash: ``bytes``, the size of ``data``'s and ``vec``'s values;
  ``seq``, the semantic index's insertion counter
* ``<p>{t}:cache:vec``   hash: entry key -> its semantic record (``<member>\n<record>``)
* ``<p>{t}:cache:idx``   sorted set, by name only: ``<scope>:<seq>:<entry key>``, so a
  scope's newest records are one ``ZREVRANGEBYLEX`` away

A semantic record belongs to the entry it points at: its bytes count in the tenant's
bound, and it goes with the entry (evicted, expired, deleted, purged); a scope keeps the
records of its newest ``keep`` entries. A put is one Lua call: drop expired entries, then
the ones closest to expiry until the new one fits under ``tenant_max_bytes``, store, and
extend the keys' own expiry to the newest entry's (a tenant whose cache goes unused leaves
nothing behind once its answers have expired). Gets, deletes, index writes and reads are
one Lua call each (an expired entry is a miss, and dropped). Every call is bounded by the
store's timeout.
"""

from __future__ import annotations

import asyncio
from typing import Any

from gateway.cache.backend import Put, Usage
from gateway.errors import StoreUnavailable

# every script: KEYS data, exp, meta, vec, idx; `size` and `freed` are the script's locals
_DROP = """
local size, freed = tonumber(redis.call('HGET', KEYS[3], 'bytes') or '0'), 0
local function unindex(m)
  local v = redis.call('HGET', KEYS[4], m)
  if not v then return end
  redis.call('ZREM', KEYS[5], string.sub(v, 1, string.find(v, '\\n', 1, true) - 1))
  redis.call('HDEL', KEYS[4], m)
  size = size - #v
  freed = freed + #v
end
local function drop(m)
  local n = redis.call('HSTRLEN', KEYS[1], m)
  redis.call('HDEL', KEYS[1], m)
  redis.call('ZREM', KEYS[2], m)
  size = size - n
  freed = freed + n
  unindex(m)
end
"""

# ARGV: key, now_ms
GET_LUA = (
    _DROP
    + """
local exp = redis.call('ZSCORE', KEYS[2], ARGV[1])
if not exp then return false end
if tonumber(exp) <= tonumber(ARGV[2]) then
  drop(ARGV[1])
  redis.call('HSET', KEYS[3], 'bytes', size)
  return false
end
return redis.call('HGET', KEYS[1], ARGV[1])
"""
)

# ARGV: key
DELETE_LUA = (
    _DROP
    + """
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
drop(ARGV[1])
redis.call('HSET', KEYS[3], 'bytes', size)
return 1
"""
)

# ARGV: key, value, now_ms, expires_ms, max_bytes, slack_ms
# returns {evicted, freed, size}; size -1: the value alone is over max_bytes
PUT_LUA = (
    _DROP
    + """
local key, val = ARGV[1], ARGV[2]
local now, maxb = tonumber(ARGV[3]), tonumber(ARGV[5])
if #val > maxb then return {0, 0, -1} end
local evicted = 0
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
local ttl = tonumber(ARGV[4]) - now + tonumber(ARGV[6])
for i = 1, 5 do
  if redis.call('PTTL', KEYS[i]) < ttl then redis.call('PEXPIRE', KEYS[i], ttl) end
end
return {evicted, freed, size}
"""
)

# ARGV: key, record, scope, keep, max_bytes, now_ms; 1: indexed, 0: the entry is gone
# (or its record cannot fit beside it)
ADD_VECTOR_LUA = (
    _DROP
    + """
local key, scope, keep, maxb = ARGV[1], ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
local exp = redis.call('ZSCORE', KEYS[2], key)
if not exp or tonumber(exp) <= tonumber(ARGV[6]) then return 0 end
unindex(key)
local seq = redis.call('HINCRBY', KEYS[3], 'seq', 1)
local member = scope .. ':' .. string.format('%012d', seq) .. ':' .. key
local val = member .. '\\n' .. ARGV[2]
if redis.call('HSTRLEN', KEYS[1], key) + #val > maxb then
  redis.call('HSET', KEYS[3], 'bytes', size)
  return 0
end
while size + #val > maxb do
  local two = redis.call('ZRANGE', KEYS[2], 0, 1)
  local victim = two[1] ~= key and two[1] or two[2]
  if not victim then break end
  drop(victim)
end
redis.call('HSET', KEYS[4], key, val)
redis.call('ZADD', KEYS[5], 0, member)
size = size + #val
local lo, hi = '[' .. scope .. ':', '[' .. scope .. ';'
local over = redis.call('ZLEXCOUNT', KEYS[5], lo, hi) - keep
if over > 0 then
  for _, m in ipairs(redis.call('ZRANGEBYLEX', KEYS[5], lo, hi, 'LIMIT', 0, over)) do
    unindex(string.sub(m, #scope + 15))
  end
end
redis.call('HSET', KEYS[3], 'bytes', size)
local ttl = redis.call('PTTL', KEYS[1])
if ttl > 0 then
  redis.call('PEXPIRE', KEYS[4], ttl)
  redis.call('PEXPIRE', KEYS[5], ttl)
end
return 1
"""
)

# ARGV: scope, now_ms, limit; the newest records first: {key, record, key, record, ...}
VECTORS_LUA = (
    _DROP
    + """
local scope, now = ARGV[1], tonumber(ARGV[2])
local out, gone = {}, false
local members = redis.call(
  'ZREVRANGEBYLEX', KEYS[5], '[' .. scope .. ';', '[' .. scope .. ':', 'LIMIT', 0, ARGV[3])
for _, m in ipairs(members) do
  local key = string.sub(m, #scope + 15)
  local exp = redis.call('ZSCORE', KEYS[2], key)
  if not exp or tonumber(exp) <= now then
    drop(key)
    gone = true
  else
    local v = redis.call('HGET', KEYS[4], key)
    out[#out + 1] = key
    out[#out + 1] = string.sub(v, string.find(v, '\\n', 1, true) + 1)
  end
end
if gone then redis.call('HSET', KEYS[3], 'bytes', size) end
return out
"""
)

SLACK_MS = 60_000  # the keys outlive the newest entry's expiry by this


class RedisBackend:
    name = "redis"

    def __init__(self, client: Any, prefix: str, timeout: float, tenant_max_bytes: int):
        self._r = client
        self._p = prefix
        self._timeout = timeout
        self.tenant_max_bytes = tenant_max_bytes
        self._get = client.register_script(GET_LUA)
        self._put = client.register_script(PUT_LUA)
        self._del = client.register_script(DELETE_LUA)
        self._add = client.register_script(ADD_VECTOR_LUA)
        self._vec = client.register_script(VECTORS_LUA)

    def _k(self, tenant: str, what: str) -> str:
        return f"{self._p}{{{tenant}}}:cache:{what}"

    def _keys(self, tenant: str) -> list[str]:
        return [self._k(tenant, k) for k in ("data", "exp", "meta", "vec", "idx")]

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

        now_ms = int(time.time() * 1000)
        args = [key, value, now_ms, int(expires_at * 1000), self.tenant_max_bytes, SLACK_MS]
        evicted, freed, size = await self._call(self._put(self._keys(tenant), args))
        return Put(int(evicted), int(freed), int(size))

    async def delete(self, tenant: str, key: str) -> bool:
        return bool(await self._call(self._del(self._keys(tenant), [key])))

    async def purge(self, tenant: str) -> int:
        keys = self._keys(tenant)
        n = await self._call(self._r.zcard(keys[1]))
        # and an older version's index keys (a set of scopes, a hash per scope), if any
        old = self._k(tenant, "scopes")
        scopes = await self._call(self._r.smembers(old))
        sem = [self._k(tenant, "sem:" + s.decode()) for s in scopes]
        await self._call(self._r.delete(*keys, old, *sem))
        return int(n)

    async def usage(self, tenant: str) -> Usage:
        _, exp, meta, _, idx = self._keys(tenant)
        pipe = self._r.pipeline(transaction=False)
        pipe.zcard(exp).hget(meta, "bytes").zcard(idx)
        n, size, vectors = await self._call(pipe.execute())
        return Usage(int(n), int(size or 0), self.tenant_max_bytes, int(vectors))

    async def entries(self, tenant: str, limit: int) -> list[tuple[str, bytes]]:
        data, exp = self._keys(tenant)[:2]
        keys = await self._call(self._r.zrange(exp, 0, limit - 1, desc=True))
        if not keys:
            return []
        values = await self._call(self._r.hmget(data, keys))
        return [(k.decode(), bytes(v)) for k, v in zip(keys, values, strict=True) if v]

    async def add_vector(self, tenant: str, scope: str, key: str, record: bytes, keep: int) -> bool:
        import time

        now_ms = int(time.time() * 1000)
        args = [key, record, scope, keep, self.tenant_max_bytes, now_ms]
        return bool(await self._call(self._add(self._keys(tenant), args)))

    async def vectors(
        self, tenant: str, scope: str, now: float, limit: int
    ) -> list[tuple[str, bytes]]:
        args = [scope, int(now * 1000), limit]
        raw = await self._call(self._vec(self._keys(tenant), args))
        pairs = [(bytes(raw[i]).decode(), bytes(raw[i + 1])) for i in range(0, len(raw), 2)]
        return pairs[::-1]  # oldest first, as the lookup reads them
