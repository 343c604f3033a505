"""``python -m evals headline``: the fast tier raw, the standard tier raw and the gateway,
interleaved in one run under a fault mix.

* ``procs``   the engines (simulators or the local llama.cpp ones) and the gateways
* ``client``  one request and what its answer carried (timings, headers, defects)
* ``mix``     the task mix (``--mix tasks``): prompts and the shape defects of each kind
* ``report``  figures, tables and plot (``headline.md``, ``headline.json``, ``headline.png``)
* ``run``     the run: targets, cells, ``main``
"""
