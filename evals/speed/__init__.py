"""``python -m evals speed``: TTFT, TPOT, throughput and latency of OpenAI-compatible targets.

* ``targets``  targets, concurrency levels, prompt sets, recorded traffic
* ``stream``   one measured streamed request
* ``load``     closed-loop sweeps and open-loop replay
* ``report``   summaries, tables, plots
* ``run``      arguments and ``main``
"""
