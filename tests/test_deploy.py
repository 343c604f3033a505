"""Deployment artefacts (deploy/): the Helm chart's generated inputs and the Grafana dashboard.

The committed files must be exactly what the generators produce (so they cannot drift
from the SGLang profiles, the rules or telemetry), the chart's engines must run
``render_argv`` verbatim, and every metric and label the dashboard queries must be one the
gateway exports (or an ``sglang:`` engine metric). The chart itself: tests/test_helm.py.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy import render as rd
from deploy.grafana import build_dashboard as bd
from engines.sglang import load_profile, render_argv
from gateway.rules.schema import load_rules, parse_rules
from gateway.telemetry import recorder as tm
from gateway.telemetry.record import AttemptRecord, RequestRecord

CHART_FILES = rd.OUT_DIR
DASHBOARD = bd.OUT_DIR / bd.FILE_NAME
TIERS = rd.tiers(rd.RULES_FILE.read_text(encoding="utf-8"))


# -- the chart's generated inputs ------------------------------------------------------------------
def test_committed_chart_files_match_a_fresh_render(tmp_path: Path) -> None:
    assert rd.main(["--out", str(tmp_path)]) == 0
    fresh = {p.name: p.read_text(encoding="utf-8") for p in tmp_path.iterdir()}
    committed = {p.name: p.read_text(encoding="utf-8") for p in CHART_FILES.iterdir()}
    assert committed == fresh, (
        "deploy/helm/llm-gateway/files is stale: run `python -m deploy.render`"
    )
    assert set(fresh) == {rd.RULES_KEY, rd.ENGINES_KEY}
    assert rd.main(["--check"]) == 0


def test_check_mode_reports_a_stale_tree(tmp_path: Path) -> None:
    assert rd.main(["--check", "--out", str(tmp_path)]) == 1


def test_the_chart_is_the_only_source_of_kubernetes_objects() -> None:
    """No hand-written or separately rendered manifests beside the chart."""
    deploy = rd.ROOT / "deploy"
    for path in deploy.rglob("*.y*ml"):
        if rd.CHART_DIR in path.parents or path.parent == deploy / "helm":
            continue
        docs = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]
        assert not [d for d in docs if isinstance(d, dict) and "apiVersion" in d], path


def engines() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((CHART_FILES / rd.ENGINES_KEY).read_text("utf-8"))
    return data


@pytest.mark.parametrize("tier", TIERS)
def test_engine_entry_is_the_profile(tier: str) -> None:
    profile = load_profile(tier)
    entry = engines()["tiers"][tier]
    argv = render_argv(profile, host="0.0.0.0", port=rd.SGLANG_PORT)
    assert entry["command"] + entry["args"] == argv
    assert entry["sglangVersion"] == profile.sglang_version
    assert entry["servedModelName"] == profile.model.served_model_name.value
    assert entry["port"] == rd.SGLANG_PORT


def test_engines_cover_the_rules_tiers() -> None:
    assert list(engines()["tiers"]) == TIERS
    assert set(TIERS) == {"highspeed", "standard"}


def test_chart_rules_validate_and_speak_sglang() -> None:
    text = (CHART_FILES / rd.RULES_KEY).read_text(encoding="utf-8")
    rules = parse_rules(text, "chart rules")
    repo = load_rules(rd.RULES_FILE)
    assert list(rules.tiers) == TIERS
    for tier in TIERS:
        t = rules.tiers[tier]
        assert t.endpoints == (f"http://sglang-{tier}:{rd.SGLANG_PORT}",)
        assert t.model is None  # the chart's GATEWAY_POOL_<TIER>_MODEL names it
        assert t.request_defaults == {}  # the local engine's sampling crutch stays local
        assert t.continuation == "continue_final_message"  # how SGLang continues a text
        same = {
            "endpoints": t.endpoints,
            "request_defaults": {},
            "continuation": "continue_final_message",
        }
        assert t == repo.tiers[tier].model_copy(update=same)
    # everything but the tiers' endpoints, continuation and request defaults is the repository's
    assert rules.model_copy(update={"tiers": {}}) == repo.model_copy(update={"tiers": {}})
    assert "# Tiers: a named policy target" in text  # the comments are kept


# -- dashboard ---------------------------------------------------------------------------------
def dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return data


def queries(d: dict[str, Any]) -> list[str]:
    exprs = [t["expr"] for p in d["panels"] for t in p.get("targets", [])]
    exprs += [v["definition"] for v in d["templating"]["list"] if v["type"] == "query"]
    return exprs


def exported_series() -> dict[str, set[str]]:
    """Every sample name the gateway's Prometheus exporter produces -> its label names."""
    t = tm.Telemetry()
    # one request that touches every instrument, and one error
    full = RequestRecord(
        request_id="r1",
        kind="chat",
        status=200,
        latency_s=1.0,
        overhead_s=0.001,
        tier="highspeed",
        task="chat",
        tenant="t1",
        stream=True,
        ttft_s=0.1,
        ok_attempt_s=0.5,
        prompt_tokens=5,
        completion_tokens=10,
        failures=(AttemptRecord("highspeed", "check_repetition", 0.4, "repetition"),),
    )
    t.record(full)
    error = RequestRecord(
        request_id="r2",
        kind="chat",
        status=502,
        latency_s=1.0,
        overhead_s=0.001,
        error_code="all_tiers_failed",
    )
    t.record(error)
    try:
        t.flush()
        out: dict[str, set[str]] = {}
        for family in t.registry.collect():
            for sample in family.samples:
                out.setdefault(sample.name, set()).update(sample.labels)
        return out
    finally:
        asyncio.run(t.close())


def test_committed_dashboard_matches_a_fresh_build() -> None:
    assert bd.render()[bd.FILE_NAME] == DASHBOARD.read_text(encoding="utf-8"), (
        "deploy/grafana/gateway-dashboard.json is stale: run "
        "`python -m deploy.grafana.build_dashboard`"
    )
    assert bd.main(["--check"]) == 0


def test_dashboard_shape() -> None:
    d = dashboard()
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids))
    assert 36 <= d["schemaVersion"] <= 41
    variables = {v["name"]: v for v in d["templating"]["list"]}
    assert variables["DS_PROMETHEUS"]["type"] == "datasource"
    assert {"tier", "task", "tenant"} <= variables.keys()
    for p in d["panels"]:
        if p["type"] != "row":
            assert p["datasource"]["uid"] == "${DS_PROMETHEUS}"
            refs = [t["refId"] for t in p["targets"]]
            assert p["targets"] and len(refs) == len(set(refs))


_METRIC = re.compile(r"(?<![\w:])(?:gateway_|sglang:)[\w:]*")
_SELECTOR = re.compile(r"([A-Za-z_:][\w:]*)\{([^}]*)\}")
_BY = re.compile(r"\bby \(([^)]*)\)")


def test_dashboard_metrics_exist() -> None:
    """Every metric name is a telemetry constant with an exporter suffix, or an sglang: one."""
    constants = {v for k, v in vars(tm).items() if k.startswith("M_")}
    allowed = {m + s for m in constants for s in ("_total", "_bucket", "_sum", "_count")}
    exported = exported_series()
    assert set(exported) <= allowed  # the suffix rule matches the exporter
    for expr in queries(dashboard()):
        for name in _METRIC.findall(expr):
            assert name.startswith("sglang:") or name in exported, f"unknown metric {name}"
        for name, _ in _SELECTOR.findall(expr):
            assert name.startswith(("gateway_", "sglang:")), f"unexpected selector {name}"


def test_dashboard_labels_exist() -> None:
    """Labels in selectors and `by` clauses are ones the gateway's metrics carry."""
    exported = exported_series()
    checked: set[str] = set()
    for expr in queries(dashboard()):
        names = [n for n in _METRIC.findall(expr) if not n.startswith("sglang:")]
        used = {lbl.strip() for group in _BY.findall(expr) for lbl in group.split(",")}
        used |= {
            m.split("=")[0].strip()
            for name, body in _SELECTOR.findall(expr)
            if not name.startswith("sglang:")
            for m in body.split(",")
            if m
        }
        for name in names:
            labels = exported.get(name, set())
            assert used <= labels, f"{name}: {used - labels} not exported, in {expr}"
            checked |= used
    # the checks saw the labels the dashboard is built on (the variables, the breakdowns)
    assert {"tier", "task", "tenant", "reason", "check", "outcome", "le"} <= checked
