"""The tiers page: every tier and replica (up or down, in flight, queue, circuit, the
engines' prefix-cache hit rate) and the live numbers per tier, refreshed by the page's
script from ``GET /admin/live``."""

from __future__ import annotations

from fastapi import APIRouter, Response

from gateway.console.client import ApiDep
from gateway.console.render import ViewDep

router = APIRouter(prefix="/console", include_in_schema=False)
REFRESH_MS = 3000


@router.get("/tiers")
async def tiers(view: ViewDep, api: ApiDep) -> Response:
    live = await api.get("/admin/live")
    return view("tiers.html", tab="tiers", live=live, refresh_ms=REFRESH_MS)
