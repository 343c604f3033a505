"""Judged rollouts: each analysed split rule's arms with their counts and rates in the
current step (fleet-wide), the comparisons with their p-values, the judge's decision on
those counts and the steps it took (gateway.rollout). A step is a rules version, so the
rules' history, diff and rollback apply to it."""

from __future__ import annotations

from gateway.admin.deps import GatewayDep
from gateway.admin.models import RolloutList
from gateway.admin.routes.base import admin_router
from gateway.rollout.view import rollouts_view

router = admin_router("rollouts")


@router.get(
    "/admin/rollouts",
    summary="Analysed split rules: arms, counts, rates, p-values, the decision",
    response_model=RolloutList,
)
async def list_rollouts(gw: GatewayDep) -> RolloutList:
    return RolloutList.model_validate(await rollouts_view(gw.rollouts))
