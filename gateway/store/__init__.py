"""Where tenants, keys, limits, usage, the audit log, shadow records and rule versions
live: one small protocol per concern (``base``), in Redis (``redis_store``) or in this
process (``memory_store``).
"""

from gateway.store.base import (
    AdmissionStore,
    AuditStore,
    EventBus,
    KeyStore,
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
    "ShadowStore",
    "Store",
    "TenantStore",
    "UsageStore",
)
