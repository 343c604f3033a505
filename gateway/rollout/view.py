"""What an operator sees of the rollouts (``GET /admin/rollouts``, the console's rules page,
``POST /admin/explain``): each analysed rule's arms with their counts and rates in the
current step, the comparisons with their p-values, what the judge decides on these counts
now, and the rollout's record (its last decision and the steps taken), read from the store
so that every replica shows the same."""

from __future__ import annotations

from typing import Any

from gateway.rollout.judge import ArmStats, judge
from gateway.rollout.runner import LEASE, Rollouts, Watched, same_weights


async def rollouts_view(r: Rollouts) -> dict[str, Any]:
    """Every analysed rule of the running rules, and who holds the judging lease."""
    store = r.store
    records = await store.rollouts() if store is not None else {}
    holder = await store.lease_holder(LEASE) if store is not None else None
    data = [await rule_view(r, w, records.get(w.rule)) for w in r.watching.values()]
    return {"data": data, "lease": {"holder": holder, "this_replica": r.owner}}


async def rollout_of(r: Rollouts, rule: str) -> dict[str, Any] | None:
    """The rollout of one rule (None: the rule is not analysed)."""
    w = r.watching.get(rule)
    if w is None:
        return None
    records = await r.store.rollouts() if r.store is not None else {}
    return await rule_view(r, w, records.get(rule))


async def rule_view(r: Rollouts, w: Watched, rec: dict[str, Any] | None) -> dict[str, Any]:
    """One analysed rule (see the module). Until a judging process has begun its step (no
    record of these weights), its counts are not yet the step's: none are shown."""
    a = w.analysis
    out: dict[str, Any] = {
        "rule": w.rule,
        "baseline": a.baseline,
        "canary": a.canary,
        "share": w.share,
        "steps": list(a.steps),
        "next_step": a.next_step(w.share),
        "analysis": a.model_dump(),
        "describe": a.describe(),
        "history": (rec or {}).get("history", []),
        "last_decision": (rec or {}).get("decision"),
        "last_reason": (rec or {}).get("reason"),
        "judged_at": (rec or {}).get("at"),
    }
    if rec is None or not same_weights(rec.get("weights"), w.weights) or r.store is None:
        out.update(since=None, held_s=0.0, decision="pending", to=None, comparisons=[], looks=0)
        out["reason"] = "no replica has judged this step yet"
        none = ArmStats().summary()
        out["arms"] = {
            arm: {"tier": w.tiers[arm], "weight": w.weights[arm], **none} for arm in w.tiers
        }
        return out
    since = float(rec["since"])
    base, can = await r.stats(w, since)
    held = max(0.0, r.now() - since)
    v = judge(a, w.share, base, can, held, int(rec.get("looks", 0)))
    out.update(since=since, held_s=round(held, 3), decision=v.action, to=v.to, reason=v.reason)
    out["looks"] = v.looks
    out["comparisons"] = [c.summary() for c in v.comparisons]
    out["arms"] = {
        arm: {"tier": w.tiers[arm], "weight": w.weights[arm], **stats.summary()}
        for arm, stats in ((a.baseline, base), (a.canary, can))
    }
    return out
