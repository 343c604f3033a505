"""The Helm chart (deploy/helm/llm-gateway), the one source of the Kubernetes objects. No cluster.

``helm lint --strict``; ``helm template`` with the default values and with
``deploy/helm/values-production.yaml``; every rendered object validated strictly against
the Kubernetes schemas that kubernetes-validate ships from 1.33 on (the custom resources,
KEDA ScaledObjects and ServiceMonitors, against their CRDs' models, in node); then the
fields the gateway, the engines and the autoscalers rely on.

Needs helm (``make k8s-tools``: ``.cache/k8s-tools/bin/helm``), kubernetes-validate (the dev
extra) and, for the custom resources, node with the validators ``make k8s-tools`` installs.
Without them the tests skip, unless ``REQUIRE_K8S_TOOLS=1`` (``make test`` sets it).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest
import yaml

from deploy import render as rd
from engines.sglang import LAUNCH_PREFIX, load_profile, render_argv
from gateway.rules.schema import parse_rules
from gateway.upstream import replicas
from tests.test_deploy import exported_series

pytestmark = pytest.mark.k8s

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "deploy" / "helm" / "llm-gateway"
PRODUCTION = ROOT / "deploy" / "helm" / "values-production.yaml"
TOOLS = ROOT / ".cache" / "k8s-tools"
HELM = Path(os.environ.get("HELM", TOOLS / "bin" / "helm"))
NODE_MODULES = TOOLS / "node" / "node_modules"
RELEASE, NAMESPACE = "gw", "llm"
FULL = f"{RELEASE}-llm-gateway"
OLDEST = (1, 33)  # the oldest Kubernetes release every object must validate for
CUSTOM = {
    ("keda.sh/v1alpha1", "ScaledObject"),
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
    ("monitoring.coreos.com/v1", "PrometheusRule"),
}
TIERS = rd.tiers(rd.RULES_FILE.read_text(encoding="utf-8"))

Obj = dict[str, Any]


def unavailable(reason: str) -> NoReturn:
    """Skip, or fail where REQUIRE_K8S_TOOLS=1 (``make test`` installed the tools)."""
    if os.environ.get("REQUIRE_K8S_TOOLS") == "1":
        pytest.fail(reason)
    pytest.skip(reason)


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    if not os.access(HELM, os.X_OK):
        unavailable(f"no helm at {HELM}: run `make k8s-tools`")
    proc = subprocess.run([str(HELM), *args], capture_output=True, text=True, timeout=120)
    if check and proc.returncode != 0:
        pytest.fail(f"helm {' '.join(args)}: {proc.stderr}")
    return proc


def template(*values_args: str) -> list[Obj]:
    out = helm("template", RELEASE, str(CHART), "--namespace", NAMESPACE, *values_args).stdout
    return [d for d in yaml.safe_load_all(out) if d]


@pytest.fixture(scope="module")
def default_objs() -> list[Obj]:
    return template()


@pytest.fixture(scope="module")
def prod_objs() -> list[Obj]:
    return template("-f", str(PRODUCTION))


@pytest.fixture(scope="module", params=["default", "production"])
def objs(request: pytest.FixtureRequest) -> list[Obj]:
    name = "default_objs" if request.param == "default" else "prod_objs"
    result: list[Obj] = request.getfixturevalue(name)
    return result


def find(objs: list[Obj], kind: str, name: str) -> Obj:
    matches = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(matches) == 1, f"{kind}/{name}: {len(matches)} rendered"
    return matches[0]


def kinds(objs: list[Obj], kind: str) -> list[Obj]:
    return [o for o in objs if o["kind"] == kind]


def pod(deployment: Obj) -> Obj:
    spec: Obj = deployment["spec"]["template"]["spec"]
    return spec


def container(deployment: Obj) -> Obj:
    (c,) = pod(deployment)["containers"]
    result: Obj = c
    return result


def env(c: Obj) -> dict[str, Obj]:
    return {e["name"]: e for e in c["env"]}


def values(*files: Path) -> Obj:
    """The chart's values as helm merges them (maps key by key) for the checks below."""

    def merge(base: Obj, over: Obj) -> Obj:
        out = dict(base)
        for k, v in over.items():
            out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
        return out

    merged: Obj = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    for f in files:
        merged = merge(merged, yaml.safe_load(f.read_text(encoding="utf-8")))
    return merged


# -- lint and schemas ----------------------------------------------------------------------------
@pytest.mark.parametrize("extra", [[], ["-f", str(PRODUCTION)]], ids=["default", "production"])
def test_lint_strict(extra: list[str]) -> None:
    proc = helm("lint", "--strict", str(CHART), *extra, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 chart(s) failed" in proc.stdout


def kube_versions() -> list[str]:
    try:
        from kubernetes_validate import utils
    except ImportError:
        unavailable("kubernetes-validate is not installed (pip install -e '.[dev]')")
    versions = [v for v in utils.all_versions() if tuple(map(int, v.split(".")[:2])) >= OLDEST]
    return versions


def test_schemas_cover_1_33_to_1_35() -> None:
    minors = {".".join(v.split(".")[:2]) for v in kube_versions()}
    assert {"1.33", "1.34", "1.35"} <= minors


def validate_builtin(obj: Obj, version: str) -> None:
    import kubernetes_validate

    kubernetes_validate.validate(obj, version, strict=True)


def test_every_builtin_object_validates_strictly(objs: list[Obj]) -> None:
    versions = kube_versions()
    builtin = [o for o in objs if (o["apiVersion"], o["kind"]) not in CUSTOM]
    assert len(builtin) >= 10
    for version in versions:
        for obj in builtin:
            validate_builtin(obj, version)  # raises, naming the field, on any error


def test_strict_validation_catches_an_unknown_field(default_objs: list[Obj]) -> None:
    from kubernetes_validate.utils import ValidationError

    dep = json.loads(json.dumps(find(default_objs, "Deployment", FULL)))
    dep["spec"]["template"]["spec"]["containers"][0]["livenessProbes"] = {}
    with pytest.raises(ValidationError):
        validate_builtin(dep, kube_versions()[-1])


def validate_custom(objects: list[Obj]) -> list[str | None]:
    node = shutil.which("node")
    if node is None or not NODE_MODULES.is_dir():
        unavailable(f"node or the CRD validators ({NODE_MODULES}) missing: run `make k8s-tools`")
    proc = subprocess.run(
        [node, str(ROOT / "tests" / "crd_validate.mjs"), str(NODE_MODULES)],
        input=json.dumps(objects),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    result: list[str | None] = json.loads(proc.stdout)
    return result


# Fields of the custom resources' specs (KEDA 2.x ScaledObject, Prometheus Operator
# ServiceMonitor endpoints): the models check types and required fields, this set the names.
SCALEDOBJECT_SPEC = {
    "scaleTargetRef", "pollingInterval", "initialCooldownPeriod", "cooldownPeriod",
    "idleReplicaCount", "minReplicaCount", "maxReplicaCount", "fallback", "advanced", "triggers",
}  # fmt: skip
PROMETHEUS_TRIGGER = {"serverAddress", "query", "threshold", "activationThreshold", "namespace"}
MONITOR_ENDPOINT = {"port", "path", "interval", "scrapeTimeout", "authorization", "scheme"}


def test_every_custom_resource_validates(prod_objs: list[Obj]) -> None:
    custom = [o for o in prod_objs if (o["apiVersion"], o["kind"]) in CUSTOM]
    assert {o["kind"] for o in custom} == {"ScaledObject", "ServiceMonitor", "PrometheusRule"}
    assert validate_custom(custom) == [None] * len(custom)
    for o in custom:
        if o["kind"] == "ScaledObject":
            assert set(o["spec"]) <= SCALEDOBJECT_SPEC
            for trigger in o["spec"]["triggers"]:
                assert trigger["type"] == "prometheus"
                assert set(trigger["metadata"]) <= PROMETHEUS_TRIGGER
        elif o["kind"] == "ServiceMonitor":
            for endpoint in o["spec"]["endpoints"]:
                assert set(endpoint) <= MONITOR_ENDPOINT
    # the validators do fail: a wrong type is caught
    bad = json.loads(json.dumps(next(o for o in custom if o["kind"] != "PrometheusRule")))
    bad["spec"]["minReplicaCount" if bad["kind"] == "ScaledObject" else "endpoints"] = "x"
    assert validate_custom([bad]) != [None]
    rule = json.loads(json.dumps(next(o for o in custom if o["kind"] == "PrometheusRule")))
    rule["spec"]["groups"][0]["rules"] = "x"
    assert validate_custom([rule]) != [None]


# -- what is rendered ----------------------------------------------------------------------------
def test_default_objects(default_objs: list[Obj]) -> None:
    for kind, name in [
        ("ConfigMap", f"{FULL}-rules"),
        ("Deployment", FULL),
        ("Service", FULL),
        ("Service", f"{FULL}-admin"),
        ("PodDisruptionBudget", FULL),
        ("NetworkPolicy", FULL),
        ("HorizontalPodAutoscaler", FULL),  # KEDA off: CPU is the fallback
        ("Deployment", f"{FULL}-redis"),  # the try-out Redis
        ("Service", f"{FULL}-redis"),
    ]:
        find(default_objs, kind, name)
    for tier in TIERS:
        find(default_objs, "Deployment", f"{FULL}-sglang-{tier}")
        find(default_objs, "Service", f"{FULL}-sglang-{tier}")
    assert not kinds(default_objs, "ScaledObject")
    assert not kinds(default_objs, "ServiceMonitor")
    assert not kinds(default_objs, "PrometheusRule")
    # autoscaling owns the count: no replicas for kubectl/helm to reset on an upgrade
    assert "replicas" not in find(default_objs, "Deployment", FULL)["spec"]


def test_production_objects(prod_objs: list[Obj]) -> None:
    assert not kinds(prod_objs, "HorizontalPodAutoscaler")  # KEDA makes its own
    find(prod_objs, "ScaledObject", FULL)
    for tier in TIERS:
        find(prod_objs, "ScaledObject", f"{FULL}-sglang-{tier}")
    for kind in ("Deployment", "Service", "ServiceAccount", "Role", "RoleBinding"):
        find(prod_objs, kind, f"{FULL}-router-highspeed")
    assert not [o for o in prod_objs if o["metadata"]["name"] == f"{FULL}-router-standard"]
    assert {m["metadata"]["name"] for m in kinds(prod_objs, "ServiceMonitor")} == {
        FULL, f"{FULL}-engines", f"{FULL}-routers",
    }  # fmt: skip
    assert not [o for o in prod_objs if "redis" in o["metadata"]["name"]]
    gw = env(container(find(prod_objs, "Deployment", FULL)))
    ref = gw["GATEWAY_REDIS_URL"]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": "llm-redis", "key": "GATEWAY_REDIS_URL"}
    router = find(prod_objs, "Service", f"{FULL}-router-highspeed")
    port = next(p["port"] for p in router["spec"]["ports"] if p["name"] == "http")
    assert gw["GATEWAY_POOL_HIGHSPEED_URLS"]["value"] == f"http://{FULL}-router-highspeed:{port}"
    assert gw["GATEWAY_POOL_STANDARD_URLS"]["value"] == f"http://{FULL}-sglang-standard:30000"


def test_alerts_watch_the_quality_circuits_gauge(prod_objs: list[Obj]) -> None:
    from gateway.quality.circuit import M_DEMOTED

    rule = find(prod_objs, "PrometheusRule", FULL)
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    (group,) = rule["spec"]["groups"]
    alerts = {r["alert"]: r for r in group["rules"]}
    assert set(alerts) == {"GatewayTierDemoted", "GatewayTierDemotedLong"}
    for r in alerts.values():
        assert r["expr"] == (
            f'max by (namespace, tier, rule) ({M_DEMOTED}{{namespace="{NAMESPACE}"}}) > 0'
        )
        assert "{{ $labels.tier }}" in r["annotations"]["summary"]  # Prometheus fills it in
    assert (alerts["GatewayTierDemoted"]["for"], alerts["GatewayTierDemotedLong"]["for"]) == (
        "1m",
        "30m",
    )


def test_no_secret_is_rendered_and_secrets_are_referenced(objs: list[Obj]) -> None:
    assert not kinds(objs, "Secret")
    gw = env(container(find(objs, "Deployment", FULL)))
    for name in ("GATEWAY_ADMIN_TOKEN", "GATEWAY_KEY_SECRET", "GATEWAY_METRICS_TOKEN"):
        assert set(gw[name]) == {"name", "valueFrom"}, f"{name} must come from a Secret"
        assert gw[name]["valueFrom"]["secretKeyRef"]["key"] == name
    for e in gw.values():
        if "KEY" in e["name"] or "TOKEN" in e["name"] or "SECRET" in e["name"]:
            assert "value" not in e, e


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return selector.items() <= labels.items()


def test_selectors_select_their_pods(objs: list[Obj]) -> None:
    pods = {d["metadata"]["name"]: d["spec"]["template"]["metadata"]["labels"] for d in objs
            if d["kind"] == "Deployment"}  # fmt: skip
    for d in kinds(objs, "Deployment"):
        assert selects(d["spec"]["selector"]["matchLabels"], pods[d["metadata"]["name"]])
    reached: set[tuple[str, str]] = set()  # (kind, Deployment) pairs
    for o in objs:
        if o["kind"] == "Service":
            sel = o["spec"]["selector"]
        elif o["kind"] in ("PodDisruptionBudget", "NetworkPolicy"):
            sel = (o["spec"].get("selector") or o["spec"]["podSelector"])["matchLabels"]
        else:
            continue
        hit = [n for n, lbl in pods.items() if selects(sel, lbl)]
        assert hit, f"{o['kind']} selects none"
        reached |= {(o["kind"], n) for n in hit}
    # every Deployment is reached through a Service; the gateway's pods have a PDB
    assert FULL in pods and {n for k, n in reached if k == "Service"} == pods.keys()
    assert ("PodDisruptionBudget", FULL) in reached
    for so in kinds(objs, "ScaledObject") + kinds(objs, "HorizontalPodAutoscaler"):
        assert so["spec"]["scaleTargetRef"]["name"] in pods


# -- the gateway ---------------------------------------------------------------------------------
def test_gateway_pod(objs: list[Obj], request: pytest.FixtureRequest) -> None:
    prod = "production" in request.node.callspec.id
    v = values(PRODUCTION) if prod else values()
    dep = find(objs, "Deployment", FULL)
    c = container(dep)
    e = env(c)
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert e["GATEWAY_DRAIN_SECONDS"]["value"] == str(v["drainSeconds"])
    assert e["GATEWAY_WORKERS"]["value"] == str(v["workers"])
    assert e["GATEWAY_HOST"]["value"] == e["GATEWAY_ADMIN_HOST"]["value"] == "0.0.0.0"
    assert e["GATEWAY_PORT"]["value"] == str(ports["http"])
    assert e["GATEWAY_ADMIN_PORT"]["value"] == str(ports["admin"])
    assert e["GATEWAY_LOCAL_ENGINES"]["value"] == "off"
    pre_stop = c["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert pre_stop == v["preStopSeconds"] > 0
    grace = pod(dep)["terminationGracePeriodSeconds"]
    assert grace > pre_stop + float(e["GATEWAY_DRAIN_SECONDS"]["value"]) + 5  # + the supervisor's
    spread = {t["topologyKey"] for t in pod(dep)["topologySpreadConstraints"]}
    assert spread == {"topology.kubernetes.io/zone", "kubernetes.io/hostname"}
    assert dep["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod(dep)["securityContext"]["runAsNonRoot"] is True
    mount = next(m for m in c["volumeMounts"] if m["name"] == "rules")
    assert e["GATEWAY_RULES"]["value"] == f"{mount['mountPath']}/{rd.RULES_KEY}"
    assert "subPath" not in mount  # a subPath mount would never see ConfigMap updates
    admin = find(objs, "Service", f"{FULL}-admin")
    assert [p["targetPort"] for p in admin["spec"]["ports"]] == ["admin"]
    assert [p["targetPort"] for p in find(objs, "Service", FULL)["spec"]["ports"]] == ["http"]
    assert find(objs, "PodDisruptionBudget", FULL)["spec"]["maxUnavailable"] == 1


def test_rules_configmap_is_the_rendered_rules(default_objs: list[Obj]) -> None:
    text = find(default_objs, "ConfigMap", f"{FULL}-rules")["data"][rd.RULES_KEY]
    assert text == (rd.OUT_DIR / rd.RULES_KEY).read_text(encoding="utf-8")
    rules = parse_rules(text, "chart ConfigMap")
    assert list(rules.tiers) == TIERS
    assert set(values()["tiers"]) == set(TIERS)  # a values entry for every tier of the rules


def test_rules_can_be_replaced(tmp_path: Path) -> None:
    own = tmp_path / "rules.yaml"
    own.write_text("version: 1\n# mine\n", encoding="utf-8")
    objs = template("--set-file", f"rules.inline={own}")
    assert find(objs, "ConfigMap", f"{FULL}-rules")["data"][rd.RULES_KEY] == "version: 1\n# mine\n"
    objs = template("--set", "rules.existingConfigMap=my-rules")
    assert not kinds(objs, "ConfigMap")
    (rules,) = [v for v in pod(find(objs, "Deployment", FULL))["volumes"] if v["name"] == "rules"]
    assert rules["configMap"]["name"] == "my-rules"


def test_pool_urls_name_the_rendered_services(default_objs: list[Obj]) -> None:
    e = env(container(find(default_objs, "Deployment", FULL)))
    for tier in TIERS:
        svc = find(default_objs, "Service", f"{FULL}-sglang-{tier}")
        (port,) = svc["spec"]["ports"]
        url = f"http://{svc['metadata']['name']}:{port['port']}"
        assert e[f"GATEWAY_POOL_{tier.upper()}_URLS"]["value"] == url
        model = load_profile(tier).model.served_model_name.value
        assert e[f"GATEWAY_POOL_{tier.upper()}_MODEL"]["value"] == model


def test_networkpolicy_keeps_the_admin_port_private(objs: list[Obj]) -> None:
    np = find(objs, "NetworkPolicy", FULL)
    gw_labels = find(objs, "Deployment", FULL)["spec"]["template"]["metadata"]["labels"]
    assert selects(np["spec"]["podSelector"]["matchLabels"], gw_labels)
    assert np["spec"]["policyTypes"] == ["Ingress"]  # everything not allowed below is refused
    by_port = {p["port"]: rule for rule in np["spec"]["ingress"] for p in rule["ports"]}
    assert set(by_port) == {"http", "admin"}
    admin_from = by_port["admin"].get("from")
    assert admin_from, "the admin port must name who may reach it"
    assert all(p.get("podSelector") or p.get("namespaceSelector") for p in admin_from)
    assert by_port["admin"] is not by_port["http"]
    # /metrics shares the data port: it is kept private by its bearer token
    assert "GATEWAY_METRICS_TOKEN" in env(container(find(objs, "Deployment", FULL)))


def test_production_networkpolicy_limits_the_data_port(prod_objs: list[Obj]) -> None:
    np = find(prod_objs, "NetworkPolicy", FULL)
    (http,) = [r for r in np["spec"]["ingress"] if r["ports"][0]["port"] == "http"]
    v = values(PRODUCTION)["networkPolicy"]
    assert http["from"] == v["clients"] + v["monitoring"]
    engines = find(prod_objs, "NetworkPolicy", f"{FULL}-engines")
    (rule,) = engines["spec"]["ingress"]
    gw_labels = find(prod_objs, "Deployment", FULL)["spec"]["template"]["metadata"]["labels"]
    assert any(selects(p["podSelector"]["matchLabels"], gw_labels) for p in rule["from"]
               if "podSelector" in p)  # fmt: skip


# -- autoscaling ---------------------------------------------------------------------------------
def test_gateway_scales_on_its_own_in_flight_metric(prod_objs: list[Obj]) -> None:
    so = find(prod_objs, "ScaledObject", FULL)
    (trigger,) = so["spec"]["triggers"]
    query = trigger["metadata"]["query"]
    exported = exported_series()
    metric = "gateway_request_latency_seconds_sum"
    assert metric in exported, sorted(exported)  # the recorder's M_LATENCY histogram
    assert query.startswith(f"sum(rate({metric}{{")
    assert f'namespace="{NAMESPACE}"' in query and f'service="{FULL}"' in query
    v = values(PRODUCTION)["autoscaling"]
    assert trigger["metadata"]["threshold"] == str(v["targetInFlightPerPod"])
    assert (so["spec"]["minReplicaCount"], so["spec"]["maxReplicaCount"]) == (
        v["minReplicas"], v["maxReplicas"],
    )  # fmt: skip
    assert so["spec"]["scaleTargetRef"]["name"] == FULL


def test_tiers_scale_on_sglang_queue(prod_objs: list[Obj]) -> None:
    assert b"sglang:num_queue_reqs" in replicas._METRICS  # the engine gauge the gateway reads
    v = values(PRODUCTION)["tiers"]
    for tier in TIERS:
        so = find(prod_objs, "ScaledObject", f"{FULL}-sglang-{tier}")
        (trigger,) = so["spec"]["triggers"]
        model = load_profile(tier).model.served_model_name.value
        want = f'sum(sglang:num_queue_reqs{{namespace="{NAMESPACE}",model_name="{model}"}})'
        assert trigger["metadata"]["query"] == want
        assert trigger["metadata"]["threshold"] == str(v[tier]["autoscaling"]["queuePerReplica"])
        assert so["spec"]["minReplicaCount"] == v[tier]["autoscaling"]["minReplicas"] >= 1
        dep = find(prod_objs, "Deployment", so["spec"]["scaleTargetRef"]["name"])
        assert "replicas" not in dep["spec"]  # KEDA owns the count
    fast = find(prod_objs, "ScaledObject", f"{FULL}-sglang-highspeed")
    assert fast["spec"]["minReplicaCount"] >= 2  # the fast tier stays warm


# -- engines and routers -------------------------------------------------------------------------
@pytest.mark.parametrize("tier", TIERS)
def test_engine_runs_its_profile(default_objs: list[Obj], tier: str) -> None:
    profile = load_profile(tier)
    dep = find(default_objs, "Deployment", f"{FULL}-sglang-{tier}")
    c = container(dep)
    assert c["command"] + c["args"] == render_argv(profile, host="0.0.0.0", port=rd.SGLANG_PORT)
    assert c["command"] == list(LAUNCH_PREFIX)
    assert c["image"] == f"lmsysorg/sglang:v{profile.sglang_version}"
    assert c["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert c["readinessProbe"]["httpGet"]["path"] == "/health"
    assert c["startupProbe"]["failureThreshold"] * c["startupProbe"]["periodSeconds"] >= 600
    spec = pod(dep)
    assert spec["nodeSelector"] and spec["tolerations"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["dshm"]["emptyDir"]["medium"] == "Memory"
    assert "hf-cache" in volumes
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    assert mounts == {"dshm": "/dev/shm", "hf-cache": "/root/.cache/huggingface"}
    (port,) = find(default_objs, "Service", f"{FULL}-sglang-{tier}")["spec"]["ports"]
    assert port["port"] == rd.SGLANG_PORT


def test_engine_options(tmp_path: Path) -> None:
    objs = template(
        "--set", "tiers.standard.gpus=2",
        "--set", "tiers.standard.modelCache.type=pvc",
        "--set", "tiers.standard.modelCache.accessMode=ReadWriteOnce",
        "--set", "tiers.standard.extraArgs={--log-level,debug}",
    )  # fmt: skip
    dep = find(objs, "Deployment", f"{FULL}-sglang-standard")
    c = container(dep)
    assert c["args"][-4:] == ["--tp-size", "2", "--log-level", "debug"]
    assert c["resources"]["limits"]["nvidia.com/gpu"] == 2
    # one ReadWriteOnce cache: a single pod, replaced by Recreate
    assert dep["spec"]["strategy"] == {"type": "Recreate"} and dep["spec"]["replicas"] == 1
    claim = next(v for v in pod(dep)["volumes"] if v["name"] == "hf-cache")
    find(objs, "PersistentVolumeClaim", claim["persistentVolumeClaim"]["claimName"])
    fast = find(objs, "Deployment", f"{FULL}-sglang-highspeed")
    assert container(fast)["resources"]["limits"]["nvidia.com/gpu"] == 1  # per tier


def flag_values(args: list[str], flag: str) -> list[str]:
    """The words after ``flag`` up to the next ``--`` flag."""
    i = args.index(flag) + 1
    out: list[str] = []
    while i < len(args) and not args[i].startswith("--"):
        out.append(args[i])
        i += 1
    return out


def test_router_discovers_the_tier_pods(prod_objs: list[Obj]) -> None:
    name = f"{FULL}-router-highspeed"
    dep = find(prod_objs, "Deployment", name)
    c = container(dep)
    assert c["command"] == ["python3", "-m", "sglang_router.launch_router"]
    args = c["args"]
    assert "--service-discovery" in args
    selector = dict(s.split("=", 1) for s in flag_values(args, "--selector"))
    engine = find(prod_objs, "Deployment", f"{FULL}-sglang-highspeed")
    assert selects(selector, engine["spec"]["template"]["metadata"]["labels"])
    standard = find(prod_objs, "Deployment", f"{FULL}-sglang-standard")
    assert not selects(selector, standard["spec"]["template"]["metadata"]["labels"])
    assert flag_values(args, "--service-discovery-namespace") == [NAMESPACE]
    assert flag_values(args, "--service-discovery-port") == [str(rd.SGLANG_PORT)]
    assert flag_values(args, "--policy") == ["cache_aware"]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert flag_values(args, "--prometheus-port") == [str(ports["metrics"])]
    assert pod(dep)["serviceAccountName"] == name
    (rule,) = find(prod_objs, "Role", name)["rules"]
    assert rule["resources"] == ["pods"] and set(rule["verbs"]) == {"get", "list", "watch"}
    binding = find(prod_objs, "RoleBinding", name)
    assert binding["roleRef"]["name"] == name
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": name, "namespace": NAMESPACE}]


# Parses argv lists (stdin, JSON) with the SGLang Model Gateway's own parser; prints the
# RouterArgs fields the chart sets, or the parser's complaint.
ROUTER_PARSE = """
import argparse, json, sys
from sglang_router.router_args import RouterArgs
FIELDS = ("host", "port", "prometheus_port", "policy", "service_discovery", "selector",
          "service_discovery_namespace", "service_discovery_port", "worker_urls")
parser = argparse.ArgumentParser(allow_abbrev=False, exit_on_error=False)
RouterArgs.add_cli_args(parser)
out = []
for argv in json.load(sys.stdin):
    try:
        args = RouterArgs.from_cli_args(parser.parse_args(argv))
        out.append({k: getattr(args, k) for k in FIELDS})
    except (argparse.ArgumentError, SystemExit) as e:
        out.append(str(e))
print(json.dumps(out))
"""


def parse_router_args(argvs: list[list[str]]) -> list[Any]:
    """``argvs`` through sglang-router's parser, in the venv ``make test`` installs it into."""
    from evals.bench import peers

    python = peers.VENV / "bin" / "python"
    stamp = peers.VENV / f".installed-{peers.SGLANG_ROUTER.replace('==', '-')}"
    if not stamp.exists():
        unavailable(f"{peers.SGLANG_ROUTER} is not in {peers.VENV}: run `make test`'s ROUTER_STAMP")
    proc = subprocess.run(
        [str(python), "-c", ROUTER_PARSE],
        input=json.dumps(argvs),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    result: list[Any] = json.loads(proc.stdout)
    return result


def test_router_args_parse_with_the_routers_own_parser(prod_objs: list[Obj]) -> None:
    static = template("--set", "tiers.standard.router.enabled=true",
                      "--set", "tiers.standard.router.discovery=false")  # fmt: skip
    cases = [(prod_objs, "highspeed"), (static, "standard")]
    containers = [container(find(o, "Deployment", f"{FULL}-router-{t}")) for o, t in cases]
    schema = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))
    policies = schema["definitions"]["routerDefaults"]["properties"]["policy"]["enum"]
    argvs = [c["args"] for c in containers] + [["--policy", p] for p in policies]
    parsed = parse_router_args([*argvs, ["--policy", "smartest"]])
    assert isinstance(parsed[-1], str)  # the parser does refuse what it does not know
    assert all(isinstance(p, dict) for p in parsed[:-1]), parsed  # every policy admitted is real
    for (objs, tier), c, args in zip(cases, containers, parsed, strict=False):
        assert c["command"][-1] == "sglang_router.launch_router"
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        assert (args["host"], args["port"]) == ("0.0.0.0", ports["http"])
        assert args["prometheus_port"] == ports["metrics"]
        assert args["policy"] == "cache_aware"
        engine = find(objs, "Deployment", f"{FULL}-sglang-{tier}")
        if args["service_discovery"]:
            labels = engine["spec"]["template"]["metadata"]["labels"]
            assert args["selector"] and selects(args["selector"], labels)
            assert args["service_discovery_namespace"] == NAMESPACE
            assert args["service_discovery_port"] == rd.SGLANG_PORT
        else:
            assert args["worker_urls"] == [f"http://{engine['metadata']['name']}:{rd.SGLANG_PORT}"]
    assert [a["service_discovery"] for a in parsed[:2]] == [True, False]


def test_router_static_mode() -> None:
    objs = template(
        "--set", "tiers.standard.router.enabled=true",
        "--set", "tiers.standard.router.discovery=false",
    )  # fmt: skip
    args = container(find(objs, "Deployment", f"{FULL}-router-standard"))["args"]
    assert "--service-discovery" not in args
    assert flag_values(args, "--worker-urls") == [f"http://{FULL}-sglang-standard:30000"]
    assert not kinds(objs, "Role")


# -- values the chart refuses --------------------------------------------------------------------
REFUSED = [
    ("replicaCount=-1", "/replicaCount"),
    ("workers=0", "/workers"),
    ("replicaCont=2", "replicaCont"),  # a typo is an error, not a silently ignored key
    ("redis.mode=sentinel", "/redis/mode"),
    ("tiers.highspeed.autoscaling.minReplicas=0", "minReplicas"),
    ("drainSeconds=-5", "/drainSeconds"),
    ("env.GATEWAY_PORT=1", "GATEWAY_PORT"),  # the chart sets it itself
    ("engineDefaults.modelCache.type=nfs", "modelCache"),
    ("redis.mode=none", "/workers"),  # no Redis: one pod with one worker
    ("terminationGracePeriodSeconds=30", "must exceed"),  # 30 <= preStop 5 + drain 30
    ("autoscaling.minReplicas=20", "minReplicas exceeds"),
    ("tiers.standard.engine=false,tiers.standard.router.enabled=true", "needs the tier's engines"),
]


@pytest.mark.parametrize(("setting", "says"), REFUSED, ids=[s for s, _ in REFUSED])
def test_bad_values_are_refused(setting: str, says: str) -> None:
    proc = helm("template", RELEASE, str(CHART), "--set", setting, check=False)
    assert proc.returncode != 0, f"--set {setting} was accepted"
    assert says in proc.stderr, proc.stderr


def test_no_redis_single_pod_is_accepted() -> None:
    objs = template(
        "--set", "redis.mode=none", "--set", "workers=1",
        "--set", "replicaCount=1", "--set", "autoscaling.enabled=false",
    )  # fmt: skip
    dep = find(objs, "Deployment", FULL)
    assert dep["spec"]["replicas"] == 1
    assert "GATEWAY_REDIS_URL" not in env(container(dep))
    assert not [o for o in objs if "redis" in o["metadata"]["name"]]


@pytest.fixture(scope="module", autouse=True)
def _chart_inputs_are_fresh() -> Iterator[None]:
    """The chart's generated files must match the sources (tests/test_deploy.py says how)."""
    assert rd.main(["--check"]) == 0, "run `python -m deploy.render`"
    yield
