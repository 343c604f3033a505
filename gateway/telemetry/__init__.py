"""Traces, metrics and the access log, off the request's critical path.

* ``recorder``    :class:`Telemetry`: spans, metrics, the access log; names as constants
* ``record``      what one request leaves for them (:class:`RequestRecord`)
* ``histograms``  the gateway's own histograms; ``merge``: one ``/metrics`` for all workers
"""

from gateway.telemetry.recorder import Telemetry, setup_logging

__all__ = ("Telemetry", "setup_logging")
