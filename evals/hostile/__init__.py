"""``python -m evals hostile``: hostile input and engine faults against a real gateway.

* ``cases``   the hostile requests (raw HTTP bytes) and what must come back
* ``engine``  a fault-injecting OpenAI-compatible engine (``python -m evals.hostile.engine``)
* ``run``     the run and its report
"""
