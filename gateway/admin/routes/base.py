"""What every admin router shares: the route class, the token check, the error answers."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from types import MappingProxyType
from typing import Any

from fastapi import APIRouter, Depends

from gateway.admin.deps import admin_token
from gateway.admin.models import ErrorOut
from gateway.admin.wire import AdminRoute

_WHY: MappingProxyType[int | str, str] = MappingProxyType(
    {
        400: "a bad body or parameter",
        401: "missing or wrong admin token",
        403: "the admin API is disabled (no GATEWAY_ADMIN_TOKEN)",
        404: "no such object",
        422: "valid JSON that does not fit the routing rules",
        503: "the store is unreachable",
        "default": "any other failure, in the same envelope",
    }
)


def errors(*statuses: int | str) -> dict[int | str, dict[str, Any]]:
    """OpenAPI responses: these statuses answer with the error envelope."""
    return {s: {"model": ErrorOut, "description": _WHY[s]} for s in statuses}


def admin_router(tag: str, auth: Callable[..., Awaitable[None] | None] = admin_token) -> APIRouter:
    """A router of admin routes; ``auth``: the check every route of it makes first."""
    return APIRouter(
        route_class=AdminRoute,
        dependencies=[Depends(auth)],
        responses=errors(400, 401, 403, 503, "default"),
        tags=[tag],
    )
