"""``install(admin_app)``: the console's pages, static files and error pages on the admin app.

The pages live under ``/console``; none is in the OpenAPI document. A page without a
session redirects to the login page; a failed admin API call or a refused form is an
HTML page with the API's message and every error it listed.
"""

from __future__ import annotations

from fastapi import FastAPI, Request, Response
from fastapi.responses import RedirectResponse
from fastapi.staticfiles import StaticFiles

from gateway.console import login, records, review, rules, tenants, tiers
from gateway.console.auth import CsrfRefused, LoginRequired, login_url
from gateway.console.client import ApiError
from gateway.console.render import HERE, Pages, error_page
from gateway.console.throttle import LoginThrottle

STALE_FORM = "The form is stale or was sent from another page; reload the page and try again."


def install(app: FastAPI) -> None:
    app.state.console = Pages()
    app.state.login_throttle = LoginThrottle()  # failed logins, per client and in total
    app.mount("/console/static", StaticFiles(directory=HERE / "static"), name="console-static")
    for module in (login, tiers, rules, tenants, records, review):
        app.include_router(module.router)
    app.add_exception_handler(LoginRequired, _to_login)
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(CsrfRefused, _csrf_refused)


async def _to_login(request: Request, e: Exception) -> Response:
    assert isinstance(e, LoginRequired)
    return RedirectResponse(login_url(e.next_path), status_code=303)


async def _api_error(request: Request, e: Exception) -> Response:
    assert isinstance(e, ApiError)
    return error_page(request, e.status, e.message, e.errors)


async def _csrf_refused(request: Request, e: Exception) -> Response:
    return error_page(request, 403, STALE_FORM, [])
