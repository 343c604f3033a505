"""Evaluation harnesses and benchmarks of the gateway: ``python -m evals <command>``.

One subpackage per harness; ``python -m evals <name>`` runs ``evals/<name>/run.py``'s
``main`` (the table is :data:`evals.__main__.COMMANDS`):

* ``headline``  the fast tier raw vs the standard tier raw vs the gateway, faults on
* ``speed``     TTFT, TPOT, throughput of endpoints side by side
* ``quality``   both tiers on the shipped eval set
* ``checks``    precision, recall and cost of each quality check
* ``classify``  the task classifier (``--train`` rebuilds its model)
* ``hostile``   hostile input and engine faults against a real gateway
* ``sched``     prefix affinity across gateway replicas, fair share
* ``fleet``     gateway replicas, Sentinel Redis and simulated engines under faults
* ``semcache``  the semantic cache on labelled pairs
* ``cache``     the response cache against the fast tier raw, and a replayed workload
* ``bench``     the benchmarks and the helpers the harnesses share (processes, load
  generator, fake upstreams): ``python -m evals bench`` is ``evals.bench.proxy``,
  ``python -m evals micro`` is ``evals.bench.micro``
* ``data``      the data sets (package data) and their builders

:mod:`evals.report` holds the report helpers (output folders, tables, plots) they share.
"""
