"""A process's concurrency slots made what it holds: one sync, in Redis (:data:`SYNC_LUA`)
and in process (:func:`sync`). See :mod:`gateway.access.leases` for when a process syncs.

A slot is named ``<owner>:<request>``; a sync of one owner renews the slots it holds, adds
them back where the store lost them when asked to (``readd``: after the store failed), and
removes the owner's other slots except those whose admission is in flight: their requests
ended and their release never reached the store. Other owners' slots are left alone.
"""

from __future__ import annotations

from collections.abc import Collection

SLOT_LEASE_MS = 10_000  # a slot its holder stopped renewing is free again after this
SLOT_RENEW_S = 2.5  # how often a holder renews its slots (four times per lease)

# KEYS: the concurrency zset
# ARGV: now_ms, slot lease ms, the owner's prefix ("<owner>:"), re-add (1: a slot held is
#       added back if the store lost it; 0: only renewed), how many slots are held (n), the
#       n held slots, then the slots whose admission is in flight (kept, neither added nor
#       renewed: the admission adds them)
# The owner's slots that are neither held nor being admitted are removed: their requests
# ended, and their release never reached this store. Returns how many were removed.
SYNC_LUA = """
local key, now, lease = KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2])
local owner, readd, n = ARGV[3], ARGV[4] == '1', tonumber(ARGV[5])
local keep = {}
for i = 6, #ARGV do keep[ARGV[i]] = true end
redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
local gone = 0
for _, m in ipairs(redis.call('ZRANGE', key, 0, -1)) do
  if string.sub(m, 1, #owner) == owner and not keep[m] then
    redis.call('ZREM', key, m)
    gone = gone + 1
  end
end
for i = 6, 5 + n do
  if readd then
    redis.call('ZADD', key, now + lease, ARGV[i])
  else
    redis.call('ZADD', key, 'XX', now + lease, ARGV[i])
  end
end
if redis.call('EXISTS', key) == 1 then redis.call('PEXPIRE', key, lease) end
return gone
"""


def sync(
    slots: dict[str, float],
    owner: str,
    held: Collection[str],
    admitting: Collection[str],
    readd: bool,
    now: float,
) -> int:
    """:data:`SYNC_LUA` on one tenant's ``slots`` (name -> expiry, epoch s): expired ones go,
    ``owner``'s not ``held`` nor ``admitting`` go, ``held`` ones get a new lease; how many
    of the owner's went."""
    until = now + SLOT_LEASE_MS / 1000
    for r in [r for r, exp in slots.items() if exp < now]:
        del slots[r]
    stale = [r for r in slots if r.startswith(owner) and r not in held and r not in admitting]
    for r in stale:
        del slots[r]
    for r in held:
        if readd or r in slots:
            slots[r] = until
    return len(stale)
