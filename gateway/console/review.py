"""The review page: what the quality gate caught, the caught answer beside the one the
client got, with a label form per item (a POST that redirects back: a refresh never labels
twice), and each check's precision from the labels."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Response
from fastapi.responses import RedirectResponse

from gateway.console.auth import CSRF
from gateway.console.client import ApiDep, ApiError
from gateway.console.render import ViewDep

router = APIRouter(prefix="/console", include_in_schema=False)
SHOWN = 100
LABELS = ("true_degradation", "false_alarm", "unsure")


@router.get("/review")
async def review(
    view: ViewDep, api: ApiDep, check: str = "", label: str = "none", labelled: str = ""
) -> Response:
    query: dict[str, str | int] = {"limit": SHOWN}
    if check:
        query["check"] = check
    if label in (*LABELS, "none"):
        query["label"] = label
    items = (await api.get("/admin/review", **query))["data"]
    precision = (await api.get("/admin/review/precision"))["checks"]
    return view(
        "review.html",
        tab="review",
        items=items,
        precision=precision,
        check=check,
        label=label,
        labels=LABELS,
        labelled=labelled,
    )


@router.get("/review/export")
async def export(api: ApiDep) -> Response:
    """The queue as JSONL (the admin API's export, with the console's session)."""
    raw = await api.raw("GET", "/admin/review/export")
    headers = {"content-disposition": 'attachment; filename="review.jsonl"'}
    return Response(raw, media_type="application/x-ndjson", headers=headers)


@router.post("/review/{rid}/label", dependencies=[CSRF])
async def label_item(
    rid: str, api: ApiDep, label: Annotated[str, Form()] = "", back: Annotated[str, Form()] = ""
) -> Response:
    if label not in LABELS:
        raise ApiError(400, f"Choose a label: {', '.join(LABELS)}.")
    await api.post(f"/admin/review/{rid}/label", {"label": label})
    where = back if back.startswith("/console/review") else "/console/review"
    sep = "&" if "?" in where else "?"
    return RedirectResponse(f"{where}{sep}labelled={rid}", status_code=303)
