"""A tenant's response cache: what it holds, and purging it (all of it, or one entry).

Listings show each entry's metadata — key, tier, tokens, when it was stored and expires,
size — never the answer's text. A purge takes effect on every replica at once: the
Redis cache is shared, and the in-process one has a single replica.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Query, Response
from pydantic import BaseModel, Field

from gateway.admin.deps import AuditDep, GatewayDep, TenantDep
from gateway.admin.routes.base import admin_router, errors
from gateway.cache import ResponseCache
from gateway.errors import NotFound, PermissionDenied
from gateway.server.app import Gateway

router = admin_router("cache")


class CacheOut(BaseModel):
    tenant_id: str
    store: str = Field(description="memory (this process) | redis (every replica)")
    entries: int
    bytes: int
    max_bytes: int = Field(description="the tenant's bound (GATEWAY_CACHE_TENANT_MAX_BYTES)")
    vectors: int = Field(description="prompts in the semantic index")
    data: list[dict[str, Any]] = Field(description="newest first: metadata, no answer text")


class PurgedOut(BaseModel):
    tenant_id: str
    purged: int = Field(description="entries removed")


def _cache(gw: Gateway) -> ResponseCache:
    if gw.cache is None:  # pragma: no cover - built with every gateway
        raise PermissionDenied("This gateway has no response cache.", code="cache_disabled")
    return gw.cache


@router.get(
    "/admin/tenants/{tenant_id}/cache",
    summary="The tenant's response cache: size and entries, newest first (?limit=)",
    response_model=CacheOut,
    responses=errors(404),
)
async def inspect_cache(
    t: TenantDep,
    gw: GatewayDep,
    limit: Annotated[int, Query(ge=1, le=1000, description="entries listed")] = 100,
) -> CacheOut:
    cache = _cache(gw)
    u = await cache.usage(t.id)
    data = await cache.entries(t.id, limit)
    return CacheOut(
        tenant_id=t.id,
        store=cache.backend.name,
        entries=u.entries,
        bytes=u.bytes,
        max_bytes=u.max_bytes,
        vectors=u.vectors,
        data=data,
    )


@router.delete(
    "/admin/tenants/{tenant_id}/cache",
    summary="Purge the tenant's response cache (exact and semantic)",
    response_model=PurgedOut,
    responses=errors(404),
)
async def purge_cache(t: TenantDep, gw: GatewayDep, audit: AuditDep) -> PurgedOut:
    n = await _cache(gw).purge(t.id)
    await audit("cache.purge", t.id, {"purged": n})
    return PurgedOut(tenant_id=t.id, purged=n)


@router.delete(
    "/admin/tenants/{tenant_id}/cache/{key}",
    summary="Remove one entry of the tenant's response cache",
    status_code=204,
    response_class=Response,
    responses=errors(404),
)
async def delete_cache_entry(t: TenantDep, key: str, gw: GatewayDep, audit: AuditDep) -> Response:
    if not await _cache(gw).delete(t.id, key):
        raise NotFound(f"No cache entry {key!r} for tenant {t.id!r}.")
    await audit("cache.delete", t.id, {"key": key})
    return Response(status_code=204)
