"""``python -m evals cache``: the response cache, a hit against the fast tier raw and a
replayed workload.

* ``procs``     the simulator and the gateways (with and without a cache)
* ``workload``  the replayed trace and its replay
* ``report``    the Markdown report
* ``run``       the hit-vs-raw cells and ``main``
"""
