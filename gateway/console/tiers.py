"""The tiers page: every tier and replica (up or down, in flight, queue, circuit, the
engines' prefix-cache hit rate), the live numbers per tier, refreshed by the page's
script from ``GET /admin/live``, and the quality circuit: the tiers demoted per rule, with
a form to pin a demotion and a button to release one (Post/Redirect/Get)."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Form, Response
from fastapi.responses import RedirectResponse

from gateway.console.auth import CSRF
from gateway.console.client import ApiDep, ApiError
from gateway.console.render import ViewDep

router = APIRouter(prefix="/console", include_in_schema=False)
REFRESH_MS = 3000
FormText = Annotated[str, Form()]


@router.get("/tiers")
async def tiers(view: ViewDep, api: ApiDep, done: str = "") -> Response:
    live = await api.get("/admin/live")
    quality = await api.get("/admin/quality/demotions")
    return view(
        "tiers.html", tab="tiers", live=live, quality=quality, done=done, refresh_ms=REFRESH_MS
    )


@router.get("/tiers/demotions")
@router.get("/tiers/demotions/release")
async def demotions_url() -> Response:
    """A form's address opened as a page: the tiers page, never a 405."""
    return RedirectResponse("/console/tiers", status_code=303)


@router.post("/tiers/demotions", dependencies=[CSRF])
async def pin(
    api: ApiDep, rule: FormText = "", tier: FormText = "", reason: FormText = "", ttl: FormText = ""
) -> Response:
    body: dict[str, object] = {"rule": rule, "tier": tier, "reason": reason}
    if ttl.strip():
        try:
            body["ttl_s"] = float(ttl) * 60
        except ValueError:
            raise ApiError(400, "The duration must be a number of minutes.") from None
    await api.post("/admin/quality/demotions", body)
    return RedirectResponse(f"/console/tiers?done={quote(f'pinned {tier} for {rule}')}", 303)


@router.post("/tiers/demotions/release", dependencies=[CSRF])
async def release(api: ApiDep, rule: FormText = "", tier: FormText = "") -> Response:
    path = f"/admin/quality/demotions/{quote(rule, safe='')}/{quote(tier, safe='')}"
    await api.call("DELETE", path)
    return RedirectResponse(f"/console/tiers?done={quote(f'released {tier} for {rule}')}", 303)
