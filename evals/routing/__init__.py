"""``python -m evals routing``: prefix-cache-aware routing of a fleet of simulated SGLang
engines, the gateway beside the SGLang Model Gateway, on the same workloads in one run.

* ``workloads``  what users send, planned as sessions from the seed
* ``fleet``      the engines (and the oracle), each router's processes, their CPU time
* ``client``     sessions started on their clock, streamed requests, per-request figures
* ``figures``    one cell's figures from the records and the engines' counters; the bars
* ``report``     the Markdown report and the plot
* ``run``        the run over workloads x loads x routers, ``main``
"""
