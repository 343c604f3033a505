"""Operations: pool state, the routing decision for a request, the audit log, shadow
comparisons."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Query

from gateway.admin.deps import ControlDep, GatewayDep, StoreDep
from gateway.admin.models import ExplainIn, PoolsOut, RecordList
from gateway.admin.routes.base import admin_router, errors
from gateway.errors import BadRequest, NotFound, Unprocessable
from gateway.rollout.view import rollout_of
from gateway.routing.explain import explain as explain_request
from gateway.rules.control import RulesControl
from gateway.rules.schema import Rules, RulesError
from gateway.tenancy.tenants import ApiKey, effective_policy

router = admin_router("operations")


def _limit(raw: str | None, default: int, most: int) -> int:
    """``?limit=``, clamped to 1..most."""
    try:
        return max(1, min(most, int(raw if raw is not None else default)))
    except ValueError:
        raise BadRequest("'limit' must be an integer.", param="limit") from None


@router.get(
    "/admin/pools",
    summary="Pool and replica state: health, circuit, load",
    response_model=PoolsOut,
)
async def pools(gw: GatewayDep) -> PoolsOut:
    return PoolsOut(tiers=gw.runtime.pools.state(), store_degraded=gw.access.degraded)


async def _rules_to_explain(body: ExplainIn, running: Rules, control: RulesControl) -> Rules:
    """The running rules, or the ones the body brings (422 with every error if invalid)."""
    if body.rules is None:
        return running
    try:
        return await control.parse_off_loop(body.rules, "explain")
    except RulesError as e:
        raise Unprocessable("The rules to explain against are invalid.", e.errors) from None


@router.post(
    "/admin/explain",
    summary="The routing decision for a request (optionally as a tenant, or by other rules)",
    response_model=dict[str, Any],
    responses=errors(404, 422),
)
async def explain(
    body: ExplainIn, gw: GatewayDep, store: StoreDep, control: ControlDep
) -> dict[str, Any]:
    eff = None
    if body.tenant_id is not None:
        t = await store.get_tenant(body.tenant_id)
        if t is None:
            raise NotFound(f"No tenant {body.tenant_id!r}.")
        eff = effective_policy(t, ApiKey(id="-", tenant_id=t.id, digest="", prefix=""))
    rt = gw.runtime
    out = explain_request(
        await _rules_to_explain(body, rt.rules, control),
        {"path": body.path, "headers": body.headers, "body": body.body},
        eff,
        rt.pools.health(),
        gw.model_files,
    )
    if body.rules is None:  # the running rules: their rollout's state and decision
        out["rollout"] = await rollout_of(gw.rollouts, out["rule"])
    return out


@router.get(
    "/admin/audit",
    summary="The audit log, newest first (?limit=)",
    response_model=RecordList,
)
async def audit_log(
    store: StoreDep,
    limit: Annotated[str | None, Query(description="an integer, 1..1000; default 100")] = None,
) -> RecordList:
    n = _limit(limit, default=100, most=1000)
    return RecordList(data=await store.audit_log(n))


@router.get(
    "/admin/shadow",
    summary="Shadow comparisons (fast tier vs standard), newest first (?limit=)",
    response_model=RecordList,
)
async def shadow(
    store: StoreDep,
    limit: Annotated[str | None, Query(description="an integer, 1..5000; default 1000")] = None,
) -> RecordList:
    n = _limit(limit, default=1000, most=5000)
    return RecordList(data=await store.shadow_records(n))
