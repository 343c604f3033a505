"""The concurrency slots this process holds: leases it renews, and a store that forgets
what no live process holds.

A slot in the store is a lease (:data:`~gateway.tenancy.leases.SLOT_LEASE_MS`) named
``<owner>:<request>``, the owner being this process's fleet id (:mod:`.fleet`). Every
:data:`~gateway.tenancy.leases.SLOT_RENEW_S` seconds this process *syncs* each tenant it
holds slots of, in one call (:meth:`~gateway.store.base.AdmissionStore.sync_slots`): the
slots it holds are renewed, and its own slots that it no longer holds are removed. A
process that dies stops renewing, so its slots come back within one lease.

A store that failed (unreachable, failing over, restarted from its file) may keep slots
whose requests ended meanwhile (their release never reached it, or reached a master that
died before its replica had it), and may lack slots still held (admitted by this
process's own limiter meanwhile, or lost in the failover). Without more, a busy tenant is
then locked out for the rest of a lease after the store returns. So every failed store
call marks the tenants this process held a slot of within the last lease *unsettled*,
and an unsettled tenant is synced with its held slots added back as soon as the store
answers: at once when the breaker closes, every :data:`RETRY_S` meanwhile, and first of
all by an admission that finds the tenant full (:meth:`SlotLeases.reclaim`). A live
process's stale slots are gone on first contact, not a lease later.

A release and a sync of the same tenant never cross (the release waits for a sync in
flight), and a sync keeps the slots whose admission is in flight, so neither takes back a
slot the other just gave or took.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator

from gateway.errors import StoreUnavailable
from gateway.store.base import AdmissionStore
from gateway.tenancy.leases import SLOT_LEASE_MS, SLOT_RENEW_S
from gateway.tenancy.limits import LocalLimiter

RETRY_S = 0.25  # how often unsettled tenants are synced while the store does not answer
_LEASE_S = SLOT_LEASE_MS / 1000


class SlotLeases:
    def __init__(self, store: AdmissionStore | None, local: LocalLimiter, owner: str):
        self._store = store
        self._local = local
        self.owner = owner + ":"  # every slot this process takes starts with it
        self._held: dict[str, set[str]] = {}  # tenant -> request ids holding a slot here
        self._admitting: dict[str, set[str]] = {}  # tenant -> admissions in flight
        self._recent: dict[str, float] = {}  # tenant -> until when a slot it gave may linger
        self._unsettled: dict[str, int] = {}  # tenant -> times marked (a sync clears its own)
        self._syncs: dict[str, asyncio.Task[bool]] = {}  # the sync in flight, per tenant
        self._wake = asyncio.Event()
        self._next_renew = 0.0
        self._task: asyncio.Task[None] | None = None
        self.reclaimed = 0  # stale slots of this process removed from the store

    @property
    def held(self) -> int:
        return sum(len(r) for r in self._held.values())

    def slot(self, rid: str) -> str:
        """The store's name for request ``rid``'s slot."""
        return self.owner + rid

    @contextlib.contextmanager
    def admitting(self, tenant_id: str, rid: str) -> Iterator[None]:
        """While an admission of ``rid`` is in flight: a sync does not remove its slot."""
        rids = self._admitting.setdefault(tenant_id, set())
        rids.add(rid)
        try:
            yield
        finally:
            rids.discard(rid)
            if not rids:
                del self._admitting[tenant_id]

    def hold(self, tenant_id: str, rid: str) -> None:
        self._held.setdefault(tenant_id, set()).add(rid)
        self._run()

    async def release(self, tenant_id: str, rid: str) -> None:
        """Give ``rid``'s slot back (once: a second call does nothing): here, then in the
        store; a release the store did not take leaves the tenant unsettled."""
        rids = self._held.get(tenant_id)
        if rids is None or rid not in rids:
            return
        rids.discard(rid)
        if not rids:
            del self._held[tenant_id]
        self._local.release(tenant_id, rid)
        self._recent[tenant_id] = time.monotonic() + _LEASE_S
        if self._store is None:
            return
        running = self._syncs.get(tenant_id)
        if running is not None:  # its list may still name this slot: land after it
            await asyncio.wait({running})
        try:
            await self._store.release(tenant_id, self.slot(rid))
        except StoreUnavailable:
            self._unsettle((tenant_id,))

    def store_failed(self) -> None:
        """A store call failed: what it holds of this process's slots may be wrong."""
        now = time.monotonic()
        self._recent = {t: until for t, until in self._recent.items() if until > now}
        self._unsettle([*self._held, *self._admitting, *self._recent])

    def store_back(self) -> None:
        """The store answers again: sync the unsettled tenants now."""
        if self._unsettled:
            self._wake.set()

    async def reclaim(self, tenant_id: str) -> bool:
        """An admission found ``tenant_id`` full: if this process's slots there may be
        stale, sync them first. True when it did (the admission is worth trying again)."""
        if tenant_id not in self._unsettled or self._store is None:
            return False
        return await self._sync(tenant_id)

    def _unsettle(self, tenants: list[str] | tuple[str, ...]) -> None:
        for t in tenants:
            self._unsettled[t] = self._unsettled.get(t, 0) + 1
        if self._unsettled:
            self._run()
            self._wake.set()

    def _run(self) -> None:
        if self._task is None or self._task.done():
            self._next_renew = time.monotonic() + SLOT_RENEW_S
            self._task = asyncio.get_running_loop().create_task(self._loop())

    async def _loop(self) -> None:
        while self._held or self._unsettled:
            now = time.monotonic()
            wait = RETRY_S if self._unsettled else self._next_renew - now
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, wait)):
                    await self._wake.wait()
            self._wake.clear()
            now = time.monotonic()
            renew = now >= self._next_renew
            if renew:
                self._next_renew = now + SLOT_RENEW_S
                for tenant_id, rids in list(self._held.items()):
                    self._local.renew(tenant_id, rids)
            self._forget(now)
            due = [*self._unsettled, *(t for t in self._held if renew and t not in self._unsettled)]
            if self._store is not None:
                for tenant_id in due:
                    await self._sync(tenant_id)

    def _forget(self, now: float) -> None:
        """An unsettled tenant with nothing held or admitted here and no slot given back
        within a lease has nothing of this process's left in the store (expired)."""
        for t in [t for t, until in self._recent.items() if until <= now]:
            del self._recent[t]
        for t in list(self._unsettled):
            if t not in self._held and t not in self._admitting and t not in self._recent:
                del self._unsettled[t]

    async def _sync(self, tenant_id: str) -> bool:
        running = self._syncs.get(tenant_id)
        if running is None:
            running = asyncio.get_running_loop().create_task(self._sync_once(tenant_id))
            self._syncs[tenant_id] = running
            running.add_done_callback(lambda _: self._syncs.pop(tenant_id, None))
        return await asyncio.shield(running)

    async def _sync_once(self, tenant_id: str) -> bool:
        assert self._store is not None
        marks = self._unsettled.get(tenant_id, 0)
        held = [self.slot(r) for r in self._held.get(tenant_id, ())]
        admitting = [self.slot(r) for r in self._admitting.get(tenant_id, ())]
        try:
            gone = await self._store.sync_slots(
                tenant_id, self.owner, held, admitting, readd=marks > 0
            )
        except StoreUnavailable:
            return False
        self.reclaimed += gone
        if marks and self._unsettled.get(tenant_id) == marks:  # not marked again meanwhile
            del self._unsettled[tenant_id]
        return True

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
