"""Who is calling and may they: API key to tenant policy, then admission.

* ``guard``    :class:`Access`: authentication and admission, and what each does while
  the store is degraded (fail-open or fail-closed by policy)
* ``cache``    the keys seen: bounded, revocation-aware, served last-known when degraded
* ``leases``   the concurrency slots held here, renewed while their requests run and
  reclaimed from a store that failed
* ``backlog``  usage the store could not take, written when it answers again
"""

from gateway.access.guard import Access, rate_headers

__all__ = ("Access", "rate_headers")
