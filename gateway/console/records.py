"""The record pages: shadow comparisons (the fast tier's answers against the standard
tier's) and the audit log."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from fastapi import APIRouter, Response

from gateway.console.client import ApiDep
from gateway.console.render import ViewDep

router = APIRouter(prefix="/console", include_in_schema=False)
SHOWN = 200


def shadow_summary(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (task, tier, against): comparisons, agreement and exact-match shares, mean F1."""
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in records:
        key = (str(r.get("task")), str(r.get("tier")), str(r.get("against")))
        groups.setdefault(key, []).append(r)
    out = []
    for (task, tier, against), rs in sorted(groups.items()):
        n = len(rs)
        out.append(
            {
                "task": task,
                "tier": tier,
                "against": against,
                "n": n,
                "agree": sum(bool(r.get("agree")) for r in rs) / n,
                "exact": sum(bool(r.get("exact")) for r in rs) / n,
                "f1": sum(float(r.get("f1") or 0) for r in rs) / n,
            }
        )
    return out


@router.get("/shadow")
async def shadow(view: ViewDep, api: ApiDep) -> Response:
    records = (await api.get("/admin/shadow", limit=SHOWN))["data"]
    return view("shadow.html", tab="shadow", records=records, summary=shadow_summary(records))


@router.get("/audit")
async def audit(view: ViewDep, api: ApiDep) -> Response:
    entries = (await api.get("/admin/audit", limit=SHOWN))["data"]
    return view("audit.html", tab="audit", entries=entries)
