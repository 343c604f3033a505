"""The admin API under ``/admin/``: tenants, keys, policies, usage, rules, pools, explain.

Every route needs ``Authorization: Bearer <GATEWAY_ADMIN_TOKEN>`` (compared in constant
time); a tenant key is just a wrong token here. Every write is recorded in the audit
log (who, when, what changed) and published so every replica applies it at once.
``GET /admin/openapi.json`` describes all of it.
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gateway.checks.base import CHECK_NAMES
from gateway.core.explain import explain as explain_request
from gateway.core.rules import Rules, RulesError, cross_check
from gateway.errors import (
    BadRequest,
    Conflicted,
    GatewayError,
    InvalidJSON,
    NotFound,
    PermissionDenied,
    ServiceUnavailable,
    Unauthorized,
    Unprocessable,
    error_body,
)
from gateway.server.app import GATEWAY, Gateway
from gateway.tenancy.store import Conflict, Store, StoreUnavailable
from gateway.tenancy.tenants import (
    ApiKey,
    Policy,
    Tenant,
    effective_policy,
    new_id,
    new_key,
)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_JSON = "application/json"


class TenantIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=200)
    policy: Policy = Policy()


class TenantPatch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str | None = Field(default=None, min_length=1, max_length=200)
    policy: dict[str, Any] | None = None  # fields to change; null clears a field


class KeyIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(default="", max_length=200)
    policy: Policy = Policy()


class Rollback(BaseModel):
    model_config = ConfigDict(extra="forbid")
    version: int = Field(ge=1)


class ExplainIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str = "/v1/chat/completions"
    headers: dict[str, str] = Field(default_factory=dict)
    body: dict[str, Any]
    tenant_id: str | None = None


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(data), status=status, content_type=_JSON)


def _err(e: GatewayError) -> web.Response:
    return web.Response(body=error_body(e), status=e.status, content_type=_JSON)


async def _body(request: web.Request, model: type[BaseModel]) -> Any:
    raw = await request.read()
    try:
        data = orjson.loads(raw or b"{}")
    except orjson.JSONDecodeError as e:
        raise InvalidJSON(f"The request body is not valid JSON: {e}.") from None
    try:
        return model.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        loc = ".".join(str(x) for x in first["loc"])
        raise BadRequest(
            f"Invalid '{loc}': {first['msg']}.", param=loc or None, code="invalid_value"
        ) from None


def policy_problems(p: Policy, rules: Rules) -> list[str]:
    """A policy that names tiers, SLA classes or checks the rules don't have is refused."""
    errs: list[str] = []
    for t in (*(p.allowed_tiers or ()), *((p.forced_tier,) if p.forced_tier else ())):
        if t not in rules.tiers:
            errs.append(f"unknown tier {t!r}")
    if p.default_sla is not None and p.default_sla not in rules.sla_classes:
        errs.append(f"unknown SLA class {p.default_sla!r}")
    for c in (*(p.checks_add or ()), *(p.checks_drop or ())):
        if c not in CHECK_NAMES:
            errs.append(f"unknown check {c!r}")
    if p.rules:
        combined = rules.model_copy(update={"rules": (*p.rules, *rules.rules)})
        n = len(p.rules)
        for e in cross_check(combined):
            if e.startswith("rules[") and int(e[6 : e.index("]")]) < n:
                errs.append("policy." + e)
    return errs


class Admin:
    """The handlers; ``gw`` and ``store`` come from the running app."""

    def __init__(self, request: web.Request):
        self.request = request
        self.gw: Gateway = request.app[GATEWAY]
        if self.gw.store is None:
            raise PermissionDenied(
                "The admin API is disabled: set GATEWAY_ADMIN_TOKEN.", code="admin_disabled"
            )
        self.store: Store = self.gw.store

    async def audit(self, action: str, target: str, change: Any = None) -> None:
        who = self.request.headers.get("x-admin-user", "admin")[:100]
        await self.store.audit(
            {
                "at": time.time(),
                "who": who,
                "action": action,
                "target": target,
                "change": change,
                "from": self.request.remote,
            }
        )

    def _check_policy(self, p: Policy) -> None:
        errs = policy_problems(p, self.gw.rules)
        if errs:
            raise Unprocessable(
                "The policy does not fit the routing rules.", errs, code="invalid_policy"
            )

    async def tenant(self) -> Tenant:
        t = await self.store.get_tenant(self.request.match_info["tenant_id"])
        if t is None:
            raise NotFound(f"No tenant {self.request.match_info['tenant_id']!r}.")
        return t

    # -- tenants ------------------------------------------------------------------------------
    async def create_tenant(self) -> web.Response:
        body: TenantIn = await _body(self.request, TenantIn)
        self._check_policy(body.policy)
        t = Tenant(id=new_id("ten"), name=body.name, policy=body.policy)
        await self.store.create_tenant(t)
        await self.audit("tenant.create", t.id, body.model_dump(mode="json"))
        return _json(_tenant_out(t), 201)

    async def list_tenants(self) -> web.Response:
        return _json(
            {"object": "list", "data": [_tenant_out(t) for t in await self.store.list_tenants()]}
        )

    async def get_tenant(self) -> web.Response:
        t = await self.tenant()
        keys = await self.store.list_keys(t.id)
        return _json({**_tenant_out(t), "keys": [_key_out(k) for k in keys]})

    async def patch_tenant(self) -> web.Response:
        t0 = await self.tenant()
        body: TenantPatch = await _body(self.request, TenantPatch)
        if body.policy is not None:
            try:
                merged = Policy.model_validate({**t0.policy.model_dump(), **body.policy})
            except ValidationError as e:
                raise BadRequest(
                    f"Invalid policy: {e.errors()[0]['msg']}.", param="policy", code="invalid_value"
                ) from None
            self._check_policy(merged)
        policy_changes = body.policy or {}

        def change(t: Tenant) -> Tenant:
            upd: dict[str, Any] = {}
            if body.name is not None:
                upd["name"] = body.name
            if policy_changes:  # merged against the *current* policy: no lost update
                upd["policy"] = Policy.model_validate({**t.policy.model_dump(), **policy_changes})
            return t.model_copy(update=upd)

        return await self._update(
            t0.id, change, "tenant.patch", body.model_dump(mode="json", exclude_none=True)
        )

    async def put_policy(self) -> web.Response:
        t0 = await self.tenant()
        body: Policy = await _body(self.request, Policy)
        self._check_policy(body)
        return await self._update(
            t0.id,
            lambda t: t.model_copy(update={"policy": body}),
            "policy.put",
            body.model_dump(mode="json", exclude_none=True),
        )

    async def get_policy(self) -> web.Response:
        t = await self.tenant()
        return _json(t.policy.model_dump(mode="json", exclude_none=True))

    async def _update(
        self, tid: str, change: Callable[[Tenant], Tenant], action: str, what: Any
    ) -> web.Response:
        try:
            t = await self.store.update_tenant(tid, change)
        except Conflict as e:
            raise Conflicted(str(e)) from None
        if t is None:
            raise NotFound(f"No tenant {tid!r}.")
        await self.audit(action, tid, what)
        await self.store.publish({"type": "tenant", "id": tid})
        return _json(_tenant_out(t))

    async def delete_tenant(self) -> web.Response:
        tid = self.request.match_info["tenant_id"]
        keys = await self.store.delete_tenant(tid)
        if keys is None:
            raise NotFound(f"No tenant {tid!r}.")
        await self.audit("tenant.delete", tid)
        await self.store.publish({"type": "tenant", "id": tid})
        for k in keys:
            await self.store.publish({"type": "key", "digest": k.digest})
        return web.Response(status=204)

    # -- keys -----------------------------------------------------------------------------------
    async def create_key(self) -> web.Response:
        t = await self.tenant()
        body: KeyIn = await _body(self.request, KeyIn)
        self._check_policy(body.policy)
        return _json(await self._new_key(t.id, body.name, body.policy), 201)

    async def _new_key(
        self, tenant_id: str, name: str, policy: Policy, replaces: str | None = None
    ) -> dict[str, Any]:
        plain = new_key()
        k = ApiKey(
            id=new_id("key"),
            tenant_id=tenant_id,
            name=name,
            policy=policy,
            digest=self.gw.access.digest(plain),
            prefix=plain[:10],
        )
        await self.store.add_key(k)
        await self.audit(
            "key.create", k.id, {"tenant_id": tenant_id, "name": name, "replaces": replaces}
        )
        return {**_key_out(k), "key": plain}  # the only time the plaintext is shown

    async def list_keys(self) -> web.Response:
        t = await self.tenant()
        return _json(
            {"object": "list", "data": [_key_out(k) for k in await self.store.list_keys(t.id)]}
        )

    async def delete_key(self) -> web.Response:
        kid = self.request.match_info["key_id"]
        k = await self.store.delete_key(kid)
        if k is None:
            raise NotFound(f"No key {kid!r}.")
        await self.audit("key.revoke", kid, {"tenant_id": k.tenant_id})
        await self.store.publish({"type": "key", "digest": k.digest})
        return web.Response(status=204)

    async def rotate_key(self) -> web.Response:
        kid = self.request.match_info["key_id"]
        old = await self.store.get_key(kid)
        if old is None:
            raise NotFound(f"No key {kid!r}.")
        out = await self._new_key(old.tenant_id, old.name, old.policy, replaces=kid)
        await self.store.delete_key(kid)
        await self.audit("key.revoke", kid, {"rotated_to": out["id"]})
        await self.store.publish({"type": "key", "digest": old.digest})
        return _json({**out, "replaces": kid}, 201)

    # -- usage, pools, audit --------------------------------------------------------------------
    async def usage(self) -> web.Response:
        t = await self.tenant()
        day = self.request.query.get("day")
        if day is not None and not (len(day) == 8 and day.isdigit()):
            raise BadRequest("'day' must be YYYYMMDD.", param="day", code="invalid_value")
        u = await self.store.usage(t.id, day)
        tokens = {k[7:]: v for k, v in u.items() if k.startswith("tokens:")}
        fallbacks = {k[10:]: v for k, v in u.items() if k.startswith("fallbacks:")}
        return _json(
            {
                "tenant_id": t.id,
                "day": day or time.strftime("%Y%m%d", time.gmtime()),
                "requests": u.get("requests", 0),
                "tokens_by_tier": tokens,
                "prompt_tokens": u.get("prompt_tokens", 0),
                "completion_tokens": u.get("completion_tokens", 0),
                "fallbacks_by_reason": fallbacks,
            }
        )

    async def pools(self) -> web.Response:
        return _json({"tiers": self.gw.pools.state(), "store_degraded": self.gw.access.degraded})

    def _limit(self, default: int, most: int) -> int:
        try:
            return max(1, min(most, int(self.request.query.get("limit", str(default)))))
        except ValueError:
            raise BadRequest("'limit' must be an integer.", param="limit") from None

    async def shadow(self) -> web.Response:
        limit = self._limit(default=1000, most=5000)
        return _json({"object": "list", "data": await self.store.shadow_records(limit)})

    async def audit_log(self) -> web.Response:
        limit = self._limit(default=100, most=1000)
        return _json({"object": "list", "data": await self.store.audit_log(limit)})

    # -- rules ----------------------------------------------------------------------------------
    async def rules(self) -> web.Response:
        c = self.gw.control
        assert c is not None
        return _json(
            {
                "version": c.version,
                "source": str(c.path),
                "yaml": c.text,
                "last_error": c.last_error,
            }
        )

    async def rules_versions(self) -> web.Response:
        return _json({"object": "list", "data": await self.store.rules_versions()})

    async def rules_version(self) -> web.Response:
        try:
            v = int(self.request.match_info["version"])
        except ValueError:
            raise NotFound("No such rules version.") from None
        text = await self.store.rules_text(v)
        if text is None:
            raise NotFound(f"No rules version {v}.")
        return _json({"version": v, "yaml": text})

    async def upload_rules(self) -> web.Response:
        raw = await self.request.read()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise BadRequest("The rules must be UTF-8 YAML.", code="invalid_rules") from None
        return await self._submit(text, "admin upload")

    async def reload_rules(self) -> web.Response:
        c = self.gw.control
        assert c is not None
        try:
            text = c.path.read_text(encoding="utf-8")
        except OSError as e:
            raise Unprocessable(f"Cannot read {c.path}.", [str(e)]) from None
        return await self._submit(text, str(c.path))

    async def _submit(self, text: str, source: str) -> web.Response:
        c = self.gw.control
        assert c is not None
        try:
            v = await c.submit(text, source, self.request.headers.get("x-admin-user", "admin"))
        except RulesError as e:
            raise Unprocessable(
                "The rules are invalid; the running rules are unchanged.", e.errors
            ) from None
        await self.audit("rules.update", f"version {v}", {"source": source})
        return _json({"version": v})

    async def rollback_rules(self) -> web.Response:
        body: Rollback = await _body(self.request, Rollback)
        c = self.gw.control
        assert c is not None
        try:
            v = await c.rollback(body.version, self.request.headers.get("x-admin-user", "admin"))
        except KeyError:
            raise NotFound(f"No rules version {body.version}.") from None
        except RulesError as e:
            raise Unprocessable("That version no longer validates.", e.errors) from None
        await self.audit("rules.rollback", f"version {v}")
        return _json({"version": v})

    # -- explain --------------------------------------------------------------------------------
    async def explain(self) -> web.Response:
        body: ExplainIn = await _body(self.request, ExplainIn)
        eff = None
        if body.tenant_id is not None:
            t = await self.store.get_tenant(body.tenant_id)
            if t is None:
                raise NotFound(f"No tenant {body.tenant_id!r}.")
            eff = effective_policy(t, ApiKey(id="-", tenant_id=t.id, digest="", prefix=""))
        out = explain_request(
            self.gw.rules,
            {"path": body.path, "headers": body.headers, "body": body.body},
            eff,
            self.gw.pools.health(),
        )
        return _json(out)


def _tenant_out(t: Tenant) -> dict[str, Any]:
    d = t.model_dump(mode="json")
    d["policy"] = t.policy.model_dump(mode="json", exclude_none=True)
    return d


def _key_out(k: ApiKey) -> dict[str, Any]:
    return {
        "id": k.id,
        "tenant_id": k.tenant_id,
        "name": k.name,
        "prefix": k.prefix,
        "policy": k.policy.model_dump(mode="json", exclude_none=True),
        "created_at": k.created_at,
    }


ROUTES: list[tuple[str, str, str, str]] = [
    # method, path, handler, summary
    ("POST", "/admin/tenants", "create_tenant", "Create a tenant {name, policy}"),
    ("GET", "/admin/tenants", "list_tenants", "List tenants"),
    ("GET", "/admin/tenants/{tenant_id}", "get_tenant", "A tenant with its keys"),
    (
        "PATCH",
        "/admin/tenants/{tenant_id}",
        "patch_tenant",
        "Change name and/or some policy fields",
    ),
    ("DELETE", "/admin/tenants/{tenant_id}", "delete_tenant", "Delete a tenant and its keys"),
    ("GET", "/admin/tenants/{tenant_id}/policy", "get_policy", "The tenant's policy"),
    ("PUT", "/admin/tenants/{tenant_id}/policy", "put_policy", "Replace the whole policy"),
    (
        "POST",
        "/admin/tenants/{tenant_id}/keys",
        "create_key",
        "Create an API key; the plaintext is shown once",
    ),
    ("GET", "/admin/tenants/{tenant_id}/keys", "list_keys", "The tenant's keys (no secrets)"),
    (
        "GET",
        "/admin/tenants/{tenant_id}/usage",
        "usage",
        "Usage of a day (?day=YYYYMMDD): requests, tokens by tier, fallbacks by reason",
    ),
    ("DELETE", "/admin/keys/{key_id}", "delete_key", "Revoke a key, on every replica at once"),
    (
        "POST",
        "/admin/keys/{key_id}/rotate",
        "rotate_key",
        "Replace a key with a new one (same policy); the old one stops working",
    ),
    ("GET", "/admin/rules", "rules", "The running rules: version, YAML, last rejected change"),
    (
        "PUT",
        "/admin/rules",
        "upload_rules",
        "Upload new rules (YAML body); validated first, 422 with every error",
    ),
    ("POST", "/admin/rules/reload", "reload_rules", "Reload the rules file from disk"),
    ("POST", "/admin/rules/rollback", "rollback_rules", "Make a stored version current"),
    ("GET", "/admin/rules/versions", "rules_versions", "Rule versions (newest last)"),
    ("GET", "/admin/rules/versions/{version}", "rules_version", "One stored version's YAML"),
    ("GET", "/admin/pools", "pools", "Pool and replica state: health, circuit, load"),
    (
        "POST",
        "/admin/explain",
        "explain",
        "The routing decision for a request (optionally as a tenant)",
    ),
    ("GET", "/admin/audit", "audit_log", "The audit log, newest first (?limit=)"),
    (
        "GET",
        "/admin/shadow",
        "shadow",
        "Shadow comparisons (fast tier vs standard), newest first (?limit=)",
    ),
]


def _wrap(name: str) -> Handler:
    async def handler(request: web.Request) -> web.StreamResponse:
        try:
            _authorize(request)
            admin = Admin(request)
            result: web.StreamResponse = await getattr(admin, name)()
            return result
        except GatewayError as e:
            return _err(e)
        except StoreUnavailable as e:
            return _err(ServiceUnavailable(f"The store is unreachable: {e}"))

    return handler


def _authorize(request: web.Request) -> None:
    token = request.app[GATEWAY].settings.admin_token
    if token is None:
        raise PermissionDenied(
            "The admin API is disabled: set GATEWAY_ADMIN_TOKEN.", code="admin_disabled"
        )
    got = request.headers.get("Authorization", "")
    if not hmac.compare_digest(got.encode(), f"Bearer {token.get_secret_value()}".encode()):
        raise Unauthorized("A valid admin token is required.", code="invalid_admin_token")


def openapi() -> dict[str, Any]:
    paths: dict[str, Any] = {}
    bodies: dict[str, type[BaseModel]] = {
        "create_tenant": TenantIn,
        "patch_tenant": TenantPatch,
        "put_policy": Policy,
        "create_key": KeyIn,
        "rollback_rules": Rollback,
        "explain": ExplainIn,
    }
    for method, path, name, summary in ROUTES:
        op: dict[str, Any] = {
            "summary": summary,
            "operationId": name,
            "security": [{"admin": []}],
            "responses": {
                "200": {"description": "OK"},
                "401": {"description": "missing or wrong token"},
            },
        }
        if name in bodies:
            op["requestBody"] = {"content": {_JSON: {"schema": bodies[name].model_json_schema()}}}
        if name == "upload_rules":
            op["requestBody"] = {"content": {"application/yaml": {"schema": {"type": "string"}}}}
        params = [p[1:-1] for p in path.split("/") if p.startswith("{")]
        if params:
            op["parameters"] = [
                {"name": p, "in": "path", "required": True, "schema": {"type": "string"}}
                for p in params
            ]
        paths.setdefault(path, {})[method.lower()] = op
    return {
        "openapi": "3.1.0",
        "info": {"title": "llm-gateway admin API", "version": "1"},
        "components": {"securitySchemes": {"admin": {"type": "http", "scheme": "bearer"}}},
        "paths": paths,
    }


async def openapi_handler(request: web.Request) -> web.Response:
    return _json(openapi())


def add_admin_routes(app: web.Application) -> None:
    for method, path, name, _ in ROUTES:
        app.router.add_route(method, path, _wrap(name))
    app.router.add_get("/admin/openapi.json", openapi_handler, allow_head=False)
