"""How the gateway reaches engines: pools of replicas behind one transport seam.

* ``transport``  the seam (:class:`Transport`, :class:`UpstreamStream`) and the attempt
  failures; ``h1``: the lean HTTP/1.1 client behind it; ``litellm_transport``: hosted tiers
* ``pools``      replicas of a tier, replica choice, health, circuit breaker
* ``scheduler``  capacity-aware queueing per pool; ``discovery``: a tier's model
* ``sse``, ``responses_events``   reading an engine's stream
"""

from gateway.upstream.pools import Pools
from gateway.upstream.transport import Transport, UpstreamStream

__all__ = ("Pools", "Transport", "UpstreamStream")
