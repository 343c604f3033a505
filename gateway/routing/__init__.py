"""Classification and routing: pure functions from a request to a frozen decision.

* ``classify``   :class:`Classifier`: task, SLA class, tier hint
* ``textmodel``  the learned task model (weights in ``textmodel.json``)
* ``router``     :class:`Router`: classification + rules + pool health -> :class:`RouteDecision`
* ``explain``    what the gateway would do with a request, without sending it
"""

from gateway.routing.classify import Classification, Classifier
from gateway.routing.router import RouteDecision, Router

__all__ = ("Classification", "Classifier", "RouteDecision", "Router")
