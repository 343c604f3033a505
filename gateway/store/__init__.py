"""Where tenants, keys, limits, usage, the audit log, shadow records and rule versions
live: one small protocol per concern (``base``), each concern one module with both its
implementations, joined in Redis (``redis_store``) or in this process (``memory_store``).

* ``base``        the protocols, :class:`Used`, :class:`Usage`, the caps
* ``tenants``, ``keys``, ``admission``, ``usage``, ``records`` (audit, shadow),
  ``versions`` (rules), ``events``   one concern each: its Redis part and its memory part;
  ``events`` also holds the typed events every write announces, and their one encoding
* ``redis_conn``  the Redis parts' one connection: URL kinds, key layout, bounded calls
* ``health``      the breaker and what ``/readyz`` and ``/metrics`` say of the store
"""

from gateway.store.base import (
    AdmissionStore,
    AuditStore,
    EventBus,
    KeyStore,
    Lifecycle,
    ShadowStore,
    Store,
    TenantStore,
    UsageStore,
)

__all__ = (
    "AdmissionStore",
    "AuditStore",
    "EventBus",
    "KeyStore",
    "Lifecycle",
    "ShadowStore",
    "Store",
    "TenantStore",
    "UsageStore",
)
