"""Routing: classification + rules + pool health -> a frozen :class:`RouteDecision`.

Pure. The first rule whose ``when`` matches decides (``default`` when none does).
Its tier and fallback chain give the order of tiers to try; a tier hint (header or a
model alias) moves that tier to the front and keeps only the fallbacks after it, so a
client that pins ``standard`` is never "fallen back" to a faster tier. Tiers that cannot
hold the request (its estimated prompt and ``max_tokens`` against their context windows,
:mod:`gateway.routing.fit`) are left out; when none can, a 400. Unavailable
tiers (circuit open, or every replica failing its health probe) are skipped; when every
tier is unavailable, the last one of the chain is still tried, because answering 503
without trying is worse than a probe. A tier the quality circuit demoted for the rule
(:mod:`gateway.quality`) is skipped too, unless the client pinned it, it is the chain's
last, or this request is one of its probes (the caller's ``draw`` under the rule's
``probe_share``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace

from gateway.errors import PermissionDenied
from gateway.routing.classify import Classification, quote
from gateway.routing.fit import Limits, Need, described, fit
from gateway.rules.cache import CacheRule
from gateway.rules.schema import Route, Rule, Rules, When
from gateway.store.demotions import Demotion
from gateway.tenancy.tenants import OPEN, Effective


@dataclass(frozen=True, slots=True, kw_only=True)
class RouteDecision:
    rule: str
    tiers: tuple[str, ...]
    checks: tuple[str, ...]
    deadline: float  # seconds for the whole request, all attempts
    ttft_budget: float  # seconds to the first token of a stream
    reason: str  # human-readable, ASCII: goes into x-gateway-route
    cls: Classification
    hold_back: bool = False  # streams: hold the first tokens back while early checks run
    on_last_failure: str = "deliver"  # the last tier failed a check: "deliver" or "error"
    hedge_after: float | str | None = None  # seconds without a first token, or "auto"
    arm: str | None = None  # the canary arm of a split rule (the metrics' "arm" label)
    cache: CacheRule | None = None  # the rule's response cache (gateway.cache)
    demoted: tuple[str, ...] = ()  # tiers the quality circuit took out of this request's chain

    @property
    def route_header(self) -> str:
        return f"{self.rule}; {self.cls.describe()}; {self.reason}"


@dataclass(frozen=True, slots=True)
class Demoted:
    """The quality circuit's demotions as one request sees them: the records by (rule,
    tier), and the request's uniform draw in [0, 1) (under the rule's ``probe_share``: it is
    a probe, and tries the demoted tiers as before)."""

    by_key: Mapping[tuple[str, str], Demotion]
    draw: float = 1.0


def _in(values: tuple[str, ...] | None, v: str | None) -> bool:
    return values is None or (v is not None and v in values)


def matches(w: When, c: Classification) -> bool:
    if not (
        _in(w.task, c.task)
        and _in(w.sla, c.sla)
        and _in(w.model, c.model)
        and _in(w.tier_hint, c.tier_hint)
    ):
        return False
    if w.has_tools is not None and w.has_tools != c.has_tools:
        return False
    if w.stream is not None and w.stream != c.stream:
        return False
    if w.min_prompt_tokens is not None and c.prompt_tokens < w.min_prompt_tokens:
        return False
    if w.max_prompt_tokens is not None and c.prompt_tokens > w.max_prompt_tokens:
        return False
    if w.min_max_tokens is not None and (c.max_tokens is None or c.max_tokens < w.min_max_tokens):
        return False
    if w.max_max_tokens is not None and (c.max_tokens is None or c.max_tokens > w.max_max_tokens):
        return False
    if w.headers:
        for k, v in w.headers.items():
            if c.header(k.lower()) != v:
                return False
    return True


class Router:
    """Compiled from one :class:`Rules`; ``decide`` is pure."""

    def __init__(self, rules: Rules):
        self._rules = rules
        self._ordered: tuple[Rule, ...] = rules.rules
        self._caps = {n: t.max_output_tokens for n, t in rules.tiers.items()}
        self._declared = {n: w for n, t in rules.tiers.items() if (w := t.context_window)}

    def _match(self, c: Classification, eff: Effective, lacking: list[str]) -> tuple[Route, str]:
        """The first rule (the tenant's, then the global ones) whose ``when`` matches. A
        tenant's rule naming a tier or SLA class the running rules lack is skipped (said in
        ``lacking``)."""
        for r in eff.policy.rules or ():
            if matches(r.when, c):
                unknown = [f"tier {t}" for t in _tiers_of(r) if t not in self._rules.tiers]
                if r.sla is not None and r.sla not in self._rules.sla_classes:
                    unknown.append(f"sla {r.sla}")
                if not unknown:
                    return r, r.name
                lacking.append(f"rule {r.name} ({', '.join(unknown)})")
        for r in self._ordered:
            if matches(r.when, c):
                return r, r.name
        return self._rules.default, "default"

    def decide(
        self,
        c: Classification,
        healthy: Mapping[str, bool],
        eff: Effective = OPEN,
        windows: Mapping[str, int] | None = None,
        demoted: Demoted | None = None,
        priced: Collection[str] | None = None,
    ) -> RouteDecision:
        """The route of ``c`` from everything that decides a tier: the rules, the policy, the
        tiers' health, their context windows (default: the rules'), the quality circuit's
        demotions and, for a USD budget, the tiers that can be priced (default: all)."""
        p = eff.policy
        # a policy is checked against the rules it was written under; a later rules version
        # may lack a tier or SLA class it names: that part of it is ignored, and said
        lacking: list[str] = []
        if p.default_sla is not None and c.sla_source == "task":
            if p.default_sla in self._rules.sla_classes:
                c = replace(c, sla=p.default_sla, sla_source=eff.who("default_sla"))
            else:
                lacking.append(f"default_sla {p.default_sla}")
        rule, name = self._match(c, eff, lacking)
        if rule.sla is not None and c.sla_source == "task":
            c = replace(c, sla=rule.sla, sla_source=f"rule {name}")
        first, arm = pick_arm(rule, name, c, eff) if rule.split else (rule.tier, None)
        chain = (first, *(t for t in rule.fallback if t != first))
        why = [f"tier={first}" + (f" arm={arm}" if arm is not None else "")]
        hint, hint_by = self._pin(c, eff, lacking)
        if hint is not None:
            chain = chain[chain.index(hint) :] if hint in chain else (hint, *chain)
            why = [f"tier={hint} pinned by {hint_by}"]
            arm = None  # pinned: not part of the canary's comparison
        if p.allowed_tiers is not None:
            chain = _allowed(chain, p.allowed_tiers, hint, name)
            why.append(f"allowed_tiers ({eff.who('allowed_tiers')})")
        if p.fallback_enabled is False:
            chain = chain[:1]
            why.append(f"fallback off ({eff.who('fallback_enabled')})")
        if p.cost_budget is not None and priced is not None:
            chain = _priced(chain, priced, name, why)
        chain = self._fit(chain, c, self._declared if windows is None else windows, why)
        checks = _checks(rule.guarded_checks(len(chain) > 1), eff)  # the guards need a fallback
        chain, out = self._undemoted(chain, rule, name, hint, demoted, why)
        tiers = _available(chain, healthy, why, lacking)
        sla = self._rules.sla_classes[c.sla]
        return RouteDecision(
            rule=name,
            tiers=tiers,
            checks=checks,
            deadline=sla.deadline,
            ttft_budget=sla.ttft_budget,
            reason=" ".join(why),
            cls=c,
            hold_back=rule.hold_back,
            on_last_failure=rule.on_last_failure,
            hedge_after=rule.hedge_after,
            arm=arm,
            cache=rule.cache,
            demoted=out,
        )

    def _pin(
        self, c: Classification, eff: Effective, lacking: list[str]
    ) -> tuple[str | None, str | None]:
        """The tier the request is pinned to and by whom: the policy's ``forced_tier`` (one
        the rules lack is ignored, said in ``lacking``), else the client's hint."""
        forced = eff.policy.forced_tier
        if forced is not None and forced not in self._rules.tiers:
            lacking.append(f"forced_tier {forced}")
        elif forced is not None:
            return forced, f"forced_tier ({eff.who('forced_tier')})"
        return c.tier_hint, c.hint_source

    def _undemoted(
        self,
        chain: tuple[str, ...],
        rule: Route,
        name: str,
        pinned: str | None,
        demoted: Demoted | None,
        why: list[str],
    ) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """``chain`` less the tiers demoted for rule ``name`` (said in ``why``) and those
        tiers; a probe keeps them, and a pinned tier or the last one is never skipped."""
        if demoted is None or not demoted.by_key:
            return chain, ()
        by_key = demoted.by_key
        found = [(t, d) for t in chain if (d := by_key.get((name, t))) is not None]
        if not found:
            return chain, ()
        probe = demoted.draw < self._rules.quality_of(rule).probe_share
        out: list[str] = []
        for t, d in found:
            if t == pinned:
                why.append(f"demoted {t} kept: pinned ({d.reason})")
            elif probe and not d.pinned:
                why.append(f"probe {t} (demoted: {d.reason})")
            else:
                out.append(t)
        if len(out) == len(chain):  # nothing would be left: the last tier answers all the same
            last = out.pop()
            why.append(f"demoted {last} kept: the last tier ({by_key[(name, last)].reason})")
        why.extend(f"demoted {t}: {by_key[(name, t)].reason}" for t in out)
        return tuple(t for t in chain if t not in out), tuple(out)

    def _fit(
        self, chain: tuple[str, ...], c: Classification, windows: Mapping[str, int], why: list[str]
    ) -> tuple[str, ...]:
        """``chain`` less the tiers that cannot hold the request (said in ``why``, with the alias
        that took the client's model name); a 400 when none can."""
        if c.alias is not None:
            why.append(f"model {quote(c.model[:64])} by alias {quote(c.alias)}")
        limits = {t: Limits(windows.get(t), self._caps.get(t)) for t in chain}
        need = Need(c.context_tokens, c.max_tokens, c.max_tokens_param)
        kept, dropped = fit(chain, need, limits)
        if dropped:
            why.append(described(dropped, need, limits))
        return kept


def _available(
    chain: tuple[str, ...], healthy: Mapping[str, bool], why: list[str], lacking: list[str]
) -> tuple[str, ...]:
    """The tiers of ``chain`` that are available (the last one when none is: a probe beats a
    503 without trying), with what was skipped or ignored said in ``why``."""
    tiers = tuple(t for t in chain if healthy.get(t, True))
    skipped = [t for t in chain if t not in tiers]
    if skipped:
        why.append(f"unavailable: {','.join(skipped)}")
    if lacking:
        why.append(f"policy ignored, not in the rules: {'; '.join(lacking)}")
    return tiers or chain[-1:]


def _allowed(
    chain: tuple[str, ...], allowed: tuple[str, ...], hint: str | None, rule: str
) -> tuple[str, ...]:
    """``chain`` less the tiers a key may not use; 403 if its pin or every tier is one."""
    if hint is not None and hint not in allowed:
        raise PermissionDenied(
            f"Tier {hint!r} is not allowed for this key; allowed: {', '.join(allowed)}.",
            code="tier_not_allowed",
        )
    chain = tuple(t for t in chain if t in allowed)
    if not chain:
        raise PermissionDenied(
            f"Rule {rule!r} routes to tiers this key may not use; allowed: {', '.join(allowed)}.",
            code="tier_not_allowed",
        )
    return chain


def _priced(
    chain: tuple[str, ...], priced: Collection[str], rule: str, why: list[str]
) -> tuple[str, ...]:
    """A USD budget is kept only where every answer can be priced: ``chain`` less the tiers
    without a known price (said in ``why``); 403 ``tier_unpriced`` when none is left."""
    unpriced = [t for t in chain if t not in priced]
    if not unpriced:
        return chain
    kept = tuple(t for t in chain if t in priced)
    if not kept:
        raise PermissionDenied(
            f"This key has a USD budget and rule {rule!r} routes to tiers without a known "
            f"price ({', '.join(unpriced)}), whose cost could not be counted against it; "
            "the operator sets tiers.<name>.price.",
            code="tier_unpriced",
        )
    why.append(f"unpriced: {','.join(unpriced)}")
    return kept


def _tiers_of(r: Route) -> tuple[str, ...]:
    return (r.tier, *r.fallback, *(a.tier for a in r.split))


def pick_arm(rule: Route, name: str, c: Classification, eff: Effective) -> tuple[str, str]:
    """The arm of ``rule``'s split for this client, by weight: a hash of the rule and the
    client's sticky key (session header, body ``user``, API key, else the prompt's head),
    so one client stays on one arm, on every gateway replica, until the weights change."""
    who = c.sticky or (f"key:{eff.key_id}" if eff.key_id else f"prompt:{c.affinity}")
    h = hashlib.blake2b(f"{name}\0{who}".encode(), digest_size=8).digest()
    point = int.from_bytes(h, "big") / 2**64 * sum(a.weight for a in rule.split)
    for arm in rule.split:
        point -= arm.weight
        if point < 0:
            return arm.tier, arm.label
    last = [a for a in rule.split if a.weight > 0][-1]  # rounding: never an arm of weight 0
    return last.tier, last.label


def _checks(checks: tuple[str, ...], eff: Effective) -> tuple[str, ...]:
    """The route's checks less the tenant's ``checks_drop``, plus its ``checks_add``."""
    p = eff.policy
    if p.checks_drop:
        checks = tuple(x for x in checks if x not in p.checks_drop)
    if p.checks_add:
        checks = (*checks, *(x for x in p.checks_add if x not in checks))
    return checks
