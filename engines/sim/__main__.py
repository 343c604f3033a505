"""``python -m engines.sim --port P ...``: one simulated SGLang replica."""

from engines.sim.cli import sim_main

raise SystemExit(sim_main())
