"""Traces, metrics and the access log, off the request's critical path.

* ``recorder``    :class:`Telemetry`: spans, metrics, the access log; names as constants
* ``logs``        JSON log lines; refused and failed requests' lines sampled
* ``record``      what one request leaves for them (:class:`RequestRecord`)
* ``histograms``  the gateway's own histograms; ``merge``: one ``/metrics`` for all workers
"""

from gateway.telemetry.logs import setup_logging
from gateway.telemetry.recorder import Telemetry

__all__ = ("Telemetry", "setup_logging")
