"""Logging in and out of the console.

``POST /console/login`` takes the admin token (compared in constant time) and an optional
name for the audit log, and sets the session cookie: ``HttpOnly`` (no script can read it),
``SameSite=Strict`` (no other site's page makes the browser send it), ``Secure`` when the
request came over TLS, to the listener itself or to a trusted proxy that says so
(``GATEWAY_TRUSTED_PROXIES``, :mod:`gateway.admin.forwarded`), ``Path=/`` (the live
numbers are polled under ``/admin/``). Failed logins are throttled per client and in total
(:mod:`gateway.console.throttle`: 429 with ``Retry-After``, the token not even looked at).
Logging out ends the session on the server (every worker and replica refuses its cookie
from then on) and clears the cookie; a session also ends after ``TTL_S`` or when the admin
token changes.
"""

from __future__ import annotations

import hmac
import time
from typing import Annotated

from fastapi import APIRouter, Form, Request, Response
from fastapi.responses import RedirectResponse

from gateway.admin.deps import console_session, get_gateway, get_sessions
from gateway.admin.forwarded import Origin, origin
from gateway.admin.session import COOKIE, TTL_S, issue
from gateway.console.auth import CSRF, HOME, SessionDep, safe_next
from gateway.console.render import login_page
from gateway.console.throttle import LoginThrottle

router = APIRouter(prefix="/console", include_in_schema=False)


@router.get("")
@router.get("/")
async def home() -> Response:
    return RedirectResponse(HOME, status_code=303)


@router.get("/login")
async def login_form(request: Request, next: str = HOME) -> Response:
    if await console_session(request) is not None:
        return RedirectResponse(safe_next(next), status_code=303)
    return login_page(request, safe_next(next))


@router.post("/login")
async def login(
    request: Request,
    token: Annotated[str, Form()] = "",
    name: Annotated[str, Form()] = "",
    next: Annotated[str, Form()] = HOME,
) -> Response:
    gw = get_gateway(request)
    want, came = gw.settings.admin_token, _origin(request)
    throttle: LoginThrottle = request.app.state.login_throttle
    wait = throttle.wait(came.client)
    if wait:  # before the token is looked at: a throttled guess tells nothing
        return login_page(request, safe_next(next), retry_after=wait)
    if want is None or not hmac.compare_digest(token.encode(), want.get_secret_value().encode()):
        if token:
            throttle.failed(came.client)
        return login_page(request, safe_next(next), wrong=bool(token))
    out = RedirectResponse(safe_next(next), status_code=303)
    out.set_cookie(
        COOKIE,
        issue(want.get_secret_value(), time.time(), name),
        max_age=TTL_S,
        path="/",
        httponly=True,
        samesite="strict",
        secure=came.tls,
    )
    return out


@router.post("/logout", dependencies=[CSRF])
async def logout(request: Request, session: SessionDep) -> Response:
    await get_sessions(request).end(session)  # this cookie, and any copy of it, is refused
    out = RedirectResponse("/console/login", status_code=303)
    secure = _origin(request).tls
    out.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict", secure=secure)
    return out


def _origin(request: Request) -> Origin:
    return origin(request, get_gateway(request).settings.proxies())
