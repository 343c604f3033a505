"""The Grafana dashboard of the gateway and its engines (``build_dashboard``)."""
