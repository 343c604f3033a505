"""Tenants, their policies and their usage.

Every write is recorded in the audit log and published, so every replica applies it at
once (the key cache and the tenant's limits are per replica).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import Query, Response
from pydantic import ValidationError

from gateway.admin.deps import AuditDep, GatewayDep, StoreDep, TenantDep
from gateway.admin.models import (
    TenantDetail,
    TenantIn,
    TenantList,
    TenantOut,
    TenantPatch,
    UsageOut,
    key_out,
    tenant_out,
)
from gateway.admin.policy import check_policy
from gateway.admin.routes.base import admin_router, errors
from gateway.admin.wire import json_response
from gateway.errors import BadRequest, Conflicted, NotFound
from gateway.store.base import Conflict, Store
from gateway.tenancy.tenants import Policy, Tenant, new_id

router = admin_router("tenants")


@router.post(
    "/admin/tenants",
    summary="Create a tenant {name, policy}",
    status_code=201,
    response_model=TenantOut,
    responses=errors(422),
)
async def create_tenant(
    body: TenantIn, gw: GatewayDep, store: StoreDep, audit: AuditDep
) -> Response:
    check_policy(body.policy, gw.runtime.rules)
    t = Tenant(id=new_id("ten"), name=body.name, policy=body.policy)
    await store.create_tenant(t)
    await audit("tenant.create", t.id, body.model_dump(mode="json"))
    return json_response(tenant_out(t), 201)


@router.get("/admin/tenants", summary="List tenants", response_model=TenantList)
async def list_tenants(store: StoreDep) -> Response:
    tenants = await store.list_tenants()
    return json_response({"object": "list", "data": [tenant_out(t) for t in tenants]})


@router.get(
    "/admin/tenants/{tenant_id}",
    summary="A tenant with its keys",
    response_model=TenantDetail,
    responses=errors(404),
)
async def get_tenant(t: TenantDep, store: StoreDep) -> Response:
    keys = await store.list_keys(t.id)
    return json_response({**tenant_out(t), "keys": [key_out(k) for k in keys]})


@router.patch(
    "/admin/tenants/{tenant_id}",
    summary="Change name and/or some policy fields",
    response_model=TenantOut,
    responses=errors(404, 422),
)
async def patch_tenant(
    t0: TenantDep, body: TenantPatch, gw: GatewayDep, store: StoreDep, audit: AuditDep
) -> Response:
    if body.policy is not None:
        try:
            merged = Policy.model_validate({**t0.policy.model_dump(), **body.policy})
        except ValidationError as e:
            raise BadRequest(
                f"Invalid policy: {e.errors()[0]['msg']}.", param="policy", code="invalid_value"
            ) from None
        check_policy(merged, gw.runtime.rules)
    policy_changes = body.policy or {}

    def change(t: Tenant) -> Tenant:
        upd: dict[str, Any] = {}
        if body.name is not None:
            upd["name"] = body.name
        if policy_changes:  # merged against the *current* policy: no lost update
            upd["policy"] = Policy.model_validate({**t.policy.model_dump(), **policy_changes})
        return t.model_copy(update=upd)

    what = body.model_dump(mode="json", exclude_none=True)
    return json_response(
        tenant_out(await _update(store, audit, t0.id, change, "tenant.patch", what))
    )


@router.delete(
    "/admin/tenants/{tenant_id}",
    summary="Delete a tenant and its keys",
    status_code=204,
    response_class=Response,
    responses=errors(404),
)
async def delete_tenant(tenant_id: str, store: StoreDep, audit: AuditDep) -> Response:
    keys = await store.delete_tenant(tenant_id)
    if keys is None:
        raise NotFound(f"No tenant {tenant_id!r}.")
    await audit("tenant.delete", tenant_id)
    await store.publish({"type": "tenant", "id": tenant_id})
    for k in keys:
        await store.publish({"type": "key", "digest": k.digest})
    return Response(status_code=204)


@router.get(
    "/admin/tenants/{tenant_id}/policy",
    summary="The tenant's policy",
    response_model=Policy,
    responses=errors(404),
)
async def get_policy(t: TenantDep) -> Response:
    return json_response(t.policy.model_dump(mode="json", exclude_none=True))


@router.put(
    "/admin/tenants/{tenant_id}/policy",
    summary="Replace the whole policy",
    response_model=TenantOut,
    responses=errors(404, 422),
)
async def put_policy(
    t0: TenantDep, body: Policy, gw: GatewayDep, store: StoreDep, audit: AuditDep
) -> Response:
    check_policy(body, gw.runtime.rules)
    what = body.model_dump(mode="json", exclude_none=True)

    def change(t: Tenant) -> Tenant:
        return t.model_copy(update={"policy": body})

    return json_response(tenant_out(await _update(store, audit, t0.id, change, "policy.put", what)))


async def _update(
    store: Store,
    audit: AuditDep,
    tid: str,
    change: Callable[[Tenant], Tenant],
    action: str,
    what: Any,
) -> Tenant:
    try:
        t = await store.update_tenant(tid, change)
    except Conflict as e:
        raise Conflicted(str(e)) from None
    if t is None:
        raise NotFound(f"No tenant {tid!r}.")
    await audit(action, tid, what)
    await store.publish({"type": "tenant", "id": tid})
    return t


@router.get(
    "/admin/tenants/{tenant_id}/usage",
    summary="Usage of a day (?day=YYYYMMDD): requests, tokens and cost by tier, fallbacks",
    response_model=UsageOut,
    responses=errors(404),
)
async def usage(
    t: TenantDep,
    store: StoreDep,
    day: Annotated[str | None, Query(description="YYYYMMDD (UTC); default today")] = None,
) -> Response:
    if day is not None and not (len(day) == 8 and day.isdigit()):
        raise BadRequest("'day' must be YYYYMMDD.", param="day", code="invalid_value")
    u = await store.usage(t.id, day)
    return json_response(
        {
            "tenant_id": t.id,
            "day": day or time.strftime("%Y%m%d", time.gmtime()),
            "requests": u.get("requests", 0),
            "tokens_by_tier": {k[7:]: v for k, v in u.items() if k.startswith("tokens:")},
            "prompt_tokens": u.get("prompt_tokens", 0),
            "completion_tokens": u.get("completion_tokens", 0),
            "fallbacks_by_reason": {k[10:]: v for k, v in u.items() if k.startswith("fallbacks:")},
            "cache_hits": u.get("cache_hits", 0),
            "cache_saved_tokens": u.get("cache_saved_tokens", 0),
            "cost_usd": u.get("cost_micro_usd", 0) / 1e6,
            "cost_usd_by_tier": {
                k[15:]: v / 1e6 for k, v in u.items() if k.startswith("cost_micro_usd:")
            },
        }
    )
