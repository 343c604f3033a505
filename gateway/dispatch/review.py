"""The review queue's sampler: what the quality gate caught, kept for people to label.

For a ``review.sample`` share of the answered requests whose way had a failed check (a
fast answer the gate caught), and for every verdict of a report-only check (a judge that
scores), an item is written to the store's review queue after the client has its answer
(:mod:`gateway.store.review`): the request with the rules' ``review.redact`` paths replaced,
each caught answer with its check, reason and tier, the answer the client got, the tiers,
the time taken, the tenant. A tenant whose policy says ``review: false`` is never kept; no
key is ever kept (keys are headers, and only the body is). Texts are cut to
``review.max_text_chars``.
"""

from __future__ import annotations

import copy
import logging
import random
import time
import uuid
from dataclasses import dataclass
from typing import Any

from gateway.checks.base import CheckResult, Output
from gateway.checks.expr import Path, parse_path
from gateway.dispatch.call import Call
from gateway.dispatch.outcome import Trail
from gateway.errors import GatewayError
from gateway.request.model import ClientRequest
from gateway.routing.router import RouteDecision
from gateway.rules.review import ReviewSettings
from gateway.store.base import ReviewStore

log = logging.getLogger("gateway.dispatch.review")
REDACTED = "[redacted]"


def redact(body: dict[str, Any], paths: tuple[Path, ...], cut: int) -> dict[str, Any]:
    """A copy of ``body`` with every value at ``paths`` replaced and long texts cut."""
    out = copy.deepcopy(body)
    for p in paths:
        _blank(out, p.steps)
    msgs = out.get("messages")
    if isinstance(msgs, list):
        for m in msgs:
            if isinstance(m, dict) and isinstance(m.get("content"), str):
                m["content"] = m["content"][:cut]
    if isinstance(out.get("prompt"), str):
        out["prompt"] = out["prompt"][:cut]
    return out


def _blank(node: Any, steps: tuple[str | int | None, ...]) -> None:
    if not steps:
        return
    step, rest = steps[0], steps[1:]
    if step is None:  # [*]
        for item in node if isinstance(node, list) else ():
            _blank(item, rest)
        return
    ok = (isinstance(step, int) and isinstance(node, list) and -len(node) <= step < len(node)) or (
        isinstance(step, str) and isinstance(node, dict) and step in node
    )
    if not ok:
        return
    if rest:
        _blank(node[step], rest)
    else:
        node[step] = REDACTED


@dataclass(frozen=True, slots=True)
class Delivered:
    """What the client got: from which tier, the text, after how long, for whom."""

    tier: str
    text: str
    seconds: float
    tenant: str | None


class Review:
    """One runtime's sampler (the rules' ``review:`` section, the store's queue)."""

    def __init__(self, store: ReviewStore | None, settings: ReviewSettings):
        self._store = store
        self._s = settings
        self._paths = tuple(parse_path(p) for p in settings.redact)

    def wanted(self, trail: Trail | None, opted_out: bool) -> bool:
        if self._store is None or opted_out or trail is None or self._s.sample <= 0:
            return False
        if not any(f.check is not None for f in trail.failures):
            return False
        return self._s.sample >= 1.0 or random.random() < self._s.sample

    def caught(
        self, req: ClientRequest, d: RouteDecision, trail: Trail, got: Delivered
    ) -> dict[str, Any]:
        """The item for a request whose way had a failed check."""
        cut = self._s.max_text_chars
        caught = [
            {
                "tier": f.tier,
                "check": f.check,
                "reason": f.detail,
                "answer": (f.text or "")[:cut],
            }
            for f in trail.failures
            if f.check is not None
        ]
        return self._item(
            req.body,
            d,
            got.tenant,
            source="check",
            check=caught[0]["check"],
            caught=caught,
            answered_by=got.tier,
            delivered=got.text[:cut],
            seconds=round(got.seconds, 4),
            failures=[f.short() for f in trail.failures],
        )

    def _item(
        self, body: dict[str, Any], d: RouteDecision, tenant: str | None, **more: Any
    ) -> dict[str, Any]:
        return {
            "id": uuid.uuid4().hex[:16],
            "at": time.time(),
            "tenant": tenant,
            "rule": d.rule,
            "task": d.cls.task,
            "sla": d.cls.sla,
            "tiers": list(d.tiers),
            "request": redact(body, self._paths, self._s.max_text_chars),
            "label": None,
            **more,
        }

    async def keep(self, item: dict[str, Any]) -> None:
        """Write ``item`` (in a background task: a store error is logged, never raised)."""
        if self._store is None:
            return
        try:
            await self._store.push_review(item, self._s.max_items, self._s.ttl_days * 86400)
        except (GatewayError, OSError, TimeoutError) as e:
            log.warning("review item not kept: %s", e)

    async def on_verdict(self, call: Call, out: Output, res: CheckResult) -> None:
        """A report-only check's verdict (:class:`~gateway.dispatch.verdicts.Verdicts`)."""
        item = self.judged(call, out, res)
        if item is not None:
            await self.keep(item)

    def judged(self, call: Call, out: Output, res: CheckResult) -> dict[str, Any] | None:
        """The item for a report-only check's verdict (a scoring judge), or None when not
        kept (no store, not sampled, the tenant opted out)."""
        if self._store is None or call.review_opt_out:
            return None
        if self._s.sample < 1.0 and random.random() >= self._s.sample:
            return None
        cut = self._s.max_text_chars
        return self._item(
            call.req.body,
            call.d,
            call.ticket.tenant or None,
            source="judge",
            check=res.check,
            passed=res.ok,
            caught=[] if res.ok else [{"tier": None, "check": res.check, "reason": res.reason}],
            delivered=out.text[:cut],
        )
