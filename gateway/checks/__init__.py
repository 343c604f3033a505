"""Cheap quality checks run on every upstream answer, whole or incrementally.

* ``base``        the check protocol and the abilities a check states, its inputs
  (:class:`Output`, :class:`RequestFacts`) and results
* ``loopguard``   the repetition check's stream guard: a candidate loop held back
* ``config``      thresholds, token lists and patterns (pydantic)
* ``registry``    every check by name, configured once
* ``text``, ``repetition``, ``structured``   the checks themselves
"""

from gateway.checks.base import Check, CheckResult, Output, RequestFacts, run_checks

__all__ = ("Check", "CheckResult", "Output", "RequestFacts", "run_checks")
