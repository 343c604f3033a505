"""The one Redis connection every concern of :class:`gateway.store.redis_store.RedisStore`
shares: the client (one Redis, Sentinel or Cluster), the key layout, and :meth:`call`,
the only way a command reaches Redis.

``call`` bounds every command: it waits at most ``pool_wait`` for one of
``max_connections`` in-flight slots, then at most two ``timeout`` for the answer (a
connection to open or reopen once, then the command; each socket operation is itself
bounded by ``timeout``): :attr:`RedisConn.bound` in all, 1.5 s by default. Whatever goes
wrong (unreachable, timed out, read-only, out of memory, loading, busy, a moved slot, a
cluster that cannot be reached...) is one :class:`~gateway.errors.StoreUnavailable` whose
message names the reason only, never a host or a port, and counts against the breaker
(:class:`~gateway.store.health.StoreHealth`); while it is open, ``call`` refuses at once
and a probe tries Redis in the background, at once when a call was refused (an admin API
call, :data:`~gateway.store.health.PATIENT`, waits for that probe's verdict).

Key layout: every key starts with the prefix; a tenant's keys carry a ``{tenant}`` hash
tag (:meth:`RedisConn.t`), so on a Cluster every script's keys are in one slot. Writes of
several keys in other slots are pipelined: atomic (MULTI) on one Redis or a Sentinel
master, in order but not atomic on a Cluster (:meth:`RedisConn.pipeline`).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import Awaitable
from typing import Any

import redis.asyncio as aredis
import redis.exceptions as rx
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import MasterNotFoundError, Sentinel
from redis.backoff import NoBackoff

from gateway.errors import StoreUnavailable
from gateway.store.health import PATIENT, StoreHealth
from gateway.storeurl import StoreTarget

# most specific first: the reason a failed call is counted under (and said in a 503)
_REASONS: tuple[tuple[type[BaseException], str], ...] = (
    (rx.ReadOnlyError, "read-only replica"),
    (rx.OutOfMemoryError, "out of memory"),
    (rx.BusyLoadingError, "loading its data"),
    (rx.NoScriptError, "script missing"),
    (rx.MovedError, "slot moved"),
    (rx.AskError, "slot moving"),
    (rx.MasterDownError, "master down"),
    (rx.ClusterDownError, "cluster down"),
    (rx.TryAgainError, "try again"),
    (rx.AuthenticationError, "authentication failed"),
    (rx.AuthorizationError, "not authorized"),
    (MasterNotFoundError, "no master known to the sentinels"),
    (rx.MaxConnectionsError, "too many connections"),
    (rx.TimeoutError, "timed out"),
    (TimeoutError, "timed out"),
    (rx.ConnectionError, "unreachable"),
    (OSError, "unreachable"),
    (rx.RedisClusterException, "cluster unreachable"),
)
_CODE = re.compile(r"^([A-Z]{3,20})\b")  # a Redis error code: BUSY, MISCONF, NOREPLICAS...
_SPARE = 8  # connections beyond the in-flight limit: pub/sub and the probe
_PROBE_GAP_S = 0.1  # a refused call asks for a probe now, but never more often than this
_MAP_TIMEOUTS = 5  # a Cluster's first call may take this many timeouts to map it


def reason_of(e: BaseException) -> str:
    """A short, host-free name for what went wrong (a metric label, a log word)."""
    for kind, reason in _REASONS:
        if isinstance(e, kind):
            return reason
    if isinstance(e, rx.ResponseError):
        m = _CODE.match(str(e))
        return m.group(1).lower() if m else "error reply"
    return re.sub(r"[^a-z0-9_]", "", type(e).__name__.lower()) or "error"


class RedisConn:
    def __init__(
        self,
        target: StoreTarget,
        prefix: str = "gw:",
        timeout: float = 0.5,
        max_connections: int = 128,
        pool_wait: float | None = None,
        health: StoreHealth | None = None,
    ):
        self.target = target
        self.prefix = prefix
        self.timeout = timeout
        self.pool_wait = timeout if pool_wait is None else pool_wait
        self.cluster = target.kind == "cluster"
        self.health = health or StoreHealth(target.kind, span=timeout)
        self._slots = asyncio.Semaphore(max_connections)
        self._sentinel: Sentinel | None = None
        self.r: Any = self._client(max_connections + _SPARE)
        self._probe: asyncio.Task[None] | None = None
        self._wanted = asyncio.Event()  # a call was refused: probe now, not at the next tick
        self._probe_done = asyncio.Event()  # set (and replaced) after each probe
        self._next_node = 0  # the cluster node the next subscriber connects to
        self._mapped = False  # a Cluster client has mapped the cluster

    def _client(self, size: int) -> Any:
        t = self.target
        # a command on a pooled connection that a restarted Redis dropped reconnects once
        # (else the first use of each stale connection fails); nothing else is retried here
        common: dict[str, Any] = {
            "socket_timeout": self.timeout,
            "socket_connect_timeout": self.timeout,
            "retry": Retry(NoBackoff(), 1),
            "max_connections": size,
        }
        if t.kind == "single":
            pool = aredis.ConnectionPool.from_url(
                t.url, health_check_interval=5, retry_on_error=[rx.ConnectionError], **common
            )
            return aredis.Redis.from_pool(pool)  # closes the pool with the client
        common |= {"username": t.username, "password": t.password}
        if t.kind == "cluster":
            nodes = [ClusterNode(h, p) for h, p in t.nodes]
            return RedisCluster(startup_nodes=nodes, require_full_coverage=False, **common)
        timeouts = {"socket_timeout": self.timeout, "socket_connect_timeout": self.timeout}
        make: Any = Sentinel  # typed in redis-py 8, untyped before: either way through Any
        self._sentinel = make(list(t.nodes), sentinel_kwargs=timeouts)
        # redis-py's Sentinel pool asks the sentinels for the master on every new connection
        # and drops a connection that finds a replica there (ReadOnlyError): a failover is
        # followed by the next call, without a restart
        return self._sentinel.master_for(
            t.master, db=t.db, retry_on_error=[rx.ConnectionError], **common
        )

    @property
    def bound(self) -> float:
        """The longest one call waits, in seconds."""
        return self.pool_wait + 2 * self.timeout

    # -- key layout ---------------------------------------------------------------------------
    def k(self, *parts: str) -> str:
        """A global key: ``<prefix>a:b``."""
        return self.prefix + ":".join(parts)

    def t(self, tenant_id: str, what: str) -> str:
        """A tenant's key, hash-tagged by tenant: ``<prefix>{tenant}:what``."""
        return f"{self.prefix}{{{tenant_id}}}:{what}"

    def pipeline(self) -> Any:
        """A write of several keys: MULTI/EXEC on one Redis or Sentinel master; on a
        Cluster (no transaction across slots) a plain pipeline."""
        return self.r.pipeline(transaction=not self.cluster)

    def script(self, lua: str) -> Any:
        return self.r.register_script(lua)

    # -- calls --------------------------------------------------------------------------------
    async def call(self, aw: Awaitable[Any]) -> Any:
        """Run one command (or pipeline, or script) within the bounds; see the module doc."""
        try:
            self.health.check()
        except StoreUnavailable:
            self._wanted.set()
            if not PATIENT.get():
                _discard(aw)
                raise
            await self._probed()
            try:
                self.health.check()
            except StoreUnavailable:
                _discard(aw)
                raise
        if self.cluster and not self._mapped:
            await self._map(aw)
        try:
            async with asyncio.timeout(self.pool_wait):
                await self._slots.acquire()
        except TimeoutError:
            _discard(aw)
            self._failed("no free connection")
            raise StoreUnavailable("no free connection") from None
        try:
            async with asyncio.timeout(2 * self.timeout):
                out = await aw
        except Exception as e:
            reason = reason_of(e)
            self._failed(reason, e)
            raise StoreUnavailable(reason) from None
        finally:
            self._slots.release()
        self.health.succeeded()
        return out

    async def _map(self, aw: Awaitable[Any]) -> None:
        """A Cluster client's first call maps the cluster (its nodes, slots and command
        table: CPU-bound, ~0.7 s on a busy machine) within a bound of its own, once."""
        try:
            async with asyncio.timeout(self.timeout * _MAP_TIMEOUTS):
                await self.r.initialize()
        except Exception as e:
            _discard(aw)
            reason = reason_of(e)
            self._failed(reason, e)
            raise StoreUnavailable(reason) from None
        self._mapped = True

    def _failed(self, reason: str, e: BaseException | None = None) -> None:
        detail = f"{type(e).__name__}: {e}" if e is not None else ""
        if self.health.failed(reason, detail) and (self._probe is None or self._probe.done()):
            self._probe = asyncio.get_running_loop().create_task(self._probe_until_back())

    async def _probe_until_back(self) -> None:
        """While the breaker is open: try a write every ``probe_interval``, and as soon as a
        call is refused (at most every :data:`_PROBE_GAP_S`); the first that works closes it
        (a read-only replica, a full memory or a stalled Redis keep it open). Probing on
        demand, not only on a cycle that began when this process's breaker opened, brings
        every process with traffic back within about ``_PROBE_GAP_S`` of the store, and its
        admin listener with its data plane, whatever their phases."""
        last = time.monotonic()
        while self.health.degraded:
            self._wanted.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.health.probe_interval):
                    await self._wanted.wait()
            await asyncio.sleep(max(0.0, last + _PROBE_GAP_S - time.monotonic()))
            last = time.monotonic()
            unmapped = self.cluster and not self._mapped
            try:
                async with asyncio.timeout(self.timeout * (_MAP_TIMEOUTS if unmapped else 2)):
                    if self.cluster:
                        await self.r.initialize()
                        await self.r.ping(target_nodes=RedisCluster.PRIMARIES)
                    await self.r.set(self.k("probe"), int(time.time()), px=10_000)
            except Exception as e:
                self.health.still(reason_of(e))
            else:
                self._mapped = self._mapped or self.cluster
                self.health.recovered()
            done, self._probe_done = self._probe_done, asyncio.Event()
            done.set()

    async def _probed(self) -> None:
        """Wait for the next probe's verdict (asked for now), at most one probe's bound."""
        done = self._probe_done
        bound = _PROBE_GAP_S + self.timeout * (_MAP_TIMEOUTS if self.cluster else 2)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(bound):
                await done.wait()

    async def ping(self) -> bool:
        try:
            return bool(await self.call(self.r.ping()))
        except StoreUnavailable:
            return False

    async def close(self) -> None:
        if self._probe is not None:
            self._probe.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._probe
        with contextlib.suppress(Exception):
            await self.r.aclose()
        if self._sentinel is not None:
            with contextlib.suppress(Exception):
                await self._sentinel.aclose()

    def subscriber(self) -> Any:
        """A pub/sub client. On a Cluster, a plain client to one of its nodes (a cluster
        broadcasts every PUBLISH to all nodes), the next node on each reconnect."""
        if not self.cluster:
            return self.r.pubsub(ignore_subscribe_messages=True)
        nodes = [(n.host, n.port) for n in self.r.get_nodes()] or list(self.target.nodes)
        self._next_node += 1
        host, port = nodes[self._next_node % len(nodes)]
        t = self.target
        one = aredis.Redis(
            host=host,
            port=port,
            username=t.username,
            password=t.password,
            socket_timeout=self.timeout,
            socket_connect_timeout=self.timeout,
        )
        return _OwnedPubSub(one)

    async def delete_prefix(self) -> None:
        """Remove everything under the prefix (tests)."""
        async for key in self.r.scan_iter(match=self.prefix + "*", count=500):
            await self.r.delete(key)


class RedisPart:
    """One concern's share of the Redis store: the connection all of them share."""

    def __init__(self, c: RedisConn):
        self._c = c


class _OwnedPubSub:
    """A pub/sub on a client of its own, closed with it."""

    def __init__(self, client: aredis.Redis):
        self._client = client
        self._ps = client.pubsub(ignore_subscribe_messages=True)

    async def subscribe(self, channel: str) -> None:
        await self._ps.subscribe(channel)

    async def get_message(self, timeout: float) -> Any:
        return await self._ps.get_message(timeout=timeout)

    async def aclose(self) -> None:
        with contextlib.suppress(Exception):
            ps: Any = self._ps  # typed in redis-py 8, untyped before
            await ps.aclose()
        await self._client.aclose()


def _discard(aw: Awaitable[Any]) -> None:
    """A command not sent: close its coroutine (no 'never awaited' warning)."""
    close = getattr(aw, "close", None)
    if close is not None:
        close()
