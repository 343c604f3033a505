"""The admin control plane on its own listener (FastAPI in the gateway's process).

Real gateway processes on real sockets; the store is the in-process one (an admin token
and no Redis), so nothing here touches Redis.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.admin.models import (
    KeyList,
    LiveOut,
    NewKeyOut,
    TenantDetail,
    TenantList,
    TenantOut,
)
from gateway.admin.session import COOKIE
from gateway.rules.schema import RulesError, parse_rules
from tests.conftest import ROOT, Proc, free_port, rules_for_tests, start_gateway
from tests.test_tenancy import ADMIN, call

pytestmark = pytest.mark.processes

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
    ("POST", "/admin/rules/validate"),
    ("POST", "/admin/rules/reload"),
    ("POST", "/admin/rules/rollback"),
    ("GET", "/admin/rules/versions"),
    ("GET", "/admin/rules/versions/{version}"),
    ("GET", "/admin/rollouts"),
    ("GET", "/admin/pools"),
    ("POST", "/admin/explain"),
    ("GET", "/admin/audit"),
    ("GET", "/admin/shadow"),
    ("GET", "/admin/live"),
    ("GET", "/admin/quality/demotions"),
    ("POST", "/admin/quality/demotions"),
    ("DELETE", "/admin/quality/demotions/{rule}/{tier}"),
    ("GET", "/admin/review"),
    ("GET", "/admin/review/export"),
    ("GET", "/admin/review/precision"),
    ("GET", "/admin/review/{rid}"),
    ("POST", "/admin/review/{rid}/label"),
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


# --- validate, explain by other rules, live numbers --------------------------------------


def _rules_with_probe_rule(name: str) -> str:
    data = rules_for_tests()
    rule = {"name": name, "when": {"headers": {"x-probe": "1"}}, "tier": "standard"}
    data["rules"].insert(0, rule)
    return yaml.safe_dump(data)


def test_validate_reports_every_error_and_changes_nothing(gw: tuple[Proc, str]) -> None:
    admin = gw[0].admin
    before = call(admin, "GET", "/admin/rules")[1]
    data = rules_for_tests()
    data["tiers"]["standard"]["timeouts"]["ttft"] = 0
    data["tiers"]["standard"]["colour"] = "blue"
    bad = yaml.safe_dump(data)
    with pytest.raises(RulesError) as e:
        parse_rules(bad)
    st, out, _ = call(admin, "POST", "/admin/rules/validate", raw=bad.encode())
    assert st == 200 and out == {"valid": False, "errors": e.value.errors, "tiers": [], "rules": []}
    assert len(out["errors"]) == 2
    good = _rules_with_probe_rule("probe")
    st, out, _ = call(admin, "POST", "/admin/rules/validate", raw=good.encode())
    assert st == 200 and out["valid"] and out["errors"] == []
    assert out["tiers"] == ["highspeed", "standard"] and out["rules"][0] == "probe"
    st, err, _ = call(admin, "POST", "/admin/rules/validate", raw=b"\xff")
    assert st == 400 and err["error"]["code"] == "invalid_rules"
    after = call(admin, "GET", "/admin/rules")[1]
    assert after["version"] == before["version"] and after["last_error"] is None


def test_explain_by_rules_that_are_not_running(gw: tuple[Proc, str]) -> None:
    admin = gw[0].admin
    req = {
        "headers": {"x-probe": "1"},
        "body": {"model": "auto", "messages": [{"role": "user", "content": "x"}]},
    }
    st, running, _ = call(admin, "POST", "/admin/explain", req)
    assert st == 200 and running["rule"] != "probe-draft"
    draft = _rules_with_probe_rule("probe-draft")
    st, out, _ = call(admin, "POST", "/admin/explain", {**req, "rules": draft})
    assert st == 200 and out["rule"] == "probe-draft" and out["tiers"] == ["standard"]
    st, err, _ = call(admin, "POST", "/admin/explain", {**req, "rules": "tiers: 3\n"})
    assert st == 422 and err["error"]["errors"]
    assert call(admin, "GET", "/admin/rules")[1]["last_error"] is None  # nothing was submitted


def _login(admin: str) -> str:
    """The console's session cookie, as a browser gets it."""
    data = urllib.parse.urlencode({"token": ADMIN, "name": "ops"}).encode()
    req = urllib.request.Request(f"{admin}/console/login", data=data, method="POST")

    class Keep(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *a: Any, **kw: Any) -> None:
            return None  # keep the 303 and its Set-Cookie

    try:
        urllib.request.build_opener(Keep).open(req, timeout=10)
    except urllib.error.HTTPError as e:
        assert e.code == 303
        cookie = e.headers["set-cookie"]
        e.close()
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie
    return str(cookie.split(";", 1)[0])


def _get_with_cookie(url: str, cookie: str) -> int:
    req = urllib.request.Request(url, headers={"Cookie": cookie})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        e.close()
        return int(e.code)


def test_live_numbers_take_the_token_or_a_console_session(gw: tuple[Proc, str]) -> None:
    admin = gw[0].admin
    st, live, _ = call(admin, "GET", "/admin/live")
    assert st == 200 and LiveOut.model_validate(live)
    assert set(live["pools"]) == {"highspeed", "standard"}
    assert {"highspeed", "standard"} <= set(live["tiers"])
    assert call(admin, "GET", "/admin/live", token=None)[0] == 401
    cookie = _login(admin)
    assert cookie.startswith(f"{COOKIE}=") and ADMIN not in cookie
    assert _get_with_cookie(f"{admin}/admin/live", cookie) == 200
    assert _get_with_cookie(f"{admin}/admin/tenants", cookie) == 401  # the rest: Bearer only
    assert _get_with_cookie(f"{admin}/admin/live", cookie[:-2] + "xx") == 401
    # a wrong Bearer token is not rescued by a good cookie
    req = urllib.request.Request(
        f"{admin}/admin/live", headers={"Cookie": cookie, "Authorization": "Bearer wrong"}
    )
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=10)
    assert e.value.code == 401
    e.value.close()


def test_console_pages_need_a_session_and_are_not_in_the_api_document(
    gw: tuple[Proc, str],
) -> None:
    admin = gw[0].admin
    req = urllib.request.Request(f"{admin}/console/tenants")

    class Keep(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *a: Any, **kw: Any) -> None:
            return None

    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.build_opener(Keep).open(req, timeout=10)
    assert e.value.code == 303
    assert e.value.headers["location"] == "/console/login?next=/console/tenants"
    e.value.close()
    cookie = _login(admin)
    req = urllib.request.Request(f"{admin}/console/tenants", headers={"Cookie": cookie})
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.status == 200 and r.headers["content-type"].startswith("text/html")
        assert "script-src 'self'" in r.headers["content-security-policy"]
        assert r.headers["x-frame-options"] == "DENY"
    spec = json.loads(get(f"{admin}/openapi.json")[1])
    assert not [p for p in spec["paths"] if p.startswith("/console")]


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
            env={
                "PATH": "/usr/bin:/bin",
                "GATEWAY_ADMIN_PORT": str(busy),
                "GATEWAY_ADMIN_TOKEN": ADMIN,  # the admin API on: without it, no listener
                "GATEWAY_STORE_PATH": ":memory:",
            },
        )
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"error: the admin API cannot listen on 127.0.0.1:{busy}" in r.stderr


# --- every answer is the model its route declares -----------------------------------------


def test_every_route_returns_the_model_it_declares() -> None:
    """A handler's return annotation is its ``response_model`` (FastAPI then validates and
    sends what it returns); a route without a model returns a plain Response: no body (204)
    or one that is not JSON, its media type declared."""
    import typing

    from fastapi import Response
    from fastapi.routing import APIRoute

    from gateway.admin.routes import ROUTERS

    routes = [r for router in ROUTERS for r in router.routes if isinstance(r, APIRoute)]
    # an APIRoute always has its methods (typed optional, from the Route it extends)
    assert {(m, r.path) for r in routes for m in r.methods or ()} == set(ROUTES)
    for r in routes:
        returns = typing.get_type_hints(r.endpoint)["return"]
        if r.response_model is not None:
            assert returns == r.response_model, r.name
            continue
        assert (returns, r.response_class) == (Response, Response), r.name
        declared = (r.responses or {}).get(200, {}).get("content", {})
        assert r.status_code == 204 or (declared and "application/json" not in declared), r.name


def test_every_route_answers_what_its_openapi_schema_declares(gw: tuple[Proc, str]) -> None:
    """Each route called once (errors too), its body validated against the schema the
    OpenAPI document declares for that status."""
    import fastjsonschema

    admin = gw[0].admin
    spec = json.loads(get(f"{admin}/openapi.json")[1])
    seen: set[tuple[str, str]] = set()

    def check(
        method: str,
        path: str,
        expect: int,
        body: Any = None,
        raw: bytes | None = None,
        ids: dict[str, str] | None = None,
    ) -> Any:
        st, out, _ = call(admin, method, path.format(**(ids or {})), body, raw=raw)
        assert st == expect, (method, path, out)
        seen.add((method, path))
        declared = spec["paths"][path][method.lower()]["responses"]
        answer = declared.get(str(st)) or declared["default"]
        if st == 204:
            assert out is None and "content" not in answer
            return None
        schema = answer["content"]["application/json"]["schema"]
        fastjsonschema.compile({**schema, "components": spec["components"]})(out)
        return out

    policy = {"requests_per_minute": 50, "token_budget": {"tokens": 1000}}
    t = check("POST", "/admin/tenants", 201, {"name": "schema", "policy": policy})
    tid = {"tenant_id": t["id"]}
    check("GET", "/admin/tenants", 200)
    check("GET", "/admin/tenants/{tenant_id}", 200, ids=tid)
    check("PATCH", "/admin/tenants/{tenant_id}", 200, {"policy": {"shadow_rate": 0}}, ids=tid)
    check("GET", "/admin/tenants/{tenant_id}/policy", 200, ids=tid)
    check("PUT", "/admin/tenants/{tenant_id}/policy", 200, {"requests_per_minute": 60}, ids=tid)
    k = check("POST", "/admin/tenants/{tenant_id}/keys", 201, {"name": "k"}, ids=tid)
    check("GET", "/admin/tenants/{tenant_id}/keys", 200, ids=tid)
    k2 = check("POST", "/admin/keys/{key_id}/rotate", 201, ids={"key_id": k["id"]})
    check("DELETE", "/admin/keys/{key_id}", 204, ids={"key_id": k2["id"]})
    check("GET", "/admin/tenants/{tenant_id}/usage", 200, ids=tid)
    check("GET", "/admin/tenants/{tenant_id}/cache", 200, ids=tid)
    check("DELETE", "/admin/tenants/{tenant_id}/cache", 200, ids=tid)
    check("DELETE", "/admin/tenants/{tenant_id}/cache/{key}", 404, ids={**tid, "key": "none"})
    text = check("GET", "/admin/rules", 200)["yaml"].encode()
    check("POST", "/admin/rules/validate", 200, raw=text)
    v = check("PUT", "/admin/rules", 200, raw=text)["version"]
    check("POST", "/admin/rules/reload", 200)
    check("POST", "/admin/rules/rollback", 200, {"version": v})
    check("GET", "/admin/rules/versions", 200)
    check("GET", "/admin/rules/versions/{version}", 200, ids={"version": str(v)})
    check("GET", "/admin/rollouts", 200)
    check("GET", "/admin/pools", 200)
    chat = {"model": "auto", "messages": [{"role": "user", "content": "x"}]}
    check("POST", "/admin/explain", 200, {"body": chat, "tenant_id": t["id"]})
    check("POST", "/admin/explain", 422, {"body": chat, "rules": "tiers: 3\n"})
    check("GET", "/admin/audit", 200)
    check("GET", "/admin/shadow", 200)
    check("GET", "/admin/live", 200)
    pin = {"rule": "default", "tier": "highspeed", "reason": "schema", "ttl_s": 60}
    check("POST", "/admin/quality/demotions", 201, pin)
    check("POST", "/admin/quality/demotions", 422, {**pin, "rule": "nope"})
    check("GET", "/admin/quality/demotions", 200)
    where = {"rule": "default", "tier": "highspeed"}
    check("DELETE", "/admin/quality/demotions/{rule}/{tier}", 204, ids=where)
    check("DELETE", "/admin/quality/demotions/{rule}/{tier}", 404, ids=where)
    check("GET", "/admin/review", 200)
    check("GET", "/admin/review/precision", 200)
    check("GET", "/admin/review/{rid}", 404, ids={"rid": "none"})
    check("POST", "/admin/review/{rid}/label", 404, {"label": "unsure"}, ids={"rid": "none"})
    check("POST", "/admin/review/{rid}/label", 400, {"label": "meh"}, ids={"rid": "none"})
    st, _, headers = call(admin, "GET", "/admin/review/export")  # JSONL: not a JSON body
    assert st == 200 and headers["content-type"].startswith("application/x-ndjson")
    seen.add(("GET", "/admin/review/export"))
    check("DELETE", "/admin/tenants/{tenant_id}", 204, ids=tid)
    check("GET", "/admin/tenants/{tenant_id}", 404, ids=tid)
    assert seen == set(ROUTES)
