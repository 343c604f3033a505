"""The admin routes' dependencies: the running Gateway, its store, the token check,
the tenant a path names, and the audit log.

Every route needs ``Authorization: Bearer <GATEWAY_ADMIN_TOKEN>``, compared in constant
time over the whole header; a tenant key is just a wrong token here. The read-only routes
the operator console polls also take its session cookie (:mod:`gateway.admin.session`).
"""

from __future__ import annotations

import hmac
import time
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from gateway.admin.live import LiveWindow
from gateway.admin.session import COOKIE, Session, Sessions, verify
from gateway.errors import NotFound, PermissionDenied, Unauthorized
from gateway.rules.control import RulesControl
from gateway.server.app import Gateway
from gateway.store.base import AuditStore, Store, TenantStore
from gateway.tenancy.tenants import Tenant

_DISABLED = "The admin API is disabled: set GATEWAY_ADMIN_TOKEN."

# documents the scheme (and gives /docs its Authorize button); the check is ours
_bearer = HTTPBearer(scheme_name="admin", description="GATEWAY_ADMIN_TOKEN", auto_error=False)


def get_gateway(request: Request) -> Gateway:
    gw: Gateway = request.app.state.gateway
    return gw


GatewayDep = Annotated[Gateway, Depends(get_gateway)]


def check_token(request: Request) -> None:
    """403 ``admin_disabled`` without a token configured, 401 ``invalid_admin_token``."""
    token = get_gateway(request).settings.admin_token
    if token is None:
        raise PermissionDenied(_DISABLED, code="admin_disabled")
    got = request.headers.get("Authorization", "")
    if not hmac.compare_digest(got.encode(), f"Bearer {token.get_secret_value()}".encode()):
        raise Unauthorized("A valid admin token is required.", code="invalid_admin_token")


def admin_token(
    request: Request,
    _: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> None:
    check_token(request)


def get_sessions(request: Request) -> Sessions:
    sessions: Sessions = request.app.state.sessions
    return sessions


async def console_session(request: Request) -> Session | None:
    """The operator console's session (its signed cookie, not ended by a logout), or None."""
    token = get_gateway(request).settings.admin_token
    if token is None:
        return None
    s = verify(token.get_secret_value(), request.cookies.get(COOKIE), time.time())
    if s is None or await get_sessions(request).ended(s):
        return None
    return s


async def admin_or_console(
    request: Request,
    _: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> None:
    """The admin token, or the console's session cookie: for the read-only routes that the
    console's page script polls (a script cannot read the HttpOnly cookie to send a token)."""
    if "authorization" not in request.headers and await console_session(request) is not None:
        return
    check_token(request)


def get_store(gw: GatewayDep) -> Store:
    if gw.store is None:
        raise PermissionDenied(_DISABLED, code="admin_disabled")
    return gw.store


StoreDep = Annotated[Store, Depends(get_store)]
# the same store, typed as the one concern a dependency uses
TenantStoreDep = Annotated[TenantStore, Depends(get_store)]
AuditStoreDep = Annotated[AuditStore, Depends(get_store)]


def get_control(gw: GatewayDep) -> RulesControl:
    assert gw.control is not None  # set when the data app started
    return gw.control


ControlDep = Annotated[RulesControl, Depends(get_control)]


async def existing_tenant(tenant_id: str, store: TenantStoreDep) -> Tenant:
    t = await store.get_tenant(tenant_id)
    if t is None:
        raise NotFound(f"No tenant {tenant_id!r}.")
    return t


TenantDep = Annotated[Tenant, Depends(existing_tenant)]


def get_live(request: Request) -> LiveWindow:
    live: LiveWindow = request.app.state.live
    return live


LiveDep = Annotated[LiveWindow, Depends(get_live)]


def admin_user(request: Request) -> str:
    return request.headers.get("x-admin-user", "admin")


class Audit:
    """Records a write in the audit log: who, when, what changed, from where."""

    def __init__(self, request: Request, store: AuditStoreDep):
        self.request = request
        self.store = store

    async def __call__(self, action: str, target: str, change: Any = None) -> None:
        client = self.request.client
        await self.store.audit(
            {
                "at": time.time(),
                "who": admin_user(self.request)[:100],
                "action": action,
                "target": target,
                "change": change,
                "from": client.host if client else None,
            }
        )


AuditDep = Annotated[Audit, Depends(Audit)]
