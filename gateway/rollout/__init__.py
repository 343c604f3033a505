"""Judged rollouts: a split rule's canary compared with its baseline on the fleet's traffic
(fallback rate, check-failure rate, latency), promoted step by step while it is no worse and
rolled back at once when it is significantly worse; each step a new rules version, made by
the one process that holds the lease (``analysis:`` of a rule, :mod:`gateway.rules.analysis`).

* ``stats``    the tests: two-proportion z, Fisher's exact, Mann-Whitney U on histograms
* ``judge``    the step logic: two arms' counts in, a verdict out (pure)
* ``counts``   each process's counts per arm, and the store's fields they add up in
* ``weights``  a step as an edit of the rules text (the weights only)
* ``runner``   one process's counting, the lease, judging and stepping
* ``view``     what ``GET /admin/rollouts`` and the console show
"""

from gateway.rollout.runner import Rollouts

__all__ = ("Rollouts",)
