"""The quality circuit of one gateway process: it counts each tier's checked answers per
rule, demotes a tier whose answers fail their checks too often, and restores it when its
probes pass again.

**Counting is local, the decision is shared.** Every process counts the answers it served
itself (:meth:`QualityCircuit.observe`, an O(1) step at the end of a request, no store
call on the request's path) and judges them by the rule's settings
(:class:`~gateway.rules.quality.QualitySettings`). The first process whose window crosses
the threshold demotes the tier for every replica: it applies the demotion at once and
writes it to the store (compare-and-set: one record however many replicas decide at
once), which announces it; every replica applies the record it reads
(:meth:`load`, on :class:`~gateway.store.events.DemotionChanged`). A tier that degrades
wholesale (a bad deploy) fails on every replica alike, so the first replica to see it
(``consecutive`` failures in a row, or ``demote_at`` of ``min_answers``) demotes it for all,
at no cost to a healthy request path; the time that takes depends on each replica's rate,
not on how many replicas there are.

**Probes are counted by the fleet.** They are rare (``probe_share`` of a demoted rule's
requests), so each verdict is written to the store with the record (:meth:`_share_probe`),
which answers the fleet's latest ones; the replica that sees them pass restores the tier for
all (compare-and-set on the record's version, so a restore never ends a newer demotion or an
operator's pin). The restore then takes as long at any number of replicas.

Without a store, or while it cannot be written, a demotion and its probes are this
process's own (kept, and said, until it ends). A demotion ends by itself at its ``until``
(``max_demotion_s``); then the tier is judged afresh.
"""

from __future__ import annotations

import contextlib
import logging
import random
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import asdict
from types import MappingProxyType
from typing import Any, Protocol

from gateway.errors import StoreUnavailable
from gateway.quality.window import Probes, Window, demotes, in_a_row, restores, why
from gateway.routing.router import Demoted
from gateway.rules.quality import QualitySettings
from gateway.rules.schema import Rules
from gateway.store.base import AuditStore, DemotionStore
from gateway.store.demotions import Demotion
from gateway.store.events import DemotionChanged, Event, Resync
from gateway.telemetry.record import RequestRecord

log = logging.getLogger("gateway.quality")
Key = tuple[str, str]  # (rule, tier)
Spawn = Callable[[Coroutine[Any, Any, None]], object]
MAX_KEYS = 4096  # (rule, tier) windows kept per process: a bound on tenants' rule names
M_DEMOTED = "gateway_tier_demoted"
M_FAILURE_RATIO = "gateway_tier_check_failure_ratio"


class Shared(DemotionStore, AuditStore, Protocol):
    """What the circuit needs of the store: the demotions and the audit log."""


class QualityCircuit:
    def __init__(
        self,
        rules: Rules,
        store: Shared | None,
        replica: str,
        spawn: Spawn,
        clock: Callable[[], float] = time.time,
    ):
        self._store = store
        self._who = f"circuit {replica}"
        self._spawn = spawn
        self._clock = clock
        self._windows: dict[Key, Window] = {}
        self._probes: dict[Key, Probes] = {}  # this process's latest probe verdicts
        self._fleet_probes: dict[Key, str] = {}  # the fleet's, as the store last said
        self._current: dict[Key, Demotion] = {}
        self._view: Mapping[Key, Demotion] = MappingProxyType({})
        self._next_end = float("inf")
        self._seen: set[Key] = set()  # ever demoted here: their gauge goes back to 0
        self.use_rules(rules)

    def use_rules(self, rules: Rules) -> None:
        """New rules: each rule's settings, and the tiers that are counted."""
        self._tiers = frozenset(rules.tiers)
        self._default = rules.quality
        by_rule = {r.name: rules.quality_of(r) for r in rules.rules}
        by_rule["default"] = rules.quality_of(rules.default)
        self._settings = by_rule

    def settings(self, rule: str) -> QualitySettings:
        """A rule's settings (a tenant's own rule: the top-level section's)."""
        return self._settings.get(rule, self._default)

    # -- the request path ---------------------------------------------------------------------
    def demoted(self) -> Mapping[Key, Demotion]:
        """The demotions in force: (rule, tier) -> its record. Read on every request."""
        if self._clock() >= self._next_end:
            self._publish()
        return self._view

    def for_request(self) -> Demoted | None:
        """What the router needs of the circuit for one request: the demotions and the
        request's draw (whether it is a probe); None when nothing is demoted."""
        view = self.demoted()
        return Demoted(view, random.random()) if view else None

    def observe(self, rec: RequestRecord) -> None:
        """Count what one finished request says of its tiers' answers: a tier that failed a
        check failed; the tier that answered passed (unless it was delivered failing)."""
        if not rec.rule or (rec.cache is not None and rec.cache.startswith("hit")):
            return
        s = self.settings(rec.rule)
        if not s.enabled:
            return
        now = self._clock()
        failed = {f.tier for f in rec.failures if f.check is not None}
        for tier in failed:
            self._sample((rec.rule, tier), True, s, now)
        tier = rec.tier
        if tier in self._tiers and tier not in failed and rec.status < 400 and not rec.error_code:
            self._sample((rec.rule, tier), rec.checks_failed is not None, s, now)

    def shadowed(self, rule: str, tier: str, failed: bool) -> None:
        """A shadow copy's verdict on a tier demoted for ``rule``: one more probe of it."""
        d = self._current.get((rule, tier))
        s = self.settings(rule)
        if d is not None and d.live(self._clock()) and not d.pinned and s.enabled:
            self._probe((rule, tier), d, failed, s)

    def _sample(self, key: Key, failed: bool, s: QualitySettings, now: float) -> None:
        d = self._current.get(key)
        if d is not None and d.live(now):
            if not d.pinned:  # an operator's pin is released by an operator only
                self._probe(key, d, failed, s)
            return
        w = self._windows.get(key)
        if w is None or w.span != s.window_s:
            if len(self._windows) >= MAX_KEYS:
                return
            w = self._windows[key] = Window(s.window_s)
        w.add(now, failed)
        n, bad = w.counts(now)
        share = demotes(n, bad, s)
        if share or in_a_row(w.streak, s):
            reason = why(n, bad, s.window_s, 0 if share else w.streak)
            d = Demotion(*key, reason, now, now + s.max_demotion_s, self._who)
            log.warning("quality circuit: %s demoted for rule %s: %s", key[1], key[0], reason)
            self._apply(d)
            if self._store is not None:
                self._spawn(self._share_demotion(d))

    def _probe(self, key: Key, d: Demotion, failed: bool, s: QualitySettings) -> None:
        """A probe's verdict: the fleet's latest probes decide (the store's record of them),
        or without a store, this process's."""
        p = self._probes.get(key)
        if p is None or p.size != s.restore_probes:
            p = self._probes[key] = Probes(s.restore_probes)
        p.add(failed)
        if self._store is not None and d.version:
            self._spawn(self._share_probe(d, failed, s))
        else:
            self._judge_probes(d, *p.counts(), s)

    def _judge_probes(self, d: Demotion, n: int, bad: int, s: QualitySettings) -> None:
        if not restores(n, bad, s) or self._current.get(d.key) != d:
            return  # not yet; or restored (or replaced) meanwhile
        log.warning(
            "quality circuit: %s restored for rule %s: %d of %d probes passed",
            d.tier,
            d.rule,
            n - bad,
            n,
        )
        self._end(d.key)
        if self._store is not None and d.version:
            self._spawn(self._share_restore(d, n, bad))

    # -- this process's view ------------------------------------------------------------------
    def _apply(self, d: Demotion) -> None:
        if self._current.get(d.key) != d:
            self._probes.pop(d.key, None)
            self._fleet_probes.pop(d.key, None)
        self._current[d.key] = d
        self._publish()

    def _end(self, key: Key) -> None:
        """A demotion ended here: the tier is judged afresh (an empty window)."""
        self._forget(key)
        self._publish()

    def _publish(self) -> None:
        now = self._clock()
        for key, d in list(self._current.items()):
            if not d.live(now):
                self._forget(key)
        self._seen.update(self._current)
        self._view = MappingProxyType(dict(self._current))
        ends = [d.until for d in self._current.values() if d.until is not None]
        self._next_end = min(ends, default=float("inf"))

    def _forget(self, key: Key) -> None:
        self._fleet_probes.pop(key, None)
        self._current.pop(key, None)
        self._windows.pop(key, None)
        self._probes.pop(key, None)

    def adopt(self, stored: list[Demotion]) -> None:
        """The store's demotions are the fleet's: apply them. Those this process decided and
        could not store are kept (this process's own, until they end)."""
        new = {d.key: d for d in stored}
        for key, d in self._current.items():
            if d.version == 0 and key not in new:
                new[key] = d
        for key in set(self._current) | set(new):
            was = self._current.get(key)
            if was is not None and key not in new:
                self._windows.pop(key, None)  # ended elsewhere: judged afresh
            if was != new.get(key):  # a new record: its own probes
                self._probes.pop(key, None)
                self._fleet_probes.pop(key, None)
        self._current = new
        self._publish()

    # -- the store ----------------------------------------------------------------------------
    async def load(self) -> None:
        """Adopt the store's demotions (at start, on an event, after a resubscription)."""
        if self._store is None:
            return
        try:
            stored = await self._store.demotions()
        except StoreUnavailable:
            return  # keep what this process knows; the next event or resync reads again
        self.adopt(stored)

    def on_event(self, ev: Event) -> None:
        match ev:
            case DemotionChanged() | Resync():
                self._spawn(self.load())
            case _:
                pass

    async def _share_demotion(self, d: Demotion) -> None:
        assert self._store is not None
        try:
            held = await self._store.demote(d)
        except StoreUnavailable as e:
            log.warning("quality circuit: demotion kept in this process only: store %s", e)
            return
        self._apply(held)
        if held.by == d.by and held.since == d.since:  # ours, not an earlier replica's
            await self._audit("quality.demote", held, {"reason": held.reason})

    async def _share_probe(self, d: Demotion, failed: bool, s: QualitySettings) -> None:
        assert self._store is not None
        try:
            seen = await self._store.probed(d, failed, s.restore_probes)
        except StoreUnavailable:  # the store is away: this process's probes judge
            p = self._probes.get(d.key)
            if p is not None:
                self._judge_probes(d, *p.counts(), s)
            return
        if seen is None:
            await self.load()  # the record changed (restored, replaced): read what holds
            return
        self._fleet_probes[d.key] = seen
        self._judge_probes(d, len(seen), seen.count("1"), s)

    async def _share_restore(self, d: Demotion, n: int, bad: int) -> None:
        assert self._store is not None
        try:
            ended = await self._store.restore(d.rule, d.tier, d.version)
        except StoreUnavailable:
            return  # the record ends by itself at its until
        if ended is None:
            await self.load()  # a newer record (another replica's, or a pin) holds
            return
        await self._audit("quality.restore", d, {"probes": n, "failed": bad})

    async def _audit(self, action: str, d: Demotion, change: dict[str, Any]) -> None:
        assert self._store is not None
        entry = {
            "at": self._clock(),
            "who": self._who,
            "action": action,
            "target": f"{d.rule}/{d.tier}",
            "change": {**change, "version": d.version},
            "from": None,
        }
        with contextlib.suppress(StoreUnavailable):
            await self._store.audit(entry)

    # -- operators ----------------------------------------------------------------------------
    async def pin(
        self, rule: str, tier: str, reason: str, by: str, ttl_s: float | None
    ) -> Demotion:
        """An operator demotes ``tier`` for ``rule`` (replacing any demotion of it): no
        probes, until released (or ``ttl_s`` seconds)."""
        now = self._clock()
        until = now + ttl_s if ttl_s is not None else None
        d = Demotion(rule, tier, reason or f"pinned by {by}", now, until, by, pinned=True)
        if self._store is not None:
            d = await self._store.demote(d, replace=True)
        self._apply(d)
        return d

    async def release(self, rule: str, tier: str) -> Demotion | None:
        """An operator ends the demotion of ``tier`` for ``rule`` (a pin or the circuit's)."""
        held = self._current.get((rule, tier))
        if self._store is not None:
            held = await self._store.restore(rule, tier) or held
        if (rule, tier) in self._current:
            self._end((rule, tier))
        return held

    # -- what operators see -------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """The demotions in force and this process's windows (``/readyz``, the admin API)."""
        now = self._clock()
        demoted = []
        for key, d in sorted(self.demoted().items()):
            probes, fleet = self._probes.get(key), self._fleet_probes.get(key)
            n, bad = probes.counts() if probes is not None else (0, 0)
            if fleet is not None:
                n, bad = len(fleet), fleet.count("1")
            demoted.append(
                {**asdict(d), "shared": d.version > 0, "probes": n, "probes_failed": bad}
            )
        windows = []
        for (rule, tier), w in sorted(self._windows.items()):
            n, bad = w.counts(now)
            if n:
                windows.append(
                    {"rule": rule, "tier": tier, "answers": n, "failed": bad, "span_s": w.span}
                )
        return {"demoted": demoted, "windows": windows}

    def prometheus(self) -> bytes:
        now = self._clock()
        lines = [
            f"# HELP {M_DEMOTED} 1 while the quality circuit keeps the tier out of the rule",
            f"# TYPE {M_DEMOTED} gauge",
        ]
        current = self.demoted()
        for rule, tier in sorted(self._seen):
            lines.append(
                f'{M_DEMOTED}{{tier="{_esc(tier)}",rule="{_esc(rule)}"}} '
                f"{int((rule, tier) in current)}"
            )
        lines += [
            f"# HELP {M_FAILURE_RATIO} share of the tier's answers on the rule that failed a "
            "check, over the circuit's window (this process's)",
            f"# TYPE {M_FAILURE_RATIO} gauge",
        ]
        for (rule, tier), w in sorted(self._windows.items()):
            n, bad = w.counts(now)
            if n:
                lines.append(
                    f'{M_FAILURE_RATIO}{{tier="{_esc(tier)}",rule="{_esc(rule)}"}} {bad / n:.4f}'
                )
        return ("\n".join(lines) + "\n").encode()


def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
