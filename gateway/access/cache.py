"""The API keys this replica has seen, with their merged policy: bounded, revocation-aware.

* **Bounded**: at most ``max_entries`` keys (least recently used out), and the digests
  recently not found (a negative cache of ``NEGATIVE_TTL`` seconds, at most
  ``NEGATIVE_MAX``).
* **Fresh** for ``ttl`` seconds after it was read from the store; then re-read. A write
  on any replica is published and evicts the entry everywhere at once; a gap in those
  events (the subscription lost, the store back from an outage) marks every entry stale,
  so each is re-read on its next use.
* **Last known**: while the store cannot answer, an entry read within ``stale_max``
  seconds is still served (fail-open), so a key revoked meanwhile stops working at most
  ``stale_max`` after this replica last verified it, or as soon as the store answers.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from gateway.tenancy.tenants import Effective

NEGATIVE_TTL = 5.0
NEGATIVE_MAX = 10_000


@dataclass(slots=True)
class Entry:
    eff: Effective
    at: float  # monotonic: when the store last said so
    stale: bool = False


class KeyCache:
    def __init__(self, ttl: float, stale_max: float, max_entries: int):
        self.ttl = ttl
        self.stale_max = stale_max
        self.max_entries = max_entries
        self._entries: OrderedDict[str, Entry] = OrderedDict()
        self._unknown: dict[str, float] = {}  # digests recently not found -> when

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, digest: str) -> Entry | None:
        entry = self._entries.get(digest)
        if entry is not None:
            self._entries.move_to_end(digest)
        return entry

    def fresh(self, entry: Entry, now: float) -> bool:
        return not entry.stale and now - entry.at < self.ttl

    def last_known(self, entry: Entry | None, now: float) -> Effective | None:
        """The entry's policy if it may still be served while the store is away."""
        if entry is None or entry.eff.policy.fail_closed or now - entry.at >= self.stale_max:
            return None
        return entry.eff

    def put(self, digest: str, eff: Effective, now: float) -> None:
        self._entries[digest] = Entry(eff, now)
        self._entries.move_to_end(digest)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def missing_recently(self, digest: str, now: float) -> bool:
        at = self._unknown.get(digest)
        return at is not None and now - at < NEGATIVE_TTL

    def missing(self, digest: str, now: float) -> None:
        self._entries.pop(digest, None)
        if len(self._unknown) >= NEGATIVE_MAX:
            self._unknown.clear()
        self._unknown[digest] = now

    def drop(self, digest: str) -> None:
        self._entries.pop(digest, None)
        self._unknown.pop(digest, None)

    def drop_tenant(self, tenant_id: str) -> None:
        for d in [d for d, e in self._entries.items() if e.eff.tenant_id == tenant_id]:
            del self._entries[d]

    def mark_stale(self) -> None:
        """Re-read every key on its next use, keeping its last known policy meanwhile (a
        store that just came back may still fail a call: a known key must not get 503)."""
        for entry in self._entries.values():
            entry.stale = True
        self._unknown.clear()
