"""The admin control plane on its own listener (FastAPI in the gateway's process).

Real gateway processes on real sockets; the store is the in-process one (an admin token
and no Redis), so nothing here touches Redis.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.admin.models import KeyList, NewKeyOut, TenantDetail, TenantList, TenantOut
from tests.conftest import ROOT, Proc, free_port, rules_for_tests, start_gateway
from tests.test_tenancy import ADMIN, call

BODY_LIMIT = 64 * 1024
ROUTES = (
    ("POST", "/admin/tenants"),
    ("GET", "/admin/tenants"),
    ("GET", "/admin/tenants/{tenant_id}"),
    ("PATCH", "/admin/tenants/{tenant_id}"),
    ("DELETE", "/admin/tenants/{tenant_id}"),
    ("GET", "/admin/tenants/{tenant_id}/policy"),
    ("PUT", "/admin/tenants/{tenant_id}/policy"),
    ("POST", "/admin/tenants/{tenant_id}/keys"),
    ("GET", "/admin/tenants/{tenant_id}/keys"),
    ("GET", "/admin/tenants/{tenant_id}/usage"),
    ("GET", "/admin/tenants/{tenant_id}/cache"),
    ("DELETE", "/admin/tenants/{tenant_id}/cache"),
    ("DELETE", "/admin/tenants/{tenant_id}/cache/{key}"),
    ("DELETE", "/admin/keys/{key_id}"),
    ("POST", "/admin/keys/{key_id}/rotate"),
    ("GET", "/admin/rules"),
    ("PUT", "/admin/rules"),
    ("POST", "/admin/rules/reload"),
    ("POST", "/admin/rules/rollback"),
    ("GET", "/admin/rules/versions"),
    ("GET", "/admin/rules/versions/{version}"),
    ("GET", "/admin/pools"),
    ("POST", "/admin/explain"),
    ("GET", "/admin/audit"),
    ("GET", "/admin/shadow"),
)


@pytest.fixture(scope="module")
def gw(
    engines: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Proc, str]]:
    """A gateway with the admin API on (proc.admin) and its data port."""
    env = {"GATEWAY_ADMIN_TOKEN": ADMIN, "GATEWAY_MAX_BODY_BYTES": str(BODY_LIMIT)}
    proc, url = start_gateway(tmp_path_factory.mktemp("gw"), rules_for_tests(), engines, env)
    yield proc, url
    proc.stop()


def get(url: str) -> tuple[int, bytes, dict[str, str]]:
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.status, r.read(), dict(r.headers)


def serve_argv(tmp: Path, *extra: str) -> tuple[list[str], int]:
    rules = tmp / f"rules-{free_port()}.yaml"
    rules.write_text(yaml.safe_dump(rules_for_tests()))
    port = free_port()
    argv = [sys.executable, "-m", "gateway.cli", "serve", "--rules", str(rules)]
    return [*argv, "--port", str(port), *extra], port


def admin_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway.cli", "admin", *args],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", **(env or {})},
    )


# --- the data port has no admin API ------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/admin"), ("GET", "/admin/tenants"), ("POST", "/admin/tenants"),
     ("GET", "/admin/openapi.json")],
)  # fmt: skip
def test_the_data_port_points_at_the_admin_listener(
    gw: tuple[Proc, str], method: str, path: str
) -> None:
    proc, url = gw
    st, body, h = call(url, method, path, {"name": "x"})
    port = proc.admin.rsplit(":", 1)[1]
    assert st == 404 and body["error"]["code"] == "not_found", body
    assert f"own listener (127.0.0.1:{port})" in body["error"]["message"]
    assert body["error"]["type"] == "invalid_request_error" and "x-request-id" in h


def test_other_paths_on_the_data_port_are_unchanged(gw: tuple[Proc, str]) -> None:
    st, body, _ = call(gw[1], "GET", "/administrator")
    assert st == 404 and body["error"]["message"] == "Unknown path /administrator."


# --- the generated OpenAPI document ------------------------------------------------------


def test_openapi_is_generated_and_lists_every_admin_route(gw: tuple[Proc, str]) -> None:
    admin = gw[0].admin
    st, raw, h = get(f"{admin}/openapi.json")  # no token needed
    spec = json.loads(raw)
    assert st == 200 and h["content-type"].startswith("application/json")
    assert spec["openapi"].startswith("3.") and spec["info"]["title"] == "llm-gateway admin API"
    listed = {(m.upper(), p) for p, ops in spec["paths"].items() for m in ops}
    assert listed == set(ROUTES)
    ops = [op for p in spec["paths"].values() for op in p.values()]
    assert all(op["security"] == [{"admin": []}] for op in ops)
    assert len({op["operationId"] for op in ops}) == len(ROUTES)
    assert spec["components"]["securitySchemes"]["admin"]["scheme"] == "bearer"
    schemas = spec["components"]["schemas"]
    models = {"TenantIn", "TenantPatch", "KeyIn", "Rollback", "ExplainIn", "Policy"}
    assert models | {"TenantOut", "NewKeyOut", "ErrorOut"} <= set(schemas)
    assert "HTTPValidationError" not in schemas  # a bad body is our 400 envelope
    assert schemas["TenantIn"]["required"] == ["name"]
    create = spec["paths"]["/admin/tenants"]["post"]
    body_ref = create["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    assert body_ref == "#/components/schemas/TenantIn" and "201" in create["responses"]
    upload = spec["paths"]["/admin/rules"]["put"]["requestBody"]["content"]
    assert "application/yaml" in upload
    assert json.loads(get(f"{admin}/admin/openapi.json")[1]) == spec


def test_docs_page_answers(gw: tuple[Proc, str]) -> None:
    st, raw, h = get(f"{gw[0].admin}/docs")
    assert st == 200 and h["content-type"].startswith("text/html")
    assert b"swagger" in raw.lower() and b"/openapi.json" in raw


# --- errors in the envelope ------------------------------------------------------------


@pytest.mark.parametrize("token", [None, "wrong-token", ADMIN[:-1]], ids=["none", "wrong", "near"])
def test_a_wrong_token_is_a_401_envelope(gw: tuple[Proc, str], token: str | None) -> None:
    st, body, _ = call(gw[0].admin, "GET", "/admin/tenants", token=token)
    assert st == 401 and body["error"] == {
        "message": "A valid admin token is required.",
        "type": "authentication_error",
        "param": None,
        "code": "invalid_admin_token",
    }


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/admin/tenants", {"name": ""}, "name"),
        ("/admin/tenants", {"name": "x", "policy": {"requests_per_minute": 0}},
         "policy.requests_per_minute"),
        ("/admin/tenants", {"name": "x", "colour": "red"}, "colour"),
        ("/admin/tenants", None, "name"),  # an empty body reads as {}
        ("/admin/rules/rollback", {"version": 0}, "version"),
        ("/admin/explain", {"path": "/v1/completions"}, "body"),
    ],
)  # fmt: skip
def test_a_bad_body_is_a_400_naming_the_field(
    gw: tuple[Proc, str], path: str, body: Any, param: str
) -> None:
    st, err, _ = call(gw[0].admin, "POST", path, body)
    assert st == 400, err
    assert err["error"]["code"] == "invalid_value" and err["error"]["param"] == param
    assert err["error"]["message"].startswith(f"Invalid '{param}': ")


def test_bad_json_bad_query_and_unknown_paths(gw: tuple[Proc, str]) -> None:
    admin = gw[0].admin
    st, err, _ = call(admin, "POST", "/admin/tenants", raw=b"{nope")
    assert st == 400 and err["error"]["code"] == "invalid_json"
    assert err["error"]["message"].startswith("The request body is not valid JSON: ")
    assert call(admin, "POST", "/admin/tenants", raw=b"{nope", token="wrong")[0] == 401
    st, err, _ = call(admin, "GET", "/admin/audit?limit=many")
    assert st == 400 and err["error"]["param"] == "limit"
    st, err, _ = call(admin, "GET", "/admin/nothing")
    assert st == 404 and err["error"]["message"] == "Unknown path /admin/nothing."
    st, err, h = call(admin, "DELETE", "/admin/tenants")
    assert st == 405 and err["error"]["code"] == "method_not_allowed" and h["allow"] == "POST"
    st, err, _ = call(admin, "GET", "/admin/tenants/ten_missing")
    assert st == 404 and err["error"]["message"] == "No tenant 'ten_missing'."


def test_a_body_over_the_limit_is_a_413(gw: tuple[Proc, str]) -> None:
    big = b"# " + b"x" * BODY_LIMIT + b"\n"
    st, err, _ = call(gw[0].admin, "PUT", "/admin/rules", raw=big)
    assert st == 413 and err["error"]["code"] == "request_too_large"
    assert call(gw[0].admin, "GET", "/admin/rules")[1]["last_error"] is None


def test_bodies_and_statuses_follow_the_models(gw: tuple[Proc, str]) -> None:
    admin = gw[0].admin
    st, t, _ = call(admin, "POST", "/admin/tenants", {"name": "m", "policy": {"shadow_rate": 0}})
    assert st == 201 and TenantOut.model_validate(t) and t["policy"] == {"shadow_rate": 0}
    st, k, _ = call(admin, "POST", f"/admin/tenants/{t['id']}/keys", raw=b"")
    assert st == 201 and NewKeyOut.model_validate(k) and "replaces" not in k
    st, k2, _ = call(admin, "POST", f"/admin/keys/{k['id']}/rotate")
    assert st == 201 and k2["replaces"] == k["id"]
    assert KeyList.model_validate(call(admin, "GET", f"/admin/tenants/{t['id']}/keys")[1])
    assert TenantList.model_validate(call(admin, "GET", "/admin/tenants")[1])
    detail = call(admin, "GET", f"/admin/tenants/{t['id']}")[1]
    assert [x.id for x in TenantDetail.model_validate(detail).keys] == [k2["id"]]
    st, p, _ = call(admin, "PUT", f"/admin/tenants/{t['id']}/policy", {"forced_tier": "gpu9"})
    assert st == 422 and p["error"]["errors"] == ["unknown tier 'gpu9'"]
    st, body, _ = call(admin, "DELETE", f"/admin/tenants/{t['id']}")
    assert st == 204 and body is None
    _, log, _ = call(admin, "GET", "/admin/audit?limit=3", token=ADMIN)
    assert [e["action"] for e in log["data"]] == ["tenant.delete", "key.revoke", "key.create"]
    assert log["data"][0]["from"] == "127.0.0.1" and log["data"][0]["who"] == "admin"


# --- the CLI and the listener's life --------------------------------------------------


def test_admin_cli_finds_the_admin_listener(gw: tuple[Proc, str]) -> None:
    admin = gw[0].admin
    r = admin_cli("--url", admin, "--token", ADMIN, "tenants-list")
    assert r.returncode == 0, r.stderr + r.stdout
    assert json.loads(r.stdout)["object"] == "list"
    port = admin.rsplit(":", 1)[1]  # no --url: GATEWAY_ADMIN_PORT, then GATEWAY_ADMIN_URL
    r = admin_cli("pools", env={"GATEWAY_ADMIN_PORT": port, "GATEWAY_ADMIN_TOKEN": ADMIN})
    assert r.returncode == 0 and "highspeed" in json.loads(r.stdout)["tiers"], r.stderr
    r = admin_cli("rules-show", env={"GATEWAY_ADMIN_URL": admin, "GATEWAY_ADMIN_TOKEN": ADMIN})
    assert r.returncode == 0 and "tiers:" in json.loads(r.stdout)["yaml"], r.stderr
    r = admin_cli("--url", gw[1], "--token", ADMIN, "tenants-list")  # the data port
    assert r.returncode == 1 and "own listener" in r.stdout


def test_admin_port_flag_and_sigterm_stop_both_listeners(
    engines: dict[str, str], tmp_path: Path
) -> None:
    admin_port = free_port()
    argv, port = serve_argv(tmp_path, "--admin-port", str(admin_port))
    env = {f"GATEWAY_POOL_{k.upper()}_URLS": v for k, v in engines.items()}
    proc = Proc(argv, f"http://127.0.0.1:{port}/healthz", env={**env, "GATEWAY_ADMIN_TOKEN": ADMIN})
    try:  # the flag beats GATEWAY_ADMIN_PORT (which Proc set to another free port)
        assert call(f"http://127.0.0.1:{admin_port}", "GET", "/admin/tenants")[0] == 200
        assert f"admin API on http://127.0.0.1:{admin_port}" in proc.log()
        proc.p.terminate()  # SIGTERM: aiohttp's handler; the admin server stops with it
        assert proc.p.wait(10) == 0, proc.log()
    finally:
        proc.stop()
    for p in (port, admin_port):  # both ports are free again
        with socket.create_server(("127.0.0.1", p)):
            pass


def test_a_taken_admin_port_is_a_clear_error(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        busy = taken.getsockname()[1]
        argv, _ = serve_argv(tmp_path)
        r = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=30,
            cwd=ROOT,
            env={"PATH": "/usr/bin:/bin", "GATEWAY_ADMIN_PORT": str(busy)},
        )
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"error: the admin API cannot listen on 127.0.0.1:{busy}" in r.stderr
