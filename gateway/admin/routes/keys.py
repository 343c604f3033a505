"""API keys: created (the plaintext is shown once), listed, revoked, rotated.

A revoked key stops working on every replica at once: the revocation is published.
"""

from __future__ import annotations

from typing import Any

from fastapi import Response

from gateway.admin.deps import Audit, AuditDep, GatewayDep, StoreDep, TenantDep
from gateway.admin.models import KeyIn, KeyList, NewKeyOut, key_out
from gateway.admin.policy import check_policy
from gateway.admin.routes.base import admin_router, errors
from gateway.admin.wire import json_response
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
    responses=errors(404, 422),
)
async def create_key(
    t: TenantDep, body: KeyIn, gw: GatewayDep, store: StoreDep, audit: AuditDep
) -> Response:
    check_policy(body.policy, gw.runtime.rules)
    return json_response(await _new_key(gw, store, audit, t.id, body), 201)


@router.get(
    "/admin/tenants/{tenant_id}/keys",
    summary="The tenant's keys (no secrets)",
    response_model=KeyList,
    responses=errors(404),
)
async def list_keys(t: TenantDep, store: StoreDep) -> Response:
    keys = await store.list_keys(t.id)
    return json_response({"object": "list", "data": [key_out(k) for k in keys]})


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
    await store.publish({"type": "key", "digest": k.digest})
    return Response(status_code=204)


@router.post(
    "/admin/keys/{key_id}/rotate",
    summary="Replace a key with a new one (same policy); the old one stops working",
    status_code=201,
    response_model=NewKeyOut,
    responses=errors(404),
)
async def rotate_key(key_id: str, gw: GatewayDep, store: StoreDep, audit: AuditDep) -> Response:
    old = await store.get_key(key_id)
    if old is None:
        raise NotFound(f"No key {key_id!r}.")
    same = KeyIn(name=old.name, policy=old.policy)
    out = await _new_key(gw, store, audit, old.tenant_id, same, replaces=key_id)
    await store.delete_key(key_id)
    await audit("key.revoke", key_id, {"rotated_to": out["id"]})
    await store.publish({"type": "key", "digest": old.digest})
    return json_response({**out, "replaces": key_id}, 201)


async def _new_key(
    gw: Gateway,
    store: Store,
    audit: Audit,
    tenant_id: str,
    spec: KeyIn,
    replaces: str | None = None,
) -> dict[str, Any]:
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
    return {**key_out(k), "key": plain}  # the only time the plaintext is shown
