"""``python -m evals fleet``: the gateway as users deploy it, on this machine, under faults.

* ``procs``   Redis + replica + three Sentinels, simulated SGLang replicas, gateway replicas
* ``load``    steady mixed load through a client-side balancer (a Service's stand-in)
* ``faults``  the faults, one at a time
* ``run``     the run and its report (``docs/reports/fleet/``)
"""
