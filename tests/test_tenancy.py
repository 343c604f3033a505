"""Tenants against the real Redis on 127.0.0.1:6379: two gateway replicas share one store.

Each test module run uses its own key prefix and deletes it afterwards.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import openai
import pytest
import yaml

from gateway.store.redis_store import RedisStore
from tests.conftest import REDIS, Proc, free_port, rules_for_tests, start_gateway
from tests.waiting import engine_got, until, wait_until

pytestmark = [pytest.mark.processes, pytest.mark.slow]

ADMIN = "admin-token-for-tests-0123456789"


def call(
    base: str,
    method: str,
    path: str,
    body: Any = None,
    token: str | None = ADMIN,
    raw: bytes | None = None,
) -> tuple[int, Any, dict[str, str]]:
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(base + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            text = r.read()
            return r.status, json.loads(text) if text else None, dict(r.headers)
    except urllib.error.HTTPError as e:
        text = e.read()
        return e.code, json.loads(text) if text else None, dict(e.headers)


def chat(
    base: str, key: str | None, content: str = "hi", model: str = "auto"
) -> tuple[int, Any, dict[str, str]]:
    return call(
        base,
        "POST",
        "/v1/chat/completions",
        {"model": model, "messages": [{"role": "user", "content": content}]},
        key,
    )


def tenancy_env(prefix: str, redis: str = REDIS) -> dict[str, str]:
    return {
        "GATEWAY_REDIS_URL": redis,
        "GATEWAY_REDIS_PREFIX": prefix,
        "GATEWAY_ADMIN_TOKEN": ADMIN,
        "GATEWAY_KEY_SECRET": "test-secret-1234",
    }


@pytest.fixture(scope="module")
def rules_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("rules") / "rules.yaml"


@pytest.fixture(scope="module")
def replica_procs(
    engines: dict[str, str], prefix: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[tuple[Proc, str]]]:
    tmp = tmp_path_factory.mktemp("gw")
    procs = [start_gateway(tmp, rules_for_tests(), engines, tenancy_env(prefix)) for _ in "ab"]
    yield procs
    for p, _ in procs:
        p.stop()


@pytest.fixture(scope="module")
def replicas(replica_procs: list[tuple[Proc, str]]) -> list[str]:
    """The replicas' data ports."""
    return [url for _, url in replica_procs]


@pytest.fixture(scope="module")
def admins(replica_procs: list[tuple[Proc, str]]) -> list[str]:
    """The replicas' admin listeners, in the same order."""
    return [p.admin for p, _ in replica_procs]


def new_tenant(admin: str, policy: dict[str, Any] | None = None) -> tuple[str, str, str]:
    """A tenant with one key, made through the admin API at ``admin``: (tenant, key id, key)."""
    st, t, _ = call(admin, "POST", "/admin/tenants", {"name": "team", "policy": policy or {}})
    assert st == 201, t
    st, k, _ = call(admin, "POST", f"/admin/tenants/{t['id']}/keys", {"name": "ci"})
    assert st == 201, k
    return t["id"], k["id"], k["key"]


# --- keys and the admin API ----------------------------------------------


def test_a_key_works_on_every_replica_and_the_openai_sdk(
    replicas: list[str], admins: list[str]
) -> None:
    _, _, key = new_tenant(admins[0])
    for base in replicas:
        c = openai.OpenAI(base_url=f"{base}/v1", api_key=key, max_retries=0)
        r = c.chat.completions.create(model="auto", messages=[{"role": "user", "content": "x"}])
        assert r.choices[0].message.content == "Echo (highspeed): x"


@pytest.mark.parametrize(
    ("key", "code"),
    [(None, "invalid_api_key"), ("gk-wrong", "invalid_api_key")],
    ids=["missing", "wrong"],
)
def test_v1_needs_a_valid_key(replicas: list[str], key: str | None, code: str) -> None:
    st, body, _ = chat(replicas[0], key)
    assert st == 401 and body["error"]["code"] == code
    assert body["error"]["type"] == "authentication_error"


@pytest.mark.parametrize("token", [None, "wrong-token", "TENANT"], ids=["none", "wrong", "tenant"])
def test_admin_refuses_missing_wrong_and_tenant_tokens(
    admins: list[str], token: str | None
) -> None:
    if token == "TENANT":
        token = new_tenant(admins[0])[2]
    for method, path in [
        ("GET", "/admin/tenants"),
        ("POST", "/admin/tenants"),
        ("GET", "/admin/audit"),
        ("PUT", "/admin/rules"),
    ]:
        st, body, _ = call(admins[0], method, path, {"name": "x"}, token=token)
        assert st == 401 and body["error"]["code"] == "invalid_admin_token", (method, path)


def test_admin_api_is_off_without_a_token(gateway_proc: Proc) -> None:
    """Nothing listens on the admin port (a second gateway on the machine can start), and
    the start-up says so."""
    with pytest.raises(OSError):
        call(gateway_proc.admin, "GET", "/admin/tenants")
    assert "admin API and console off" in gateway_proc.log()


def test_plaintext_key_is_shown_once_and_never_again(
    replicas: list[str], admins: list[str]
) -> None:
    tid, kid, key = new_tenant(admins[0])
    for path in (
        f"/admin/tenants/{tid}",
        f"/admin/tenants/{tid}/keys",
        "/admin/audit?limit=50",
        "/admin/tenants",
    ):
        _, body, _ = call(replicas[0], "GET", path)
        assert key not in json.dumps(body)
        assert key[10:] not in json.dumps(body)
    _, t, _ = call(admins[0], "GET", f"/admin/tenants/{tid}")
    assert t["keys"][0]["id"] == kid and t["keys"][0]["prefix"] == key[:10]


def test_revoked_key_stops_working_everywhere_before_the_cache_expires(
    replicas: list[str], admins: list[str]
) -> None:
    _, kid, key = new_tenant(admins[0])
    assert all(chat(b, key)[0] == 200 for b in replicas)  # both replicas cached it
    st, _, _ = call(admins[0], "DELETE", f"/admin/keys/{kid}")
    assert st == 204
    # well inside the 30 s the other replica caches a key for: only the revocation's
    # broadcast can do it in time (idle, it takes milliseconds)
    assert until(lambda: chat(replicas[1], key)[0] == 401, timeout=10.0)
    assert chat(replicas[0], key)[0] == 401


def test_rotate_gives_a_new_key_and_kills_the_old(replicas: list[str], admins: list[str]) -> None:
    _, kid, key = new_tenant(admins[0])
    st, new, _ = call(admins[0], "POST", f"/admin/keys/{kid}/rotate")
    assert st == 201 and new["replaces"] == kid and new["key"] != key
    assert until(lambda: chat(replicas[1], key)[0] == 401, timeout=10.0)  # as for a revocation
    assert chat(replicas[1], new["key"])[0] == 200


def test_tenant_crud_and_validation(admins: list[str]) -> None:
    base = admins[0]
    st, t, _ = call(
        base, "POST", "/admin/tenants", {"name": "acme", "policy": {"requests_per_minute": 10}}
    )
    assert st == 201 and t["policy"] == {"requests_per_minute": 10} and t["id"].startswith("ten_")
    st, t2, _ = call(base, "PATCH", f"/admin/tenants/{t['id']}", {"name": "acme2"})
    assert st == 200 and t2["name"] == "acme2" and t2["version"] == t["version"] + 1
    st, p, _ = call(base, "PUT", f"/admin/tenants/{t['id']}/policy", {"forced_tier": "standard"})
    assert st == 200 and p["policy"] == {"forced_tier": "standard"}
    for body, code in [
        ({"forced_tier": "gpu9"}, "invalid_policy"),
        ({"requests_per_minute": 0}, "invalid_value"),
        ({"colour": "red"}, "invalid_value"),
    ]:
        st, err, _ = call(base, "PUT", f"/admin/tenants/{t['id']}/policy", body)
        assert (st, err["error"]["code"]) in ((422, code), (400, code)), err
    st, _, _ = call(base, "DELETE", f"/admin/tenants/{t['id']}")
    assert st == 204
    assert call(base, "GET", f"/admin/tenants/{t['id']}")[0] == 404
    assert call(base, "POST", "/admin/tenants", raw=b"{nope")[0] == 400


def test_concurrent_patches_lose_no_update(admins: list[str]) -> None:
    tid, _, _ = new_tenant(admins[0])
    fields = [
        ("requests_per_minute", 100),
        ("tokens_per_minute", 1000),
        ("max_concurrent_requests", 5),
        ("shadow_rate", 0.5),
        ("fallback_enabled", True),
        ("default_sla", "batch"),
    ]

    def patch(i: int) -> int:
        name, value = fields[i % len(fields)]
        return call(admins[i % 2], "PATCH", f"/admin/tenants/{tid}", {"policy": {name: value}})[0]

    with ThreadPoolExecutor(12) as ex:
        assert set(ex.map(patch, range(24))) == {200}
    _, t, _ = call(admins[0], "GET", f"/admin/tenants/{tid}")
    assert t["policy"] == dict(fields)
    assert t["version"] == 1 + 24


def test_audit_log_records_writes(admins: list[str]) -> None:
    tid, _, _ = new_tenant(admins[0])
    _, log, _ = call(admins[0], "GET", "/admin/audit?limit=5")
    actions = [(e["action"], e["target"]) for e in log["data"]]
    assert ("tenant.create", tid) in actions
    assert all("at" in e and "who" in e for e in log["data"])


def test_openapi_lists_the_admin_routes(admins: list[str]) -> None:
    _, spec, _ = call(admins[0], "GET", "/admin/openapi.json")
    assert spec["openapi"].startswith("3.")
    assert "post" in spec["paths"]["/admin/tenants"]
    assert "delete" in spec["paths"]["/admin/keys/{key_id}"]
    assert "requestBody" in spec["paths"]["/admin/tenants/{tenant_id}/policy"]["put"]


# --- policy enforcement ----------------------------------------------


def test_policy_change_on_one_replica_is_enforced_on_the_other(
    replicas: list[str], admins: list[str]
) -> None:
    tid, _, key = new_tenant(admins[0])
    assert chat(replicas[1], key)[2]["x-gateway-tier"] == "highspeed"
    call(admins[0], "PATCH", f"/admin/tenants/{tid}", {"policy": {"forced_tier": "standard"}})
    assert until(lambda: chat(replicas[1], key)[2].get("x-gateway-tier") == "standard")
    h = chat(replicas[1], key)[2]
    assert "pinned by forced_tier (tenant)" in h["x-gateway-route"]


def test_key_policy_beats_tenant_policy_and_explain_says_so(
    replicas: list[str], admins: list[str]
) -> None:
    tid, _, _ = new_tenant(admins[0], {"allowed_tiers": ["standard"]})
    st, k, _ = call(
        admins[0],
        "POST",
        f"/admin/tenants/{tid}/keys",
        {"policy": {"allowed_tiers": ["highspeed", "standard"]}},
    )
    assert chat(replicas[0], k["key"], model="fast")[0] == 200
    st, out, _ = call(
        admins[0],
        "POST",
        "/admin/explain",
        {
            "tenant_id": tid,
            "body": {"model": "auto", "messages": [{"role": "user", "content": "hi"}]},
        },
    )
    assert st == 200 and out["tiers"] == ["standard"]
    assert out["policy"]["allowed_tiers"]["level"] == "tenant"


def test_disallowed_tier_is_403(replicas: list[str], admins: list[str]) -> None:
    _, _, key = new_tenant(admins[0], {"allowed_tiers": ["standard"]})
    st, body, _ = chat(replicas[0], key, model="fast")
    assert st == 403 and body["error"]["code"] == "tier_not_allowed"
    st, _, h = chat(replicas[0], key)
    assert st == 200 and h["x-gateway-tier"] == "standard"


def test_global_rate_limit_holds_across_replicas(replicas: list[str], admins: list[str]) -> None:
    _, _, key = new_tenant(admins[0], {"requests_per_minute": 6})
    codes = [chat(replicas[i % 2], key) for i in range(8)]
    assert [c[0] for c in codes] == [200] * 6 + [429] * 2
    _st, body, h = codes[-1]
    assert body["error"]["code"] == "rate_limit_exceeded" and body["error"]["type"] == "requests"
    assert int(h["Retry-After"]) >= 1
    assert h["x-ratelimit-limit-requests"] == "6"
    assert codes[0][2]["x-ratelimit-remaining-requests"] == "5"


def test_token_budget_gives_insufficient_quota(replicas: list[str], admins: list[str]) -> None:
    _, _, key = new_tenant(admins[0], {"token_budget": {"tokens": 30, "period": "day"}})
    # the fake engine reports 10 prompt tokens + one per word (4 words): 14 a request
    assert chat(replicas[0], key)[0] == 200
    assert chat(replicas[1], key)[0] == 200
    assert until(lambda: chat(replicas[0], key)[0] == 429)
    st, body, _ = chat(replicas[1], key)
    assert st == 429 and body["error"]["code"] == "insufficient_quota"
    assert body["error"]["type"] == "insufficient_quota"


def test_concurrency_limit(replicas: list[str], admins: list[str], engines: dict[str, str]) -> None:
    tid, _, key = new_tenant(admins[0], {"max_concurrent_requests": 1})
    marker = f"hold-{tid}"
    with ThreadPoolExecutor(2) as ex:
        slow = ex.submit(chat, replicas[0], key, f"{marker} [[*: delay=0.6]]")
        # at the engine, so admitted: the tenant's one slot is held for the engine's 0.6 s
        wait_until(lambda: engine_got(engines.values(), marker), "the slow request upstream")
        st, body, _ = chat(replicas[1], key)
        assert st == 429 and "concurrent" in body["error"]["message"]
        assert slow.result()[0] == 200
    assert until(lambda: chat(replicas[1], key)[0] == 200)


def test_a_client_that_leaves_frees_its_slot(replicas: list[str], admins: list[str]) -> None:
    _, _, key = new_tenant(admins[0], {"max_concurrent_requests": 1})
    body = json.dumps(
        {"model": "auto", "messages": [{"role": "user", "content": "[[*: delay=1.5]]"}]}
    ).encode()
    req = urllib.request.Request(
        f"{replicas[0]}/v1/chat/completions",
        data=body,
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"},
    )
    with pytest.raises(OSError):  # the client gives up while the engine is still thinking
        urllib.request.urlopen(req, timeout=0.3)
    # the slot comes back when the gateway sees the client gone, not at its expiry
    assert until(lambda: chat(replicas[1], key)[0] == 200)  # the slot's expiry: 15 min


def test_usage_by_tier_and_fallback_reason(replicas: list[str], admins: list[str]) -> None:
    tid, _, key = new_tenant(admins[0])
    chat(replicas[0], key)
    chat(replicas[1], key, "[[highspeed: status=500]]")
    # the engine refuses the request itself: relayed to the client, no fallback (as the
    # tiers page counts fallbacks: attempts that failed and went on)
    assert chat(replicas[0], key, "[[highspeed: status=400]]")[0] == 400

    def usage() -> dict[str, Any]:
        body: dict[str, Any] = call(admins[0], "GET", f"/admin/tenants/{tid}/usage")[1]
        return body

    assert until(lambda: usage()["requests"] == 3)
    u = usage()
    assert {t for t, n in u["tokens_by_tier"].items() if n} == {"highspeed", "standard"}
    assert u["fallbacks_by_reason"] == {"http_500": 1}


# --- rules ----------------------------------------------


def rules_yaml(**change: Any) -> str:
    data = rules_for_tests()
    data.update(change)
    return yaml.safe_dump(data)


def test_bad_rules_upload_is_rejected_whole(replicas: list[str], admins: list[str]) -> None:
    st, before, _ = call(admins[0], "GET", "/admin/rules")
    st, body, _ = call(
        admins[0], "PUT", "/admin/rules", raw=rules_yaml(default_sla="asap", colour=1).encode()
    )
    assert st == 422 and body["error"]["code"] == "invalid_rules"
    assert "default_sla: unknown SLA class 'asap'" in " ".join(body["error"]["errors"]) or any(
        "colour" in e for e in body["error"]["errors"]
    )
    _, after, _ = call(admins[0], "GET", "/admin/rules")
    assert after["version"] == before["version"] and after["last_error"]["errors"]
    assert chat(replicas[0], new_tenant(admins[0])[2])[0] == 200


@pytest.mark.parametrize(
    ("content", "enabled"),
    [
        (b"not json\n", True),
        (b"not json\n", False),
        (b"[1, 2]", True),
        (b'{"labels": ["chat", "code"]}', True),
        (b'{"labels": ["chat", "code"], "bias": [0.0], "weights": {}, "spec": {}}', True),
        (b'{"labels": ["chat"], "bias": ["x"], "weights": {}, "spec": {}}', True),
        (b'{"labels": ["chat"], "bias": [0.0], "weights": {}, "spec": {"colour": 1}}', True),
        (
            b'{"labels": ["chat", "code"], "bias": [0, 1], "weights": {"zzz": ["x", "y"]}, '
            b'"spec": {}}',
            True,
        ),
        (b'{"labels": [["chat"], "code"], "bias": [0, 1], "weights": {}, "spec": {}}', True),
        (b'{"labels": ["chat", "chat"], "bias": [0, 1], "weights": {}, "spec": {}}', True),
    ],
    ids=[
        "not-json",
        "not-json-model-off",
        "a-list",
        "no-weights",
        "short-bias",
        "text-bias",
        "unknown-spec",
        "text-weight-row",
        "list-label",
        "same-label-twice",
    ],
)
def test_rules_naming_a_file_that_is_not_a_model_are_rejected_whole(
    replicas: list[str], admins: list[str], tmp_path: Path, content: bytes, enabled: bool
) -> None:
    """The model file is read when the rules are validated: one that exists but is not a
    model is a 422 naming the field, on no replica a new version, and requests go on."""
    model = tmp_path / "model.json"
    model.write_bytes(content)
    versions = [call(admin, "GET", "/admin/rules")[1]["version"] for admin in admins]
    data = rules_for_tests()
    data.setdefault("classify", {}).setdefault("model", {}).update(enabled=enabled, path=str(model))
    st, body, _ = call(admins[0], "PUT", "/admin/rules", raw=yaml.safe_dump(data).encode())
    assert st == 422 and body["error"]["code"] == "invalid_rules", body
    assert any(e.startswith("classify.model.path: ") for e in body["error"]["errors"]), body
    assert [call(admin, "GET", "/admin/rules")[1]["version"] for admin in admins] == versions
    key = new_tenant(admins[0])[2]
    assert [chat(url, key)[0] for url in replicas] == [200, 200]


def test_a_rules_change_that_drops_what_a_policy_names_fails_no_request(
    replicas: list[str], admins: list[str], engines: dict[str, str]
) -> None:
    """Policies are checked against the rules they were written under. A later version
    without a tier or SLA class a policy names: that part of the policy is ignored and the
    route header says so, on every replica (it was a 500 on every request of the tenant)."""
    with_extra = rules_for_tests()
    with_extra["tiers"]["extra"] = {
        **with_extra["tiers"]["standard"],
        "endpoints": [engines["standard"]],
    }
    st, body, _ = call(admins[0], "PUT", "/admin/rules", raw=yaml.safe_dump(with_extra).encode())
    assert st == 200, body
    version = body["version"]
    assert until(
        lambda: all(call(a, "GET", "/admin/rules")[1]["version"] == version for a in admins)
    )
    rule = {"name": "mine", "when": {"task": ["chat"]}, "tier": "extra"}
    sla_rule = {"name": "own-sla", "when": {"task": ["chat"]}, "tier": "standard", "sla": "batch"}
    policies: dict[str, dict[str, Any]] = {
        "forced_tier": {"forced_tier": "extra"},
        "default_sla": {"default_sla": "batch"},
        "rules": {"rules": [rule]},
        "sla_rule": {"rules": [sla_rule]},
    }
    keys = {name: new_tenant(admins[0], policy)[2] for name, policy in policies.items()}
    assert {n: chat(replicas[0], k)[0] for n, k in keys.items()} == dict.fromkeys(policies, 200)

    without = rules_for_tests()
    del without["sla_classes"]["batch"]
    without["rules"] = [r for r in without["rules"] if "batch" not in str(r)]
    for task in without["tasks"].values():
        if task.get("default_sla") == "batch":
            task["default_sla"] = without["default_sla"]
    st, body, _ = call(admins[0], "PUT", "/admin/rules", raw=yaml.safe_dump(without).encode())
    assert st == 200, body
    version = body["version"]
    try:
        assert until(
            lambda: all(call(a, "GET", "/admin/rules")[1]["version"] == version for a in admins)
        )
        lacking = {
            "forced_tier": "forced_tier extra",
            "default_sla": "default_sla batch",
            "rules": "rule mine (tier extra)",
            "sla_rule": "rule own-sla (sla batch)",
        }
        for url in replicas:
            for name, key in keys.items():
                st, body, h = chat(url, key)
                assert st == 200, (name, body)
                assert f"policy ignored, not in the rules: {lacking[name]}" in h["x-gateway-route"]
    finally:
        assert call(admins[0], "PUT", "/admin/rules", raw=rules_yaml().encode())[0] == 200


def test_rules_upload_reaches_every_replica_and_rolls_back(
    replicas: list[str], admins: list[str]
) -> None:
    _, _, key = new_tenant(admins[0])
    _, before, _ = call(admins[0], "GET", "/admin/rules")
    aliases = {
        "auto": None,
        "fast": "highspeed",
        "highspeed": "highspeed",
        "standard": "standard",
        "quick": "highspeed",
    }
    st, body, _ = call(admins[0], "PUT", "/admin/rules", raw=rules_yaml(aliases=aliases).encode())
    assert st == 200 and body["version"] > before["version"]

    def by_wildcard(replica: str) -> bool:  # "quick" taken by the rules' "*" alias
        st, _, headers = chat(replica, key, model="quick")
        return st == 200 and 'by alias "*"' in headers.get("x-gateway-route", "")

    assert until(lambda: chat(replicas[1], key, model="quick")[0] == 200)
    assert not by_wildcard(replicas[1])  # its own alias now
    st, _, _ = call(admins[1], "POST", "/admin/rules/rollback", {"version": before["version"]})
    assert st == 200
    assert until(lambda: by_wildcard(replicas[0]))
    _, versions, _ = call(admins[0], "GET", "/admin/rules/versions")
    cur = [v for v in versions["data"] if v["current"]]
    assert cur[0]["version"] == before["version"]


def test_rules_file_change_is_picked_up_and_a_bad_one_ignored(
    engines: dict[str, str], tmp_path: Path
) -> None:
    path = tmp_path / "r.yaml"
    port = free_port()
    path.write_text(rules_yaml(aliases={"auto": None}))  # strict: an unknown model is a 404
    env = {
        "GATEWAY_ADMIN_TOKEN": ADMIN,
        "GATEWAY_RULES_WATCH_INTERVAL": "0.1",
        **{f"GATEWAY_POOL_{k.upper()}_URLS": v for k, v in engines.items()},
    }
    import sys

    proc = Proc(
        [sys.executable, "-m", "gateway.cli", "serve", "--rules", str(path), "--port", str(port)],
        f"http://127.0.0.1:{port}/healthz",
        env=env,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        _, _, key = new_tenant(proc.admin)
        assert chat(base, key, model="quick")[0] == 404
        path.write_text(rules_yaml(aliases={"auto": None, "quick": "standard"}))
        assert until(lambda: chat(base, key, model="quick")[0] == 200)
        path.write_text("tiers: [broken")
        assert until(lambda: call(proc.admin, "GET", "/admin/rules")[1]["last_error"] is not None)
        assert chat(base, key, model="quick")[0] == 200  # the good rules still run
    finally:
        proc.stop()


# --- Redis down ----------------------------------------------


def test_redis_down_serves_cached_keys_and_resyncs(engines: dict[str, str], tmp_path: Path) -> None:
    port = free_port()
    redis = subprocess.Popen(
        [
            "redis-server",
            "--port",
            str(port),
            "--save",
            "",
            "--appendonly",
            "no",
            "--bind",
            "127.0.0.1",
        ],
        stdout=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    try:
        assert until(
            lambda: (
                subprocess.run(
                    ["redis-cli", "-p", str(port), "ping"], capture_output=True
                ).stdout.strip()
                == b"PONG"
            )
        )
        proc, base = start_gateway(
            tmp_path, rules_for_tests(), engines, tenancy_env("gwdown:", url)
        )
        try:
            _, _, key = new_tenant(proc.admin, {"requests_per_minute": 1000})
            _, _, other = new_tenant(proc.admin)
            _, _, strict = new_tenant(proc.admin, {"fail_closed": True})
            assert chat(base, key)[0] == 200
            assert chat(base, strict)[0] == 200
            redis.terminate()
            redis.wait()
            st, body, _ = chat(base, key)
            assert st == 200  # last known policy, per-replica limits
            st, body, _ = chat(base, other)  # never seen by this replica: cannot be verified
            assert st == 503 and body["error"]["code"] == "store_unavailable"
            assert chat(base, strict)[0] == 503  # its policy says: refuse while blind
            st, _, _ = call(proc.admin, "GET", "/admin/tenants")
            assert st == 503
            redis = subprocess.Popen(
                [
                    "redis-server",
                    "--port",
                    str(port),
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--bind",
                    "127.0.0.1",
                ],
                stdout=subprocess.DEVNULL,
            )
            # an empty Redis came back (no persistence): the gateway recovers by itself
            assert until(lambda: call(proc.admin, "GET", "/admin/tenants")[0] == 200)
            _, _, fresh = new_tenant(proc.admin)
            assert chat(base, fresh)[0] == 200
        finally:
            proc.stop()
    finally:
        redis.terminate()
        redis.wait()


def test_admin_cli_wraps_the_api(replicas: list[str], admins: list[str]) -> None:
    import sys

    def admin(*args: str) -> Any:
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "gateway.cli",
                "admin",
                "--url",
                admins[1],
                "--token",
                ADMIN,
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert r.returncode == 0, r.stderr + r.stdout
        return json.loads(r.stdout)

    t = admin("tenants-create", "cli-team", "--policy", '{"requests_per_minute": 50}')
    k = admin("keys-create", t["id"], "--name", "laptop")
    assert chat(replicas[0], k["key"])[0] == 200
    assert admin("policy-get", t["id"]) == {"requests_per_minute": 50}
    assert admin("usage", t["id"])["tenant_id"] == t["id"]


def test_keys_never_reach_the_logs(replica_procs: list[tuple[Proc, str]]) -> None:
    proc, base = replica_procs[0]
    _, kid, key = new_tenant(proc.admin)
    chat(base, key, "[[highspeed: status=500]]")
    chat(base, "gk-not-a-real-key")
    call(proc.admin, "DELETE", f"/admin/keys/{kid}")
    for proc, _ in replica_procs:
        log = proc.log()
        assert key not in log and key[10:] not in log and ADMIN not in log


def test_shadow_sampling_compares_with_standard_off_the_critical_path(
    replicas: list[str],
    admins: list[str],
) -> None:
    _, _, key = new_tenant(admins[0], {"shadow_rate": 1.0})
    st, body, h = chat(replicas[0], key, "shadow me")
    assert st == 200 and h["x-gateway-tier"] == "highspeed"  # the client's answer: untouched
    assert body["choices"][0]["message"]["content"] == "Echo (highspeed): shadow me"

    def records() -> list[dict[str, Any]]:
        data: list[dict[str, Any]] = call(admins[0], "GET", "/admin/shadow?limit=50")[1]["data"]
        return data

    assert until(lambda: any(r["tier"] == "highspeed" for r in records()))
    rec = records()[0]
    assert rec["against"] == "standard" and rec["task"] == "chat"
    # "Echo (highspeed): shadow me" vs "Echo (standard): shadow me": 3 of 4 words shared
    assert rec["f1"] == 0.75 and rec["agree"] is True and rec["exact"] is False


def test_the_first_call_after_a_redis_restart_reconnects_instead_of_failing() -> None:
    """Pooled connections that a restarted Redis dropped are stale: the first command on
    each reconnects once, so a fresh key's lookup is not a 503."""
    port = free_port()
    argv = ["redis-server", "--port", str(port), "--save", "", "--appendonly", "no"]

    def start() -> subprocess.Popen[bytes]:
        p = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
        ping = ["redis-cli", "-p", str(port), "ping"]
        assert until(lambda: subprocess.run(ping, capture_output=True).stdout.strip() == b"PONG")
        return p

    redis: subprocess.Popen[bytes]  # started below, restarted by go()

    async def go() -> int:
        store = RedisStore(f"redis://127.0.0.1:{port}/0", "gwrestart:")
        try:
            await asyncio.gather(*(store.key_by_digest("x") for _ in range(8)))  # 8 pooled
            nonlocal redis
            redis.terminate()
            redis.wait()
            redis = start()
            found = [await store.key_by_digest("y") for _ in range(8)]  # none may raise
            return len(found)
        finally:
            await store.close()

    redis = start()
    try:
        assert asyncio.run(go()) == 8
    finally:
        redis.terminate()
        redis.wait()
