"""The console's templates and how its pages are sent.

Jinja2 templates from ``templates/``, autoescaped; the filters below format numbers the
same way ``static/console.js`` does when it refreshes them. Every page is sent with a
strict Content-Security-Policy (scripts and styles from this listener only, no inline
script), ``no-store`` and no framing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.responses import HTMLResponse
from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

from gateway.admin.deps import get_gateway
from gateway.console.auth import SessionDep, session_csrf
from gateway.console.examples import FOR_FIELD

HERE = Path(__file__).resolve().parent
SECURITY_HEADERS = MappingProxyType(
    {
        "content-security-policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
        "img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; "
        "base-uri 'none'",
        "x-content-type-options": "nosniff",
        "x-frame-options": "DENY",
        "referrer-policy": "no-referrer",
        "cache-control": "no-store",
    }
)
DASH = "\u2014"  # a figure that is not known (yet)


def fmt_num(v: Any) -> str:
    if v is None:
        return DASH
    return f"{v:,.0f}" if float(v).is_integer() else f"{v:,.2f}"


def fmt_ms(v: Any) -> str:
    """Seconds, shown as milliseconds below 10 s."""
    if v is None:
        return DASH
    return f"{v * 1000:.0f} ms" if v < 10 else f"{v:.1f} s"


def fmt_rate(v: Any) -> str:
    return DASH if v is None else f"{v:.2f}/s"


def fmt_pct(v: Any) -> str:
    return DASH if v is None else f"{v * 100:.0f} %"


def fmt_counts(d: Any) -> str:
    """``{"timeout": 3, "check_loop": 1}`` as "timeout 3 · check_loop 1", biggest first."""
    items = sorted(((k, v) for k, v in (d or {}).items() if v), key=lambda kv: (-kv[1], kv[0]))
    if not items:
        return DASH
    return " \u00b7 ".join(f"{k} {fmt_num(v)}" for k, v in items)


def fmt_when(v: Any) -> str:
    if v is None:
        return DASH
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(v)))


FORMATS: Mapping[str, Callable[[Any], str]] = MappingProxyType(
    {
        "num": fmt_num,
        "ms": fmt_ms,
        "rate": fmt_rate,
        "pct": fmt_pct,
        "counts": fmt_counts,
        "when": fmt_when,
        "updown": lambda v: DASH if v is None else ("up" if v else "down"),
        "circuit": lambda v: DASH if v is None else ("open" if v else "closed"),
        "secs": lambda v: DASH if v is None else f"{v:.0f}",
        "text": lambda v: DASH if v is None else str(v),
    }
)


def fmt(v: Any, how: str) -> str:
    return FORMATS[how](v)


class Pages:
    """The template environment, built once per admin app."""

    def __init__(self) -> None:
        self.env = Environment(
            loader=FileSystemLoader(HERE / "templates"),
            autoescape=select_autoescape(["html"]),
            undefined=StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.env.filters.update({"fmt": fmt, **{f"fmt_{k}": f for k, f in FORMATS.items()}})
        self.env.globals["examples"] = FOR_FIELD  # what each form offers (console/examples.py)

    def html(self, name: str, ctx: dict[str, Any], status: int = 200) -> HTMLResponse:
        body = self.env.get_template(name).render(ctx)
        return HTMLResponse(body, status_code=status, headers=dict(SECURITY_HEADERS))


def pages(request: Request) -> Pages:
    p: Pages = request.app.state.console
    return p


class View:
    """Renders a page for the signed-in operator (their name and CSRF token come along)."""

    def __init__(self, request: Request, session: SessionDep):
        self.request = request
        self.who = session.name

    def __call__(self, template: str, status: int = 200, **ctx: Any) -> HTMLResponse:
        base = {"csrf": session_csrf(self.request), "who": self.who, "here": self.request.url.path}
        return pages(self.request).html(template, {**base, **ctx}, status)


ViewDep = Annotated[View, Depends(View)]


def login_page(
    request: Request, next_path: str, wrong: bool = False, retry_after: int = 0
) -> HTMLResponse:
    """The login form; ``wrong``: after a wrong token (401); ``retry_after``: too many
    failed logins, try again in that many seconds (429)."""
    enabled = get_gateway(request).settings.admin_token is not None
    status = 429 if retry_after else 401 if wrong else (200 if enabled else 403)
    ctx = {"next": next_path, "wrong": wrong, "enabled": enabled, "csrf": "", "who": None}
    ctx["retry_after"] = retry_after
    page = pages(request).html("login.html", {**ctx, "here": request.url.path}, status)
    if retry_after:
        page.headers["Retry-After"] = str(retry_after)
    return page


def error_page(request: Request, status: int, message: str, errors: list[str]) -> HTMLResponse:
    ctx = {"status": status, "message": message, "errors": errors, "here": request.url.path}
    return pages(request).html(
        "error.html", {**ctx, "csrf": session_csrf(request), "who": None}, status
    )
