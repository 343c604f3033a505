"""API keys: created (the plaintext is shown once), listed, revoked, rotated.

A revoked key stops working on every replica at once: the store announces the revocation.
"""

from __future__ import annotations

from fastapi import Response

from gateway.admin.deps import Audit, AuditDep, GatewayDep, StoreDep, TenantDep
from gateway.admin.models import KeyIn, KeyList, NewKeyOut, key_out
from gateway.admin.policy import check_policy
from gateway.admin.routes.base import admin_router, errors
from gateway.errors import NotFound
from gateway.server.app import Gateway
from gateway.store.base import Store
from gateway.tenancy.tenants import ApiKey, new_id, new_key

router = admin_router("keys")


@router.post(
    "/admin/tenants/{tenant_id}/keys",
    summary="Create an API key; the plaintext is shown once",
    status_code=201,
    response_model=NewKeyOut,
    response_model_exclude_none=True,
    responses=errors(404, 422),
)
async def create_key(
    t: TenantDep, body: KeyIn, gw: GatewayDep, store: StoreDep, audit: AuditDep
) -> NewKeyOut:
    check_policy(body.policy, gw.runtime.rules)
    return await _new_key(gw, store, audit, t.id, body)


@router.get(
    "/admin/tenants/{tenant_id}/keys",
    summary="The tenant's keys (no secrets)",
    response_model=KeyList,
    response_model_exclude_none=True,
    responses=errors(404),
)
async def list_keys(t: TenantDep, store: StoreDep) -> KeyList:
    keys = await store.list_keys(t.id)
    return KeyList(data=[key_out(k) for k in keys])


@router.delete(
    "/admin/keys/{key_id}",
    summary="Revoke a key, on every replica at once",
    status_code=204,
    response_class=Response,
    responses=errors(404),
)
async def delete_key(key_id: str, store: StoreDep, audit: AuditDep) -> Response:
    k = await store.delete_key(key_id)
    if k is None:
        raise NotFound(f"No key {key_id!r}.")
    await audit("key.revoke", key_id, {"tenant_id": k.tenant_id})
    return Response(status_code=204)


@router.post(
    "/admin/keys/{key_id}/rotate",
    summary="Replace a key with a new one (same policy); the old one stops working",
    status_code=201,
    response_model=NewKeyOut,
    response_model_exclude_none=True,
    responses=errors(404),
)
async def rotate_key(key_id: str, gw: GatewayDep, store: StoreDep, audit: AuditDep) -> NewKeyOut:
    old = await store.get_key(key_id)
    if old is None:
        raise NotFound(f"No key {key_id!r}.")
    same = KeyIn(name=old.name, policy=old.policy)
    out = await _new_key(gw, store, audit, old.tenant_id, same, replaces=key_id)
    await store.delete_key(key_id)
    await audit("key.revoke", key_id, {"rotated_to": out.id})
    return out.model_copy(update={"replaces": key_id})


async def _new_key(
    gw: Gateway,
    store: Store,
    audit: Audit,
    tenant_id: str,
    spec: KeyIn,
    replaces: str | None = None,
) -> NewKeyOut:
    plain = new_key()
    k = ApiKey(
        id=new_id("key"),
        tenant_id=tenant_id,
        name=spec.name,
        policy=spec.policy,
        digest=gw.access.digest(plain),
        prefix=plain[:10],
    )
    await store.add_key(k)
    await audit(
        "key.create", k.id, {"tenant_id": tenant_id, "name": spec.name, "replaces": replaces}
    )
    return NewKeyOut(**dict(key_out(k)), key=plain)  # the only time the plaintext is shown
