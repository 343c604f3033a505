"""Deployment artefacts (deploy/): rendered manifests and the Grafana dashboard. No cluster.

The committed files must be exactly what the generators produce (so they cannot drift
from the SGLang profiles, the rules or telemetry), the SGLang containers must run
``render_argv`` verbatim, and every metric and label the dashboard queries must be one the
gateway exports (or an ``sglang:`` engine metric).
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

K8S = rd.OUT_DIR
DASHBOARD = bd.OUT_DIR / bd.FILE_NAME
TIERS = rd.tiers(rd.RULES_FILE.read_text(encoding="utf-8"))
CLUSTER_SCOPED = {"Namespace", "Kustomization"}  # no metadata.namespace


def manifests(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((K8S / name).read_text(encoding="utf-8")) if d]


def find(name: str, kind: str, obj_name: str) -> dict[str, Any]:
    matches = [
        d for d in manifests(name) if d["kind"] == kind and d["metadata"]["name"] == obj_name
    ]
    assert len(matches) == 1, f"{name}: {kind}/{obj_name}"
    return matches[0]


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    containers: list[dict[str, Any]] = deployment["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


# -- manifests ---------------------------------------------------------------------------------
def test_committed_manifests_match_a_fresh_render(tmp_path: Path) -> None:
    assert rd.main(["--out", str(tmp_path)]) == 0
    fresh = {p.name: p.read_text(encoding="utf-8") for p in tmp_path.iterdir()}
    committed = {p.name: p.read_text(encoding="utf-8") for p in K8S.iterdir()}
    assert committed == fresh, "deploy/k8s is stale: run `python -m deploy.render`"
    assert rd.main(["--check"]) == 0


def test_check_mode_reports_a_stale_tree(tmp_path: Path) -> None:
    assert rd.main(["--check", "--out", str(tmp_path)]) == 1


def test_expected_files_and_kustomization() -> None:
    expected = {"namespace.yaml", "gateway.yaml", "redis.yaml", "kustomization.yaml"}
    expected |= {f"sglang-{t}.yaml" for t in TIERS}
    assert {p.name for p in K8S.iterdir()} == expected
    assert set(TIERS) == {"highspeed", "standard"}
    (kust,) = manifests("kustomization.yaml")
    assert kust["resources"][0] == "namespace.yaml"
    assert set(kust["resources"]) == expected - {"kustomization.yaml"}


@pytest.mark.parametrize("name", sorted(p.name for p in K8S.glob("*.yaml")))
def test_every_manifest_is_well_formed(name: str) -> None:
    docs = manifests(name)
    assert docs
    for doc in docs:
        assert doc["apiVersion"] and doc["kind"] and doc["metadata"]["name"], doc
        if doc["kind"] not in CLUSTER_SCOPED:
            assert doc["metadata"]["namespace"] == rd.NAMESPACE


def test_services_and_pdbs_select_their_pods() -> None:
    deployments: set[str] = set()
    selecting: set[tuple[str, str]] = set()
    for name in (p.name for p in K8S.glob("*.yaml")):
        pods = {
            d["metadata"]["name"]: d["spec"]["template"]["metadata"]["labels"]
            for d in manifests(name)
            if d["kind"] == "Deployment"
        }
        deployments |= pods.keys()
        for doc in manifests(name):
            if doc["kind"] in ("Service", "PodDisruptionBudget"):
                sel = doc["spec"]["selector"]
                sel = sel.get("matchLabels", sel)
                owner = pods[doc["metadata"]["name"]]
                assert sel.items() <= owner.items(), f"{name}: {doc['kind']} selects no pod"
                selecting.add((doc["kind"], doc["metadata"]["name"]))
    # every Deployment is reached through its Service; the gateway's also has a PDB
    assert deployments == {rd.GATEWAY_NAME, "redis", *(f"sglang-{t}" for t in TIERS)}
    assert {n for kind, n in selecting if kind == "Service"} == deployments
    assert ("PodDisruptionBudget", rd.GATEWAY_NAME) in selecting


@pytest.mark.parametrize("tier", TIERS)
def test_sglang_container_runs_render_argv(tier: str) -> None:
    profile = load_profile(tier)
    name = f"sglang-{tier}"
    dep = find(f"{name}.yaml", "Deployment", name)
    c = container(dep)
    assert c["command"] + c["args"] == render_argv(profile, host="0.0.0.0", port=rd.SGLANG_PORT)
    assert re.fullmatch(rf"lmsysorg/sglang:v{re.escape(profile.sglang_version)}(-.+)?", c["image"])
    assert c["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert c["readinessProbe"]["httpGet"]["path"] == "/health"
    assert c["livenessProbe"]["initialDelaySeconds"] >= 300
    pod = dep["spec"]["template"]
    assert pod["metadata"]["annotations"]["prometheus.io/scrape"] == "true"
    assert pod["metadata"]["annotations"]["prometheus.io/port"] == str(rd.SGLANG_PORT)
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["dshm"]["emptyDir"]["medium"] == "Memory"
    claim = volumes["hf-cache"]["persistentVolumeClaim"]["claimName"]
    find(f"{name}.yaml", "PersistentVolumeClaim", claim)
    assert pod["spec"]["nodeSelector"] and pod["spec"]["tolerations"]
    svc = find(f"{name}.yaml", "Service", name)
    assert svc["spec"]["ports"][0]["port"] == rd.SGLANG_PORT


def gateway_rules_text() -> str:
    text: str = find("gateway.yaml", "ConfigMap", "gateway-rules")["data"][rd.RULES_KEY]
    return text


def test_configmap_rules_validate_and_point_at_the_engines() -> None:
    rules = parse_rules(gateway_rules_text(), "gateway ConfigMap")
    repo = load_rules(rd.RULES_FILE)
    assert list(rules.tiers) == TIERS
    for tier in TIERS:
        t = rules.tiers[tier]
        assert t.endpoints == (f"http://sglang-{tier}:{rd.SGLANG_PORT}",)
        assert t.model is None  # discovered: the profile's served_model_name
        assert t.request_defaults == {}  # the local engine's sampling crutch stays local
        assert t.continuation == "continue_final_message"  # how SGLang continues a text
        same = {
            "endpoints": t.endpoints,
            "request_defaults": {},
            "continuation": "continue_final_message",
        }
        assert t == repo.tiers[tier].model_copy(update=same)
    # everything but the tiers' model, endpoints and request defaults is the repository's
    assert rules.model_copy(update={"tiers": {}}) == repo.model_copy(update={"tiers": {}})


def test_gateway_deployment() -> None:
    dep = find("gateway.yaml", "Deployment", rd.GATEWAY_NAME)
    assert dep["spec"]["replicas"] == 3
    c = container(dep)
    env = {e["name"]: e for e in c["env"]}
    assert env["GATEWAY_HOST"]["value"] == "0.0.0.0"
    assert env["GATEWAY_REDIS_URL"]["value"] == "redis://redis:6379/0"
    mount = next(m for m in c["volumeMounts"] if m["name"] == "rules")
    assert env["GATEWAY_RULES"]["value"] == f"{mount['mountPath']}/{rd.RULES_KEY}"
    assert "subPath" not in mount  # a subPath mount would never see ConfigMap updates
    secret = find("gateway.yaml", "Secret", rd.SECRET_NAME)
    for var in ("GATEWAY_ADMIN_TOKEN", "GATEWAY_KEY_SECRET"):
        ref = env[var]["valueFrom"]["secretKeyRef"]
        assert ref["name"] == rd.SECRET_NAME and ref["key"] in secret["stringData"]
    # the unedited template cannot start a gateway (admin tokens need 16+ characters)
    assert len(secret["stringData"]["GATEWAY_ADMIN_TOKEN"]) < 16
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert dep["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True
    assert c["resources"]["requests"]["cpu"]  # the HPA's utilisation is relative to it
    hpa = find("gateway.yaml", "HorizontalPodAutoscaler", rd.GATEWAY_NAME)
    assert hpa["spec"]["scaleTargetRef"]["name"] == rd.GATEWAY_NAME
    find("gateway.yaml", "PodDisruptionBudget", rd.GATEWAY_NAME)
    find("gateway.yaml", "Service", rd.GATEWAY_NAME)
    find("redis.yaml", "Service", "redis")


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
    full = tm.RequestRecord("r1", "chat", 200, 1.0, 0.001, tier="highspeed", task="chat")
    full.tenant, full.stream, full.ttft_s, full.ok_attempt_s = "t1", True, 0.1, 0.5
    full.prompt_tokens, full.completion_tokens = 5, 10
    full.failures = [("highspeed", "check_repetition", 0.4)]
    t.record(full)
    t.record(tm.RequestRecord("r2", "chat", 502, 1.0, 0.001, error_code="all_tiers_failed"))
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
