"""What every admin router shares: the route class, the token check, the error answers."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends

from gateway.admin.deps import admin_token
from gateway.admin.models import ErrorOut
from gateway.admin.wire import AdminRoute

_ERROR: dict[str, Any] = {"model": ErrorOut}
ERRORS: dict[int | str, dict[str, Any]] = {
    400: {**_ERROR, "description": "a bad body or parameter"},
    401: {**_ERROR, "description": "missing or wrong admin token"},
    403: {**_ERROR, "description": "the admin API is disabled (no GATEWAY_ADMIN_TOKEN)"},
    503: {**_ERROR, "description": "the store is unreachable"},
}
NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {**_ERROR, "description": "no such object"}}
UNPROCESSABLE: dict[int | str, dict[str, Any]] = {
    422: {**_ERROR, "description": "valid JSON that does not fit the routing rules"}
}


def admin_router(tag: str) -> APIRouter:
    return APIRouter(
        route_class=AdminRoute,
        dependencies=[Depends(admin_token)],
        responses=ERRORS,
        tags=[tag],
    )
