"""The attempt loop: the gateway's one retry layer.

Given a :class:`Call`, try its tiers in order within the request's deadline:

* Each attempt may use what is left of the deadline minus a reserve for the tiers after
  it (:mod:`gateway.dispatch.budget`), so a fallback always has time to answer.
* An attempt fails on a 5xx/429/408 answer, a connection error, a timeout (first token,
  stall, its budget), a malformed answer, or a failed quality check. The next tier is
  tried at once: waiting helps the tier that failed, not the other one.
* A transient fault (a reset, 500, 502, 503, 429: :mod:`gateway.dispatch.fallback`) is
  retried on the same tier, up to ``same_tier_retries`` times (once by default), in one
  loop (tenacity's) that weighs every guard before every retry: the tier's circuit is
  closed, the wait and an attempt fit the attempt's budget (the next tiers' reserve is
  outside it), and, on a hedged first tier, the retry's first token would come before
  the next tier's. The wait is the engine's ``Retry-After``, else ``backoff_initial``
  doubled for each retry after the first, plus up to ``backoff_jitter``, at most
  ``backoff_max``. The time waited is reported, not counted as overhead.
* An engine's other 4xx is the request's own fault: relayed, never retried.
* When the last tier fails a check, the rule says what happens (``on_last_failure``):
  ``deliver`` the answer with ``x-gateway-checks-failed``, or answer with an error.

Engines are asked for a stream even when the client did not want one (per tier,
``upstream_stream``), so the first-token budget, stall limit and live checks act while
tokens are generated; the client's JSON is assembled from the events.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import orjson
from opentelemetry import trace

from gateway.checks.base import Check
from gateway.dispatch.budget import MIN_ATTEMPT_S, Kind, LatencyBook, reserve
from gateway.dispatch.call import Call
from gateway.dispatch.complete import Completer
from gateway.dispatch.continuation import Continuer
from gateway.dispatch.fallback import verdict
from gateway.dispatch.finish import plan
from gateway.dispatch.hedge import BothFailed, HedgeBudget, HedgeWatch, race
from gateway.dispatch.opening import WHOLE, Opening, StreamOpener
from gateway.dispatch.outcome import BridgePlan, Failure, Outcome, Trail, all_failed
from gateway.dispatch.relay import StreamRelay
from gateway.dispatch.retries import Retries, retried
from gateway.dispatch.verdicts import Verdicts
from gateway.request.model import ClientRequest
from gateway.routing.router import RouteDecision
from gateway.rules.schema import Dispatch
from gateway.telemetry.recorder import Telemetry
from gateway.tenancy.limits import Reserve
from gateway.tenancy.tenants import Effective
from gateway.upstream.failures import AttemptFailed, DeadlineSpent, UpstreamStatus, kept
from gateway.upstream.pools import Pools
from gateway.upstream.scheduler import ANYONE, Ticket

T = TypeVar("T")
log = logging.getLogger("gateway.dispatch")
# ``hedge_after: auto``: HEDGE_AUTO_FACTOR times the first tier's p90 time to first token,
# between the floor and the ceiling (seconds). The floor is above a LAN's jitter, and low
# enough that a hedge on a tier whose first token takes 7 ms does not wait 50 ms before
# the tail answer starts.
HEDGE_AUTO_FACTOR = 3.0
HEDGE_AUTO_FLOOR = 0.02
HEDGE_AUTO_CEILING = 2.0
HEDGE_AUTO_UNSEEN = 1.0  # until the tier has a first-token sample
Attempt = Callable[[str, Opening], Awaitable[T]]


class Dispatcher:
    def __init__(
        self,
        pools: Pools,
        checks: dict[str, Check],
        cfg: Dispatch,
        telemetry: Telemetry,
    ):
        self._tel = telemetry
        self._pools = pools
        self._checks = checks
        self._cfg = cfg
        self.book = LatencyBook()
        self.hedges = HedgeBudget(cfg.hedge_share, cfg.hedge_burst)
        self.verdicts = Verdicts(telemetry)
        self._opener = StreamOpener(telemetry, self.book, self.verdicts)
        self._completer = Completer(self._opener, telemetry, self.verdicts)

    # -- the entry point of a request ----------------------------------------------------------
    async def serve(
        self, req: ClientRequest, d: RouteDecision, eff: Effective
    ) -> Outcome | StreamRelay:
        """Serve one admitted request on its route, its deadline starting now: the answer
        (:meth:`complete`), or a stream past its first token to relay (:meth:`stream`)."""
        p = eff.policy
        ticket = Ticket.of(eff.tenant_id, d.cls.sla, p.priority_shift or 0, p.share_weight or 1)
        call = self.call(req, d, time.monotonic() + d.deadline, ticket, p.review is False)
        if req.stream:
            return await self.stream(call)
        return await self.complete(call)

    def worst_case(self, req: ClientRequest, d: RouteDecision, max_tokens: int) -> Reserve:
        """What the request may use at most: its prompt and ``max_tokens`` (the client's, else
        the given default) for each choice, at the dearest tier of its chain."""
        c = d.cls
        n = req.body.get("n")
        out = (c.max_tokens or max_tokens) * (n if isinstance(n, int) and n > 1 else 1)
        usage = {"prompt_tokens": c.prompt_tokens, "completion_tokens": out}
        pools = self._pools
        usd = max((pools[t].cost(usage) or 0.0 for t in d.tiers if t in pools), default=0.0)
        return Reserve(c.prompt_tokens + out, math.ceil(usd * 1e6))

    def call(
        self,
        req: ClientRequest,
        d: RouteDecision,
        deadline_at: float,
        ticket: Ticket = ANYONE,
        review_opt_out: bool = False,
    ) -> Call:
        checks = tuple(self._checks[n] for n in d.checks)
        return Call(req, d, deadline_at, checks, ticket, self._checks, review_opt_out)

    # -- the two ways through the tiers ------------------------------------------------------
    async def complete(self, call: Call) -> Outcome:
        trail = Trail()
        cont = Continuer(call, self._pools, self._opener, self._run)

        async def attempt(tier: str, how: Opening) -> tuple[bytes, dict[str, Any] | None]:
            return await self._completer.complete(call, self._pools[tier], how, trail, cont)

        try:
            tier, (body, usage) = await self._run(call, call.d.tiers, attempt, trail, hedge=True)
        finally:
            cont.drop_ahead()  # a candidate loop's continuation that no tier took
        if trail.bridged is not None and trail.bridge is not None:
            tier = trail.bridge.tier  # the hedge's second tier handed the answer back
        # an engine that reports no usage is charged an estimate, never nothing
        usage = usage or {
            "prompt_tokens": call.req.prompt_tokens,
            "completion_tokens": len(body) // 4,
        }
        return Outcome(tier, body, trail, usage, self._pools[tier].cost(usage))

    async def stream(self, call: Call) -> StreamRelay:
        """A stream past its first token, ready to be relayed (by the caller, to its sink)."""
        trail = Trail()

        async def attempt(tier: str, how: Opening) -> Any:
            pool = self._pools[tier]
            body = orjson.dumps(call.stream_body(pool))
            return await self._opener.open(call, pool, body, how, trail)

        tier, start = await self._run(call, call.d.tiers, attempt, trail, hedge=True)
        trail.finish = plan(call, self._pools, tier, held=self._hold(call, tier) > 0)
        cont = Continuer(call, self._pools, self._opener, self._run)
        return StreamRelay(call, tier, start, trail, cont, self.verdicts)

    # -- the loop -------------------------------------------------------------------------------
    async def _run(
        self,
        call: Call,
        tiers: tuple[str, ...],
        attempt: Attempt[T],
        trail: Trail,
        hedge: bool = False,
    ) -> tuple[str, T]:
        """Try ``tiers`` in order; the first answer wins. Raises when every tier failed.
        With ``hedge`` (a request's own tiers, not a continuation's), the rule's hedging."""
        last_error: AttemptFailed = DeadlineSpent("no time left for an attempt")
        i = 0
        if hedge and call.d.hedge_after is not None and len(tiers) > 1:
            self.hedges.earn()
            try:
                return await self._hedged(call, tiers, attempt, trail)
            except BothFailed as e:
                last_error, i = kept(e.last), 2
            except AttemptFailed as e:
                last_error, i = kept(e), 1
            if not verdict(last_error).next_tier:
                i = len(tiers)  # no other tier: the client gets this failure
        for tier in tiers[i:]:
            if not self._pools.may_hold(tier, last_error):
                continue  # a tier refused the prompt as too long: this one's window is no larger
            try:
                return tier, await self._tier(tier, attempt, self._how(call, tiers, tier), trail)
            except AttemptFailed as e:
                last_error = kept(e)  # (its traceback holds this frame: see failures.kept)
                if not verdict(e).next_tier:
                    break
        try:
            raise all_failed(last_error, trail.failures) from None
        finally:
            del last_error  # raised, it holds this frame: not the other way round too

    def _hedge_delay(self, setting: float | str | None, tier: str) -> float:
        if isinstance(setting, float | int):
            return float(setting)
        seen = self.book.p90(tier, "ttft")  # "auto"
        if seen is None:
            return HEDGE_AUTO_UNSEEN
        return min(HEDGE_AUTO_CEILING, max(HEDGE_AUTO_FLOOR, HEDGE_AUTO_FACTOR * seen))

    def _how(
        self,
        call: Call,
        tiers: tuple[str, ...],
        tier: str,
        watch: HedgeWatch | None = None,
        bridge: tuple[str, float, float] | None = None,
    ) -> Opening:
        """The attempt's limits: the deadline minus what the tiers after it need. A hedge's
        first tier has its ``watch`` (and an event for its first token); its second tier may
        ``bridge`` back (the first tier, the hedge's delay, the first tier's end)."""
        later = tiers[tiers.index(tier) + 1 :]
        kind: Kind = "stream" if call.req.stream else "answer"
        until = call.deadline_at - reserve(self.book, later, kind, self._cfg.reserve_floor)
        deliver = not later and call.d.on_last_failure == "deliver"
        return Opening(
            hold_tokens=self._hold(call, tier),
            until=until,
            deliver=deliver,
            stream=call.req.stream,
            first_token=asyncio.Event() if watch is not None else None,
            guard_rate=bool(later),
            bridge=BridgePlan(*bridge) if bridge is not None else None,
            watch=watch,
        )

    async def _hedged(
        self, call: Call, tiers: tuple[str, ...], attempt: Attempt[T], trail: Trail
    ) -> tuple[str, T]:
        """The first two tiers, the second started once the first is slow to a token."""
        watch = HedgeWatch(self.book.p90(tiers[1], "ttft") or HEDGE_AUTO_UNSEEN)
        first = self._how(call, tiers, tiers[0], watch=watch)
        assert first.first_token is not None
        delay = self._hedge_delay(call.d.hedge_after, tiers[0])
        # the first tier's continuation gets the same delay to a token
        bridge = (tiers[0], delay, first.until) if self._cfg.bridge else None
        second = self._how(call, tiers, tiers[1], bridge=bridge)
        waits = (trail.upstream_s, trail.queue_s, time.perf_counter())
        try:
            won, fired, value = await race(
                lambda: self._tier(tiers[0], attempt, first, trail),
                lambda: self._tier(tiers[1], attempt, second, trail),
                first.first_token,
                delay,
                self.hedges.take,
                watch,
            )
        finally:
            _overlapping_waits(trail, waits)
        if fired:
            trail.hedge = f"{tiers[1]} after {delay:.2g}s; {tiers[won]} won"
            if won == 1:
                trail.bridge = second.bridge
        return tiers[won], value

    async def _tier(self, tier: str, attempt: Attempt[T], how: Opening, trail: Trail) -> T:
        """One tier: an attempt, and after each transient fault a retry while every guard of
        :class:`.retries.Retries` allows one (tenacity runs the loop and its waits). The first
        attempt runs before the loop is built: most answers need none (building it for every
        attempt cost ~170 us of CPU per request: ``python -m evals.bench.proxy``)."""
        try:
            return await self._timed(tier, attempt, how, trail)
        except AttemptFailed as e:
            retries = Retries(self.retry_guard, tier, how)  # built only when one failed
            if not retries.guard(e, 1):
                raise
        await self._sleep(retries.wait_s, trail)
        return await retried(
            lambda: self._timed(tier, attempt, how, trail),
            retries,
            self._cfg.same_tier_retries,
            lambda s: self._sleep(s, trail),
        )

    def retry_guard(
        self, tier: str, e: BaseException | None, retry: int, how: Opening
    ) -> tuple[str, float]:
        """Why the ``retry``-th retry of ``tier`` after ``e`` may not go ("": it may), and
        the wait before it. Every guard on every pass: a transient fault, retries left, the
        tier's circuit closed, the wait plus an attempt inside the attempt's budget (the next
        tiers' reserve is outside it), the retry's first token before the next tier's."""
        if not (isinstance(e, AttemptFailed) and verdict(e).same_tier):
            return "not transient", 0.0
        if retry > self._cfg.same_tier_retries:
            return "no retries left", 0.0
        if not self._pools[tier].available(time.monotonic()):
            return "circuit open", 0.0  # it just opened: no retry into it
        wait = self._wait(e, retry)
        if time.monotonic() + wait + MIN_ATTEMPT_S > how.until:
            return "no time", wait
        if not self._retry_sooner(tier, wait, how.watch):
            return "next tier sooner", wait  # the next tier answers before the retry could
        return "", wait

    def _retry_sooner(self, tier: str, wait: float, watch: HedgeWatch | None) -> bool:
        """Whether a retry of a hedged first tier after ``wait`` would have its first token
        before the next tier would (then the hedge holds back while it waits)."""
        if watch is None or watch.fired:
            return True  # not hedged, or the hedge runs already: the first answer wins
        if wait + (self.book.p90(tier, "ttft") or 0.0) > watch.next_ttft:
            return False
        watch.retry_at = time.monotonic() + wait
        return True

    def _wait(self, e: BaseException | None, retry: int) -> float:
        """The wait before the ``retry``-th retry of a tier: the engine's ``Retry-After``
        when it sent one, else :meth:`backoff`."""
        if isinstance(e, UpstreamStatus) and e.retry_after is not None:
            return e.retry_after
        return self.backoff(retry)

    def backoff(self, retry: int) -> float:
        """The gateway's own wait before the ``retry``-th retry (1, 2 ...) of a tier:
        ``backoff_initial`` doubled for each retry after the first, plus up to
        ``backoff_jitter``, at most ``backoff_max``."""
        c = self._cfg
        wait = c.backoff_initial * 2.0 ** (retry - 1) + random.uniform(0, c.backoff_jitter)
        return min(c.backoff_max, wait)

    @staticmethod
    async def _sleep(seconds: float, trail: Trail) -> None:
        """A deliberate wait, reported as what was really waited: all of it, or the part
        before it was cut short (a hedge that won meanwhile cancels it)."""
        t0 = time.monotonic()
        try:
            await asyncio.sleep(seconds)
        finally:
            trail.backoff_s += min(seconds, time.monotonic() - t0)

    async def _timed(self, tier: str, attempt: Attempt[T], how: Opening, trail: Trail) -> T:
        t0 = time.perf_counter()
        with self._tel.span(
            f"attempt {tier}", {"gateway.tier": tier}, kind=trace.SpanKind.CLIENT
        ) as span:
            try:
                value = await attempt(tier, how)
            except AttemptFailed as e:
                failure = Failure.of(tier, e, time.perf_counter() - t0)
                trail.failures.append(failure)
                span.set_attribute("gateway.attempt.outcome", failure.reason)
                log.info("attempt on %s failed: %s (%s)", tier, failure.reason, e.detail)
                raise
        trail.ok_attempt_s = time.perf_counter() - t0
        self.book.add(tier, "stream" if how.stream else "answer", trail.ok_attempt_s)
        return value

    def _hold(self, call: Call, tier: str) -> int:
        """The hold-back window: where the rule asks, or where a failure after the first
        byte could not be continued on another tier (tool calls, a schema, n > 1)."""
        if not call.req.stream:
            return 0
        if any(c.abilities.hold_stream for c in call.checks):
            return WHOLE  # a whole-answer check protects the stream: held to its verdict
        facts = call.req.facts
        if call.d.hold_back or facts.tools or facts.json_schema or not call.can_be_continued():
            return self._pools[tier].tier.stream.hold_back_tokens
        return 0


def _overlapping_waits(trail: Trail, before: tuple[float, float, float]) -> None:
    """Two hedged attempts wait side by side: their waits count once, up to the time the
    race took (summed, they would exceed it and zero the reported overhead)."""
    upstream, queue, t0 = before
    took = time.perf_counter() - t0
    trail.upstream_s = upstream + min(trail.upstream_s - upstream, took)
    trail.queue_s = queue + min(trail.queue_s - queue, took)
