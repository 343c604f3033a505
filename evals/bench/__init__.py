"""Benchmarks of the gateway, and the pieces the other harnesses share.

* ``python -m evals.bench.proxy`` (``python -m evals bench``): what the gateway costs as an
  HTTP hop. Direct to a fake upstream vs. a minimal aiohttp relay vs. the gateway, side by
  side, pinned to CPUs (latency percentiles, TTFB, req/s; non-streaming and 50-chunk
  streams at 1/8/64 clients). ``rounds`` runs its cells, ``report`` tabulates them.
* ``python -m evals.bench.micro`` (``python -m evals micro``): the gateway's own
  per-request work in-process (classification + routing, quality checks), in microseconds
  per operation, on the texts of ``texts``.
* ``stream_chunks``, ``hosted``, ``rules_push``, ``hello``, ``responses_micro``,
  ``classify_ab``: narrower benchmarks, each run with ``python -m``.

Shared with the harnesses: ``procs`` (child processes, ``wait_ready``), ``common`` (ports,
the chat request, percentiles), ``loadgen``, ``peers`` (the SGLang Model Gateway's venv).
The helper processes (``fake_upstream``, ``fake_anthropic``, ``relay``, ``loadgen``) are
self-contained (stdlib + aiohttp + uvloop) and runnable on their own with ``python -m``.
"""
