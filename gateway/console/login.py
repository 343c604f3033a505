"""Logging in and out of the console.

``POST /console/login`` takes the admin token (compared in constant time) and an optional
name for the audit log, and sets the session cookie: ``HttpOnly`` (no script can read it),
``SameSite=Strict`` (no other site's page makes the browser send it), ``Secure`` when the
listener is reached over HTTPS, ``Path=/`` (the live numbers are polled under
``/admin/``). Logging out clears it; a session also ends after ``TTL_S`` or when the admin
token changes.
"""

from __future__ import annotations

import hmac
import time
from typing import Annotated

from fastapi import APIRouter, Form, Request, Response
from fastapi.responses import RedirectResponse

from gateway.admin.deps import console_session, get_gateway
from gateway.admin.session import COOKIE, TTL_S, issue
from gateway.console.auth import CSRF, HOME, safe_next
from gateway.console.render import login_page

router = APIRouter(prefix="/console", include_in_schema=False)


@router.get("")
@router.get("/")
async def home() -> Response:
    return RedirectResponse(HOME, status_code=303)


@router.get("/login")
async def login_form(request: Request, next: str = HOME) -> Response:
    if console_session(request) is not None:
        return RedirectResponse(safe_next(next), status_code=303)
    return login_page(request, safe_next(next))


@router.post("/login")
async def login(
    request: Request,
    token: Annotated[str, Form()] = "",
    name: Annotated[str, Form()] = "",
    next: Annotated[str, Form()] = HOME,
) -> Response:
    want = get_gateway(request).settings.admin_token
    if want is None or not hmac.compare_digest(token.encode(), want.get_secret_value().encode()):
        return login_page(request, safe_next(next), wrong=bool(token))
    out = RedirectResponse(safe_next(next), status_code=303)
    out.set_cookie(
        COOKIE,
        issue(want.get_secret_value(), time.time(), name),
        max_age=TTL_S,
        path="/",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return out


@router.post("/logout", dependencies=[CSRF])
async def logout() -> Response:
    out = RedirectResponse("/console/login", status_code=303)
    out.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
    return out
