"""How the gateway reaches engines: pools of replicas behind one transport seam.

* ``failures``   the tree of attempt failures (the kind of a failure is its type)
* ``transport``  the seam (:class:`Transport`, :class:`UpstreamStream`); ``h1``: the lean
  HTTP/1.1 client behind it; ``litellm_transport``: hosted tiers
* ``pools``      a tier's replicas and their health; ``replicas``: replica choice;
  ``circuit``: the circuit breaker
* ``scheduler``  capacity-aware queueing per pool; ``discovery``: a tier's model
* ``framing``, ``sse``, ``responses_events``   reading an engine's stream
"""

from gateway.upstream.pools import Pools
from gateway.upstream.transport import Transport, UpstreamStream

__all__ = ("Pools", "Transport", "UpstreamStream")
