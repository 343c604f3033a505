"""Merging several workers' Prometheus expositions into one valid exposition."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from gateway.telemetry.merge import merge

W0 = b"""# HELP req_total Requests
# TYPE req_total counter
req_total{tier="fast"} 3.0
# HELP lat Latency
# TYPE lat histogram
lat_bucket{le="1.0"} 1.0
lat_bucket{le="+Inf"} 2.0
lat_count 2.0
lat_sum 1.5
"""
W1 = b"""# HELP req_total Requests
# TYPE req_total counter
req_total{tier="fast"} 4.0
# HELP up Up
# TYPE up gauge
up 1.0
"""


def test_merge_labels_every_sample_and_keeps_families_together() -> None:
    text = merge({"0": W0, "1": W1}).decode()
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    req = fams["req"]  # the parser strips _total from counters
    assert sorted((s.labels["worker"], s.value) for s in req.samples) == [("0", 3.0), ("1", 4.0)]
    assert {s.labels["worker"] for s in fams["lat"].samples} == {"0"}
    assert fams["up"].samples[0].labels == {"worker": "1"}
    assert text.count("# TYPE req_total counter") == 1
