"""The review queue: what the quality gate caught, side by side with what the client got,
for people to label; each check's precision on real traffic from the labels; JSONL export
an eval harness reads."""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal

import orjson
from fastapi import Query
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict

from gateway.admin.deps import AuditDep, StoreDep, admin_user
from gateway.admin.models import RecordList
from gateway.admin.routes.base import admin_router, errors
from gateway.errors import NotFound
from gateway.store.review import LABELS

router = admin_router("review")
Label = Literal["true_degradation", "false_alarm", "unsure"]
EXPORT_MAX = 100_000
LABEL_QUERY = "^(true_degradation|false_alarm|unsure|none)$"  # none: the unlabeled


class ReviewItemOut(BaseModel):
    """One item: the request (redacted), what was caught and why, what the client got."""

    model_config = ConfigDict(extra="allow")
    id: str
    at: float
    check: str | None = None
    label: Label | None = None


class LabelIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    label: Label


class PrecisionRow(BaseModel):
    true_degradation: int = 0
    false_alarm: int = 0
    unsure: int = 0
    unlabeled: int = 0
    precision: float | None = None  # true / (true + false alarms); None: no label yet


class PrecisionOut(BaseModel):
    """Each check's measured precision on the labelled items of the queue."""

    checks: dict[str, PrecisionRow]


@router.get(
    "/admin/review",
    summary="The review queue, newest first (?check=, ?label= a label or none, ?limit=)",
    response_model=RecordList,
)
async def review_list(
    store: StoreDep,
    check: str | None = None,
    label: Annotated[
        str | None, Query(pattern="^(true_degradation|false_alarm|unsure|none)$")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> RecordList:
    return RecordList(data=await store.reviews(limit, check, label))


@router.get(
    "/admin/review/export",
    summary="Every item of the queue as JSONL (one item a line), for an eval harness",
    response_class=Response,
    responses={200: {"content": {"application/x-ndjson": {}}}},
)
async def review_export(store: StoreDep, label: Annotated[str | None, Query()] = None) -> Response:
    items = await store.reviews(EXPORT_MAX, None, label)
    body = b"".join(orjson.dumps(i) + b"\n" for i in items)
    return Response(content=body, media_type="application/x-ndjson")


@router.get(
    "/admin/review/precision",
    summary="Each check's precision on the labelled items (true degradations / labelled)",
    response_model=PrecisionOut,
)
async def review_precision(store: StoreDep) -> PrecisionOut:
    return PrecisionOut(checks=precision(await store.reviews(EXPORT_MAX)))


def precision(items: list[dict[str, Any]]) -> dict[str, PrecisionRow]:
    rows: dict[str, PrecisionRow] = {}
    for i in items:
        row = rows.setdefault(str(i.get("check")), PrecisionRow())
        label = i.get("label")
        name = label if label in LABELS else "unlabeled"
        setattr(row, name, getattr(row, name) + 1)
    for row in rows.values():
        judged = row.true_degradation + row.false_alarm
        row.precision = round(row.true_degradation / judged, 4) if judged else None
    return rows


@router.get(
    "/admin/review/{rid}",
    summary="One item of the review queue",
    response_model=ReviewItemOut,
    responses=errors(404),
)
async def review_item(rid: str, store: StoreDep) -> ReviewItemOut:
    item = await store.review(rid)
    if item is None:
        raise NotFound(f"No review item {rid!r} (labelled items expire with the queue).")
    return ReviewItemOut.model_validate(item)


@router.post(
    "/admin/review/{rid}/label",
    summary="Label an item: true_degradation, false_alarm or unsure",
    response_model=ReviewItemOut,
    responses=errors(404),
)
async def review_label(rid: str, body: LabelIn, store: StoreDep, audit: AuditDep) -> ReviewItemOut:
    who = admin_user(audit.request)[:100]
    item = await store.label_review(rid, body.label, who, time.time())
    if item is None:
        raise NotFound(f"No review item {rid!r} (labelled items expire with the queue).")
    await audit("review.label", rid, {"label": body.label, "check": item.get("check")})
    return ReviewItemOut.model_validate(item)
