"""Drills: an incident acted out on the simulator through real gateways, and what the
gateway did about it, measured (``python -m evals drill-bad-deploy``: the fast tier's bad
deploy and the quality circuit; docs/reports/drills.md)."""
