"""The quality circuit: a tier whose answers on a rule fail their checks too often is
demoted for that rule (the router skips it), probed with a small share of the rule's
requests, and restored when the probes pass; shared by every replica through the store.

* ``window``   the arithmetic: a sliding window of answers, the latest probes, the verdicts
* ``circuit``  one process's circuit: counting, deciding, the shared records, what it shows
"""

from gateway.quality.circuit import QualityCircuit

__all__ = ("QualityCircuit",)
