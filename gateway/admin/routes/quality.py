"""The quality circuit: the tiers demoted per rule (by the circuit or pinned by an
operator), pinning a demotion and releasing one. A pin or a release is recorded in the
store and applied by every replica at once (gateway.quality)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from fastapi import Response

from gateway.admin.deps import AuditDep, GatewayDep, StoreDep, admin_or_console, admin_user
from gateway.admin.models import DemotionIn, DemotionList, DemotionOut
from gateway.admin.routes.base import admin_router, errors
from gateway.errors import NotFound, Unprocessable
from gateway.rules.schema import Rules

router = admin_router("quality")
reader = admin_router("quality", auth=admin_or_console)  # the console's tiers page reads it


def _names(rules: Rules) -> list[str]:
    return [*(r.name for r in rules.rules), "default"]


def _known(rules: Rules, rule: str, tier: str) -> None:
    names = _names(rules)
    problems = []
    if rule not in names:
        problems.append(f"rule: no rule {rule!r} ({', '.join(names)})")
    if tier not in rules.tiers:
        problems.append(f"tier: no tier {tier!r} ({', '.join(rules.tiers)})")
    if problems:
        raise Unprocessable("The demotion names what the running rules lack.", problems)


@reader.get(
    "/admin/quality/demotions",
    summary="The tiers demoted per rule, and this replica's windows judging them",
    response_model=DemotionList,
)
async def list_demotions(gw: GatewayDep, _: StoreDep) -> DemotionList:
    await gw.quality.load()  # as the store says now, not as this replica last heard
    state: dict[str, Any] = gw.quality.state()
    rules = gw.runtime.rules
    return DemotionList.model_validate(
        {
            "data": state["demoted"],
            "windows": state["windows"],
            "rules": _names(rules),
            "tiers": list(rules.tiers),
        }
    )


@router.post(
    "/admin/quality/demotions",
    summary="Pin a demotion: the tier is skipped for the rule, no probes, until released",
    status_code=201,
    response_model=DemotionOut,
    responses=errors(422),
)
async def pin_demotion(
    body: DemotionIn, gw: GatewayDep, _: StoreDep, audit: AuditDep
) -> DemotionOut:
    _known(gw.runtime.rules, body.rule, body.tier)
    who = admin_user(audit.request)
    d = await gw.quality.pin(body.rule, body.tier, body.reason, who, body.ttl_s)
    await audit("quality.pin", f"{d.rule}/{d.tier}", {"reason": d.reason, "until": d.until})
    return DemotionOut(**asdict(d), shared=d.version > 0, probes=0, probes_failed=0)


@router.delete(
    "/admin/quality/demotions/{rule}/{tier}",
    summary="Release a demotion (pinned or the circuit's): the tier carries the rule again",
    status_code=204,
    response_class=Response,
    responses=errors(404),
)
async def release_demotion(
    rule: str, tier: str, gw: GatewayDep, _: StoreDep, audit: AuditDep
) -> Response:
    d = await gw.quality.release(rule, tier)
    if d is None:
        raise NotFound(f"No demotion of tier {tier!r} for rule {rule!r}.")
    await audit("quality.release", f"{rule}/{tier}", {"reason": d.reason, "by": d.by})
    return Response(status_code=204)
