"""Benchmarks of the gateway.

* ``python -m evals.bench.proxy``: what the gateway costs as an HTTP hop. Direct to a fake
  upstream vs. a minimal aiohttp relay vs. the gateway, side by side, pinned to CPUs
  (latency percentiles, TTFB, req/s; non-streaming and 50-chunk streams at 1/8/64 clients).
* ``python -m evals.bench.micro``: the gateway's own per-request work in-process
  (classification + routing, quality checks), in microseconds per operation.

The helper processes (``fake_upstream``, ``relay``, ``loadgen``) are self-contained
(stdlib + aiohttp + uvloop) and runnable on their own with ``python -m``.
"""
