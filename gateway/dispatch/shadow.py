"""Shadow evaluation: a sampled copy of live traffic, answered again by the standard tier.

For a tenant with ``shadow_rate`` > 0, that share of the requests the high-speed tier
answered is sent again — after the client has its answer, as a background task — to
the last tier of the route's chain (the standard tier), and the two answers are
compared. The comparison is recorded as metrics and kept, bounded, in the store, where
``python -m evals quality --shadow`` reports it. A shadow request never delays or
changes the client's answer, and its failures are only counted.

Where the quality circuit demoted a tier of the route (``RouteDecision.demoted``), the
sampled copy goes to that tier instead: its answer is judged by the route's cheap checks
and the verdict is one more probe of the tier (:attr:`Shadow.probed`), so shadow traffic
keeps testing a demoted tier beside the circuit's own probes.
"""

from __future__ import annotations

import contextlib
import logging
import random
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import orjson

from gateway.checks.base import Check, Cost
from gateway.dispatch.assemble import outputs
from gateway.dispatch.fallback import reason
from gateway.errors import StoreUnavailable
from gateway.request.model import ClientRequest
from gateway.routing.router import RouteDecision
from gateway.store.base import ShadowStore
from gateway.telemetry.recorder import Telemetry
from gateway.upstream.failures import AttemptFailed
from gateway.upstream.pools import Pools

log = logging.getLogger("gateway.dispatch.shadow")
_WORD = re.compile(r"\w+", re.UNICODE)
_PATHS = MappingProxyType({"chat": "/v1/chat/completions", "completions": "/v1/completions"})
AGREE_AT = 0.6  # token F1 at or above which two answers count as agreeing
Probed = Callable[[str, str, bool], None]  # (rule, tier, failed): a demoted tier's verdict


@dataclass(frozen=True, slots=True)
class Served:
    """The answer the client got: which tier gave it, and its text."""

    tier: str
    text: str


def token_f1(a: str, b: str) -> float:
    """Bag-of-words F1 between two texts (1.0 when both are empty)."""
    ta, tb = _WORD.findall(a.lower()), _WORD.findall(b.lower())
    if not ta and not tb:
        return 1.0
    if not ta or not tb:
        return 0.0
    counts: dict[str, int] = {}
    for t in ta:
        counts[t] = counts.get(t, 0) + 1
    common = 0
    for t in tb:
        if counts.get(t, 0) > 0:
            counts[t] -= 1
            common += 1
    if common == 0:
        return 0.0
    p, r = common / len(tb), common / len(ta)
    return 2 * p * r / (p + r)


def answer_text(kind: str, payload: Any) -> str:
    try:
        ch = payload["choices"][0]
        if kind == "chat":
            msg = ch["message"]
            text = msg.get("content") or ""
            calls = msg.get("tool_calls")
            return str(text) + (orjson.dumps(calls).decode() if calls else "")
        return str(ch.get("text") or "")
    except (KeyError, IndexError, TypeError):
        return ""


class Shadow:
    def __init__(
        self,
        pools: Pools,
        store: ShadowStore | None,
        telemetry: Telemetry,
        rng: random.Random | None = None,
        checks: Mapping[str, Check] | None = None,
    ):
        self._pools = pools
        self._store = store
        self._tel = telemetry
        self._rng = rng or random.Random()
        self._checks = checks or {}
        self.probed: Probed | None = None  # a demoted tier's verdict, to the quality circuit

    def wanted(self, rate: float | None, d: RouteDecision, tier: str) -> str | None:
        """The tier to shadow against, when this request is sampled (a tier the quality
        circuit demoted for the route, else the chain's last); else None."""
        if not rate:
            return None
        if d.demoted:
            return d.demoted[0] if self._rng.random() < rate else None
        if tier == d.tiers[-1] or self._rng.random() >= rate:
            return None
        return d.tiers[-1]

    async def compare(
        self,
        req: ClientRequest,
        body: dict[str, Any],
        d: RouteDecision,
        served: Served,
        against: str,
        tenant: str | None,
    ) -> None:
        """Ask tier ``against`` the same request and record how its answer compares."""
        tier, answer = served.tier, served.text
        pool = self._pools[against]
        body = {**body, "model": pool.model, "stream": False}
        body.pop("stream_options", None)
        t0 = time.perf_counter()
        try:
            data = await pool.post(
                pool.choose(req.routing_key),  # where its prefix is cached
                _PATHS[req.kind],
                orjson.dumps(body),
                pool.limits(pool.tier.timeouts.total, stream=False),
            )
            payload = orjson.loads(data)
            other = answer_text(req.kind, payload)
            if against in d.demoted:
                self._judge(req, d, against, payload)
        except (AttemptFailed, orjson.JSONDecodeError) as e:
            self._tel.shadow_failures.add(1, {"tier": against})
            why = f"{reason(e)}: {e.detail}" if isinstance(e, AttemptFailed) else str(e)
            log.info("shadow request failed", extra={"fields": {"error": why[:200]}})
            return
        score = token_f1(answer, other)
        agree = score >= AGREE_AT
        exact = answer.strip() == other.strip()
        attrs = {"task": d.cls.task, "tier": tier, "agree": str(agree).lower()}
        self._tel.shadow_comparisons.add(1, attrs)
        self._tel.shadow_similarity.record(score, {"task": d.cls.task, "tier": tier})
        if self._store is None:
            return
        rec = {
            "at": time.time(),
            "tenant": tenant,
            "task": d.cls.task,
            "rule": d.rule,
            "tier": tier,
            "against": against,
            "f1": round(score, 4),
            "exact": exact,
            "agree": agree,
            "len": len(answer),
            "len_against": len(other),
            "shadow_ms": round((time.perf_counter() - t0) * 1000, 1),
        }
        with contextlib.suppress(StoreUnavailable):
            await self._store.push_shadow(rec)

    def _judge(self, req: ClientRequest, d: RouteDecision, tier: str, payload: Any) -> None:
        """A demoted tier's shadow answer, judged by the route's cheap checks: a probe."""
        if self.probed is None:
            return
        checks = [self._checks[n] for n in d.checks if n in self._checks]
        cheap = [
            c for c in checks if c.abilities.cost is Cost.CHEAP and not c.abilities.report_only
        ]
        try:
            out = outputs(req.kind, payload)[0]
        except (KeyError, IndexError, TypeError):
            self.probed(d.rule, tier, True)  # not an answer: a failed probe
            return
        self.probed(d.rule, tier, self._tel.run_checks(cheap, out, req.facts) is not None)
