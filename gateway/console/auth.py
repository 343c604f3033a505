"""The checks every console page makes: a session, and on a form its CSRF token.

A page without a valid session raises :class:`LoginRequired` (the browser goes to the
login page and comes back); a form without the session's CSRF token raises
:class:`CsrfRefused` (SameSite=Strict already keeps other sites' forms from sending the
cookie; the token also covers a sibling subdomain of the same site).
"""

from __future__ import annotations

import hmac
from typing import Annotated
from urllib.parse import quote

from fastapi import Depends, Form, Request

from gateway.admin.deps import console_session, get_gateway
from gateway.admin.session import COOKIE, Session, csrf_token

HOME = "/console/tiers"


class LoginRequired(Exception):
    """No valid session: the browser is sent to the login page, then back to ``next``."""

    def __init__(self, next_path: str):
        super().__init__(next_path)
        self.next_path = next_path


class CsrfRefused(Exception):
    """A form without this session's CSRF token (stale, or posted from elsewhere)."""


async def current_session(request: Request) -> Session:
    s = await console_session(request)
    if s is None:
        raise LoginRequired(request.url.path)
    return s


SessionDep = Annotated[Session, Depends(current_session)]


def session_csrf(request: Request) -> str:
    """The CSRF token of the request's session cookie ("" without a token or a cookie)."""
    token = get_gateway(request).settings.admin_token
    cookie = request.cookies.get(COOKIE)
    if token is None or not cookie:
        return ""
    return csrf_token(token.get_secret_value(), cookie)


def check_csrf(request: Request, _: SessionDep, csrf: Annotated[str, Form()] = "") -> None:
    want = session_csrf(request)
    if not want or not hmac.compare_digest(csrf.encode(), want.encode()):
        raise CsrfRefused()


CSRF = Depends(check_csrf)


def safe_next(path: str | None) -> str:
    """Where to go after logging in: a console path only (never another site)."""
    if path and path.startswith("/console/") and not path.startswith("/console//"):
        return path
    return HOME


def login_url(next_path: str) -> str:
    return f"/console/login?next={quote(safe_next(next_path))}"
