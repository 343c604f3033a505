"""Tenants, their policies and their usage.

Every write is recorded in the audit log; the store announces it, so every replica applies
it at once (the key cache and the tenant's limits are per replica).
"""

from __future__ import annotations

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
from gateway.errors import BadRequest, Conflicted, NotFound
from gateway.store.base import Conflict, Store, today
from gateway.tenancy.tenants import Policy, Tenant, new_id

router = admin_router("tenants")


@router.post(
    "/admin/tenants",
    summary="Create a tenant {name, policy}",
    status_code=201,
    response_model=TenantOut,
    response_model_exclude_none=True,
    responses=errors(422),
)
async def create_tenant(
    body: TenantIn, gw: GatewayDep, store: StoreDep, audit: AuditDep
) -> TenantOut:
    check_policy(body.policy, gw.runtime.rules)
    t = Tenant(id=new_id("ten"), name=body.name, policy=body.policy)
    await store.create_tenant(t)
    await audit("tenant.create", t.id, body.model_dump(mode="json"))
    return tenant_out(t)


@router.get(
    "/admin/tenants",
    summary="List tenants",
    response_model=TenantList,
    response_model_exclude_none=True,
)
async def list_tenants(store: StoreDep) -> TenantList:
    tenants = await store.list_tenants()
    return TenantList(data=[tenant_out(t) for t in tenants])


@router.get(
    "/admin/tenants/{tenant_id}",
    summary="A tenant with its keys",
    response_model=TenantDetail,
    response_model_exclude_none=True,
    responses=errors(404),
)
async def get_tenant(t: TenantDep, store: StoreDep) -> TenantDetail:
    keys = await store.list_keys(t.id)
    return TenantDetail(**dict(tenant_out(t)), keys=[key_out(k) for k in keys])


@router.patch(
    "/admin/tenants/{tenant_id}",
    summary="Change name and/or some policy fields",
    response_model=TenantOut,
    response_model_exclude_none=True,
    responses=errors(404, 422),
)
async def patch_tenant(
    t0: TenantDep, body: TenantPatch, gw: GatewayDep, store: StoreDep, audit: AuditDep
) -> TenantOut:
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
    return tenant_out(await _update(store, audit, t0.id, change, "tenant.patch", what))


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
    return Response(status_code=204)


@router.get(
    "/admin/tenants/{tenant_id}/policy",
    summary="The tenant's policy",
    response_model=Policy,
    response_model_exclude_none=True,
    responses=errors(404),
)
async def get_policy(t: TenantDep) -> Policy:
    return t.policy


@router.put(
    "/admin/tenants/{tenant_id}/policy",
    summary="Replace the whole policy",
    response_model=TenantOut,
    response_model_exclude_none=True,
    responses=errors(404, 422),
)
async def put_policy(
    t0: TenantDep, body: Policy, gw: GatewayDep, store: StoreDep, audit: AuditDep
) -> TenantOut:
    check_policy(body, gw.runtime.rules)
    what = body.model_dump(mode="json", exclude_none=True)

    def change(t: Tenant) -> Tenant:
        return t.model_copy(update={"policy": body})

    return tenant_out(await _update(store, audit, t0.id, change, "policy.put", what))


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
) -> UsageOut:
    if day is not None and not (len(day) == 8 and day.isdigit()):
        raise BadRequest("'day' must be YYYYMMDD.", param="day", code="invalid_value")
    day = day or today()
    u = await store.usage(t.id, day)
    return UsageOut(
        tenant_id=t.id,
        day=day,
        requests=u.requests,
        tokens_by_tier=dict(u.tokens_by_tier),
        prompt_tokens=u.prompt_tokens,
        completion_tokens=u.completion_tokens,
        fallbacks_by_reason=dict(u.fallbacks_by_reason),
        cache_hits=u.cache_hits,
        cache_saved_tokens=u.cache_saved_tokens,
        cost_usd=u.cost_micro_usd / 1e6,
        cost_usd_by_tier={k: v / 1e6 for k, v in u.cost_micro_usd_by_tier.items()},
    )
