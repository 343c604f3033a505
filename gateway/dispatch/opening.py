"""Opening an upstream stream: up to its first token (and the hold-back window, if any).

Everything up to the point where :meth:`StreamOpener.open` returns can still fall back
with the client none the wiser: a connection error, a non-200 answer, no first token in
time, an error event, a failed early check. What it returns (:class:`StreamStart`) holds
the complete events read so far, not yet sent to anyone.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from gateway.checks.base import CheckResult, Cost, Output
from gateway.dispatch.budget import MIN_ATTEMPT_S, LatencyBook
from gateway.dispatch.call import Call
from gateway.dispatch.fallback import verdict
from gateway.dispatch.hedge import HedgeWatch
from gateway.dispatch.live import LiveChecks
from gateway.dispatch.outcome import BridgePlan, Trail
from gateway.dispatch.rate import RateGuard
from gateway.dispatch.verdicts import Verdicts
from gateway.telemetry.recorder import Telemetry
from gateway.upstream.failures import (
    AnswerTimeout,
    AttemptFailed,
    BadBody,
    CheckFailed,
    EmptyStream,
    FirstTokenTimeout,
    QueueTimeout,
    StreamCut,
    check_failed,
)
from gateway.upstream.framing import SSEFramer
from gateway.upstream.pools import Pool
from gateway.upstream.replicas import Replica
from gateway.upstream.sse import StreamState
from gateway.upstream.transport import Timeouts, UpstreamStream

WHOLE = 1 << 40
"""``Opening.hold_tokens`` that holds a stream back to its end: a whole-answer check of the
rule protects the stream (``Abilities.hold_stream``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Opening:
    """How to open one attempt's stream: the hold-back window and the attempt's end."""

    hold_tokens: int  # 0: no hold-back window
    until: float  # monotonic: the attempt must be over by then (leaves the next tier time)
    deliver: bool  # the last tier, and the rule delivers an answer that failed a check
    # the client asked for a stream (latency is then time to first token); if not, every
    # event is kept, to assemble the non-streamed answer
    stream: bool = True
    first_token: asyncio.Event | None = None  # set when the first token arrived (hedging)
    guard_rate: bool = False  # another tier can take over: a trickling stream fails
    bridge: BridgePlan | None = None  # a hedge's second tier: it may hand back (bridge.py)
    watch: HedgeWatch | None = None  # a hedge's first tier: its retry and the hedge weighed
    continuing: bool = False  # it continues another tier's text (not an answer's beginning)


@dataclass(slots=True, kw_only=True)
class StreamStart:
    """An upstream stream past its first token (and hold-back window)."""

    up: UpstreamStream
    head: bytes
    framer: SSEFramer
    state: StreamState
    live: LiveChecks
    pool: Pool
    replica: Replica
    checks_failed: CheckResult | None = None  # the last tier failed a check, delivered anyway
    waited_s: float = 0.0  # time spent waiting on the engine (the rest is the gateway's own)
    rate: RateGuard | None = None  # the tier's minimum rate, where another tier can take over
    since: float = field(default_factory=time.monotonic)  # when it took its slot
    way: str | None = None  # finishing another tier's stream: continue, prompt or restart
    held_whole: bool = False  # held back to its end: every check ran before it went out

    def discard(self) -> None:
        """Not used after all (a hedge's other answer won): close it, free the slot."""
        self.up.close()
        self.finish(ok=True)

    def finish(self, ok: bool) -> None:
        """The stream is over: free the replica slot; an upstream fault counts against it."""
        self.pool.release(self.replica, time.monotonic() - self.since)
        if not ok:
            self.pool.record(False)


class StreamOpener:
    def __init__(self, telemetry: Telemetry, book: LatencyBook, verdicts: Verdicts):
        self._tel = telemetry
        self._book = book
        self._verdicts = verdicts

    async def open(
        self, call: Call, pool: Pool, body: bytes, how: Opening, trail: Trail
    ) -> StreamStart:
        """Open a stream; return it once its first token (and hold-back window) passed."""
        rep, queued = await pool.acquire(call.ticket, call.req.routing_key, how.until)
        trail.queue_s += queued  # time in the queue counts against the deadline
        remaining = how.until - time.monotonic()
        if remaining < MIN_ATTEMPT_S:  # the queue took the attempt's time: not the engine's
            pool.release(rep, None)
            raise QueueTimeout("no time left after the queue")
        ttft = min(pool.tier.timeouts.ttft, call.d.ttft_budget, remaining)
        cfg = pool.tier.stream
        s = _start(call, pool, rep, how)
        t0 = time.perf_counter()
        try:
            async with asyncio.timeout(ttft):
                await _connect(s, call.path_for(pool), body, pool.limits(remaining, True))
                await _first_token(s)
            self._book.add(pool.name, "ttft", time.perf_counter() - t0)
            if how.first_token is not None:
                how.first_token.set()
            bad = s.live.maybe_run(s.state)  # nothing goes out unchecked
            s.held_whole = how.hold_tokens >= WHOLE
            if bad is None and how.hold_tokens:
                bad = await self._hold_back(call, s, how, cfg.hold_back_ms)
            if bad is None and how.stream:
                bad = await _past_guards(call, s)
            if bad is not None:
                if not how.deliver:
                    raise check_failed(bad, s.state.text())
                s.checks_failed = bad
                trail.checks_failed = bad.check
        except TimeoutError:
            _abandon(s)
            if ttft < remaining:  # the engine's own limit, not what the deadline left it
                pool.record(False)
            raise FirstTokenTimeout(f"no first token within {ttft:.2f}s") from None
        except AttemptFailed as e:
            _abandon(s)
            pool.record(not verdict(e).tier_fault)
            e.partial = s.state  # what came before (a non-streamed call may continue it)
            raise
        except BaseException:
            _abandon(s)
            raise
        finally:
            trail.upstream_s += s.waited_s
        pool.record(True)
        return s

    async def _hold_back(
        self, call: Call, s: StreamStart, how: Opening, ms: float
    ) -> CheckResult | None:
        """Keep reading until ``how.hold_tokens`` tokens, ``ms`` ms or the end (``WHOLE``:
        the end, within the attempt's time); run live checks, then, on the whole answer,
        every check of the rule, and on a part, the remote ones that take partial text."""
        state, tokens = s.state, how.hold_tokens
        if state.tokens < tokens and not state.done:
            loop = asyncio.get_running_loop()
            if tokens >= WHOLE:
                until: float | None = loop.time() + (how.until - time.monotonic())
            else:
                until = loop.time() + ms / 1000 if ms > 0 else None
            try:
                async with asyncio.timeout_at(until):
                    while state.tokens < tokens and not state.done:
                        await pull(s)
                        bad = s.live.maybe_run(state)
                        if bad is not None:
                            return bad
            except TimeoutError:
                if tokens >= WHOLE:
                    raise AnswerTimeout("the answer held back did not end in its time") from None
                # the window's time is up: what we hold so far goes out
        if state.done:  # all of it is here: every check of the rule
            facts = call.facts_for(s.pool)
            return await self._verdicts.whole(call, state.output(), how.until, facts=facts)
        bad = s.live.run(state)
        remote = [c for c in call.checks if c.abilities.partial and c.abilities.cost is Cost.REMOTE]
        if bad is None and remote:  # remote checks of partial text: the window, once
            out = Output(state.text(), None, [])
            bad = await self._verdicts.whole(call, out, how.until, remote, partial=True)
        return bad


async def _past_guards(call: Call, s: StreamStart) -> CheckResult | None:
    """The first events go out as they are: read on while a check's guard holds their tail
    (the beginning of a forbidden phrase), so nothing sent first is part of a failure."""
    guards = call.guards()
    state = s.state
    while guards is not None and guards.update(state) and not state.done:
        name = guards.confirmed(state)
        if name is not None:
            held = "the text it held confirmed a failure"
            raise CheckFailed(held, name, guards.start, state.text())
        await pull(s)
        bad = s.live.maybe_run(state)
        if bad is not None:
            return bad
    return None


def _start(call: Call, pool: Pool, rep: Replica, how: Opening) -> StreamStart:
    """A stream about to be opened on ``rep``, with its framer, state, checks and rate."""
    cfg = pool.tier.stream
    s = StreamStart(
        up=_Closed(),
        head=b"",
        framer=SSEFramer(pool.tier.max_event_bytes, pool.tier.max_answer_bytes),
        state=StreamState(call.req.kind == "chat"),
        live=LiveChecks(
            call.checks,
            call.facts_for(pool),
            cfg.check_every_chars,
            cfg.check_window_chars,
            fresh=not how.continuing,
        ),
        pool=pool,
        replica=rep,
    )
    if not how.stream:
        s.state.events = []
    s.rate = RateGuard.of(pool.tier.timeouts) if how.guard_rate else None
    return s


class _Closed:
    """The placeholder before the upstream answered."""

    async def read(self) -> bytes:
        return b""

    def close(self) -> None:
        pass

    def release(self) -> None:
        pass


def _abandon(s: StreamStart) -> None:
    s.pool.release(s.replica, None)
    s.up.close()  # drop the connection: the engine stops generating


async def pull(s: StreamStart) -> bool:
    """One read into ``s.head``; True when it carried a token. Raises on a dead stream.

    A stream that ends after a ``finish_reason`` but without ``data: [DONE]`` (some
    engines and providers omit it) is complete, not cut.
    """
    t0 = time.perf_counter()
    try:
        chunk = await s.up.read()
    finally:
        s.waited_s += time.perf_counter() - t0
    if not chunk:
        if s.state.finish_reason is not None:
            s.state.done = s.state.eof_done = True
            return False
        if s.state.id is None and not s.head and s.framer.pending:
            raise BadBody("the answer is not an event stream")
        raise StreamCut("stream ended without [DONE]")
    complete = s.framer.feed_bytes(chunk)
    if not complete:
        return False
    token = s.state.feed_block(complete)
    if s.rate is not None:
        s.rate.check(s.state.emitted, time.monotonic())
    if s.state.events is None:  # to be relayed (assembling keeps the events instead)
        s.head += complete
    return token


async def _connect(s: StreamStart, path: str, body: bytes, limits: Timeouts) -> None:
    """Send the request; the answer's head is in (the wait counts as the engine's)."""
    t0 = time.perf_counter()
    try:
        s.up = await s.pool.open(s.replica, path, body, limits)
    finally:
        s.waited_s += time.perf_counter() - t0


async def _first_token(s: StreamStart) -> None:
    """Read until a token arrives; a stream that ends before one is a failure."""
    while not await pull(s):
        if s.state.done:
            raise EmptyStream("stream ended before the first token")
