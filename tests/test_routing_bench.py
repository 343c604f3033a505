"""``python -m evals routing`` end to end in a tiny configuration: two simulated engines, the
oracle, the gateway and the SGLang Model Gateway over them, a multi-turn workload and the
no-reuse control; the report's structure and numbers that make sense."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evals.routing import run


@pytest.mark.processes
@pytest.mark.sglang
def test_routing_bench_runs_tiny(tmp_path: Path) -> None:
    argv = [
        "--workloads", "multiturn,noreuse", "--loads", "moderate",
        "--routers", "gateway-1,smg-cache_aware,oracle", "--engines", "2",
        "--seconds", "1.5", "--rate-scale", "0.15", "--time-scale", "0.25",
        "--cache-tokens", "16384", "--out", str(tmp_path),
    ]  # fmt: skip
    assert run.main(argv) == 0
    result = json.loads((tmp_path / "results.json").read_text())
    cells = {(c["workload"], c["router"]): c for c in result["cells"]}
    assert set(cells) == {
        (w, r) for w in ("multiturn", "noreuse") for r in ("gateway-1", "smg-cache_aware", "oracle")
    }
    for c in cells.values():
        assert c["requests"] > 0 and c["failed"] == 0, c
        assert 0 < c["engine_ttft_p50_ms"] <= c["engine_ttft_p99_ms"]
        assert c["client_ttft_p50_ms"] > 0 and c["e2e_p99_ms"] >= c["client_ttft_p99_ms"]
        assert c["tokens_per_s"] > 0
        # the engines' counters and the answers' usage tell the same hit rate
        assert c["hit_rate"] == pytest.approx(c["hit_rate_usage"], abs=0.02)
    for r in ("gateway-1", "smg-cache_aware", "oracle"):
        assert cells[("noreuse", r)]["hit_rate"] < 0.05  # nothing to reuse
        assert cells[("multiturn", r)]["hit_rate"] > 0.3  # later turns reuse their history
    assert cells[("multiturn", "gateway-1")]["router_cpu_us"] > 0
    assert cells[("multiturn", "oracle")]["router_cpu_us"] is None  # no router
    assert sum(cells[("noreuse", "gateway-1")]["requests_per_engine"]) > 0
    report = (tmp_path / "report.md").read_text()
    for heading in ("## Prefix-cache hit rate", "## multiturn, moderate", "## Bars"):
        assert heading in report
    assert result["bars"] and all("bar" in b and "met" in b for b in result["bars"])
