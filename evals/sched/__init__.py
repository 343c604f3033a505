"""``python -m evals sched``: prefix affinity across gateway replicas, and fair share.

* ``choosers``  how a gateway replica picks an engine replica, per policy
* ``affinity``  the multi-turn workload over simulated engines; one policy's figures
* ``fairness``  one tenant's burst against another's interactive requests
* ``run``       the report, the plot, ``main``
"""
