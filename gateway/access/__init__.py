"""Who is calling and may they: API key to tenant policy, then admission.

* ``guard``  :class:`Access`: the key cache (revocation-aware), admission through the
  store's limits, the local fallback limiter while the store is degraded
"""

from gateway.access.guard import Access, rate_headers

__all__ = ("Access", "rate_headers")
