"""Tenants, keys and policies as values, and the admission arithmetic.

* ``tenants``  :class:`Tenant`, :class:`ApiKey`, :class:`Policy`, key hashing, precedence
* ``limits``   rate limits, concurrency and budgets: one admission decision a request
"""

from gateway.tenancy.tenants import ApiKey, Policy, Tenant, key_digest

__all__ = ("ApiKey", "Policy", "Tenant", "key_digest")
