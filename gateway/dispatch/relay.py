"""The live phase of a stream: forward, keep checking, and never fail silently.

:class:`StreamRelay` drives an opened upstream stream (:class:`StreamStart`) to its end,
writing to a :class:`Sink` (the client's response; a list in tests). Bytes go out
untouched, each batch only after its events were checked. When the stream goes bad after
the client got bytes (a live check fails, an error event, a stall, a cut before
``[DONE]``), the relay asks its :class:`Continuer` for a stream from the next tier that
*continues* the assistant text already sent, and splices it in (:mod:`splice`). For a
loop, the continuation starts from the text before the loop. When no continuation is
possible the stream ends with an OpenAI-style error event and ``data: [DONE]`` — never a
second response head, never a silent stop. A stream that ends after a ``finish_reason``
without ``[DONE]`` is complete: the relay sends the ``[DONE]`` itself.

When nothing needs parsing (no live checks and no tier left to continue on), bytes are
relayed without looking inside them.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any, Protocol

from gateway.dispatch.bridge import bridge
from gateway.dispatch.call import Call
from gateway.dispatch.continuation import Continuer
from gateway.dispatch.fallback import reason, verdict
from gateway.dispatch.finish import separator
from gateway.dispatch.opening import StreamStart
from gateway.dispatch.outcome import Failure, Trail, describe_fallback
from gateway.dispatch.splice import DONE, Restart, Splice
from gateway.dispatch.usage_event import drop_usage
from gateway.dispatch.verdicts import Verdicts
from gateway.errors import GatewayError, StreamBroken, error_body
from gateway.headers import H_CHECKS_FAILED, H_CONTINUED, H_COST, H_FALLBACK, H_FINISH
from gateway.upstream.failures import (
    AttemptFailed,
    CheckFailed,
    ClientSlow,
    Stall,
    StreamCut,
    check_failed,
)
from gateway.upstream.framing import data_payloads
from gateway.upstream.sse import StreamState

_HELD = "the text it held confirmed a failure (a loop: held back, not sent)"


class Sink(Protocol):
    async def write(self, data: bytes) -> None: ...

    async def write_eof(self, data: bytes = b"") -> None: ...


class _Broken(Exception):
    """The current upstream stream failed after the client got bytes: ``error`` says why."""

    def __init__(self, error: AttemptFailed):
        super().__init__(error.detail)
        self.error = error


@contextlib.contextmanager
def _as_broken() -> Iterator[None]:
    """Upstream trouble while a stream is relayed, as :class:`_Broken`."""
    try:
        yield
    except AttemptFailed as e:
        raise _Broken(e) from None
    except TimeoutError:
        raise _Broken(Stall("no token within the stall or total timeout")) from None


class StreamRelay:
    def __init__(
        self,
        call: Call,
        tier: str,
        start: StreamStart,
        trail: Trail,
        cont: Continuer,
        verdicts: Verdicts | None = None,
    ):
        self.call = call
        self.tier = tier
        self.start = start
        self.trail = trail
        self._cont = cont
        self.sent_chars = 0
        self._sent_events = 0  # the content events that carried them
        self._sent = start.state  # the stream they came from
        self.broken = False  # it ended with an error event
        self._active: StreamStart | None = start  # the upstream stream being relayed
        self._splice: Splice | None = None
        self._guard = call.guards()  # text that may begin a failure is held back
        self._last: StreamState = start.state
        self._pool = start.pool  # the tier whose price the answer is charged at
        self._strip = not call.wants_usage  # the usage chunk was asked for by us, not them
        self.blocked_s = 0.0  # time spent waiting for the client to take our writes
        self._verdicts = verdicts
        # whole-answer checks that run after the last token: they report, the answer is out
        self._reporting = tuple(
            c for c in call.checks if c.abilities.report_stream or c.abilities.report_only
        )

    def abandon(self) -> None:
        """The client never got a response head: drop the upstream stream."""
        self._cont.drop_ahead()
        if self._active is not None:
            self._active.up.close()
            self._release(ok=True)

    async def run(self, sink: Sink) -> None:
        start = self.start
        try:
            head = start.head
            if self._strip and start.state.usage is not None:
                head = drop_usage(head)
            await sink.write(head)
            self._mark_sent(start.state)
            start = await self._bridged(start, sink)
            try:
                await self._pump(start, sink)
                self._release(ok=True)
                await self._report(start)
            except _Broken as b:
                self._release(ok=not self._engine_fault(b, start))
                self.trail.failures.append(Failure.of(self.tier, b.error))
                await self._recover(sink, start, b)
            await self._epilogue(sink)
        finally:
            self.abandon()  # the client went away (or we were cancelled): stop upstream now

    def _release(self, ok: bool) -> None:
        """The active upstream stream is over: drop its connection unless it ended cleanly."""
        s, self._active = self._active, None
        if s is None:
            return
        if s.state.done:
            s.up.release()
        else:
            s.up.close()
        s.finish(ok)

    async def _bridged(self, start: StreamStart, sink: Sink) -> StreamStart:
        """A hedge's second tier sent the first token: the first tier's continuation of it,
        relayed as this stream from here on, if it comes in time (:mod:`bridge`)."""
        plan = self.trail.bridge
        if plan is None or plan.tier == self.tier:
            return start
        nxt = await bridge(self._cont, plan, start, self.trail, keep_events=False)
        if nxt is None:
            return start
        self.tier = plan.tier
        # its state begins with the text sent, and this tier repeats no prefix: none to strip
        await self._switch(sink, nxt, start.state, "")
        self._mark_sent(nxt.state)
        return nxt

    async def _switch(
        self,
        sink: Sink,
        nxt: StreamStart,
        first: StreamState,
        echo: str,
        restart: Restart | None = None,
    ) -> None:
        """Relay ``nxt`` from here on, dressed as ``first`` (the stream the client has);
        ``echo``: the prefix ``nxt``'s engine may repeat in front of its text (a restart:
        the separator in front of one that does not begin with it)."""
        self._active, self._last, self._pool = nxt, nxt.state, nxt.pool
        if self._guard is not None:
            self._guard = self.call.guards()  # the new stream's own text
        self._splice = Splice(first, echo, self.sent_tokens, self.call.wants_usage, restart)
        head = self._splice.rewrite(data_payloads(nxt.head))
        if head:
            await sink.write(head)

    # -- forwarding --------------------------------------------------------------------------
    async def _pump(self, s: StreamStart, sink: Sink) -> None:
        """Forward one upstream stream to the end; raise :class:`_Broken` if it goes bad."""
        state, live, splice = s.state, s.live, self._splice
        needed = live or splice is not None or self._strip or self._reporting
        if not (needed or self._can_continue()):
            await self._passthrough(s, sink)
            return
        guard, held = self._guard, b""
        rate = s.rate if self._can_continue() else None  # else a slow stream is still the answer
        with _as_broken():
            while chunk := await s.up.read():
                complete = s.framer.feed_bytes(chunk)
                if not complete:
                    continue
                usage = state.usage
                state.feed_block(complete)
                if rate is not None and state.resumable:
                    rate.check(state.emitted, time.monotonic() - self.blocked_s)
                bad = live.maybe_run(state)
                if bad is not None:
                    raise _Broken(check_failed(bad, state.text()))
                out = complete if splice is None else splice.rewrite(data_payloads(complete))
                if state.usage is not usage and self._strip and splice is None:
                    out = drop_usage(out)
                if guard is not None and guard.update(state):  # a candidate loop: hold it
                    check = guard.confirmed(state)
                    if check is not None:
                        raise _Broken(CheckFailed(_HELD, check, guard.start, state.text()))
                    if guard.ahead and self._cont.wants_ahead and state.resumable:
                        prefix = state.text()[: min(guard.start, self.sent_chars)]
                        self._cont.open_ahead(self.tier, prefix, self.sent_tokens, False)
                    held += out
                    continue
                if self._cont.ahead is not None:  # the candidate broke off: not a loop
                    self._cont.drop_ahead()
                if held + out:
                    t0 = time.monotonic()
                    await sink.write(held + out)
                    self.blocked_s += time.monotonic() - t0
                held = b""
                self._mark_sent(state)
        self._cont.drop_ahead()
        if held:  # repetitive, but it ended: not a loop
            await sink.write(held)
            self._mark_sent(state)
        self._finish_or_cut(state)
        if state.eof_done:
            await sink.write(DONE)

    async def _passthrough(self, s: StreamStart, sink: Sink) -> None:
        if s.framer.pending:
            await sink.write(s.framer.pending)
        prev = last = b""
        with _as_broken():
            while chunk := await s.up.read():
                t0 = time.monotonic()
                await sink.write(chunk)
                self.blocked_s += time.monotonic() - t0
                prev, last = last, chunk
        tail = prev + last
        ending = StreamState(s.state.chat)  # the last events: usage; finished without [DONE]?
        for p in data_payloads(tail):
            with contextlib.suppress(AttemptFailed):
                ending.feed(p)
        s.state.usage = ending.usage or s.state.usage
        if b"[DONE]" in tail[-64:] or s.state.done:
            s.state.done = True
            return
        s.state.finish_reason = s.state.finish_reason or ending.finish_reason
        self._finish_or_cut(s.state)
        await sink.write(DONE)

    @staticmethod
    def _finish_or_cut(state: StreamState) -> None:
        if state.done:
            return
        if state.finish_reason is not None:  # a finished stream that omits [DONE]
            state.done = state.eof_done = True
            return
        raise _Broken(StreamCut("the stream ended without [DONE]"))

    def _engine_fault(self, b: _Broken, s: StreamStart) -> bool:
        """Whether a failure counts against the tier. A timeout after the client kept us
        blocked on our writes for a stall limit or more is backpressure from a slow
        reader, not the engine's fault (:class:`ClientSlow`): the circuit is not charged."""
        if not verdict(b.error).tier_fault:
            return False
        if isinstance(b.error, Stall) and self.blocked_s >= s.pool.tier.timeouts.stall:
            b.error = ClientSlow("the client read too slowly")
            return False
        return True

    def _mark_sent(self, state: StreamState) -> None:
        self.sent_chars = state.chars
        self._sent_events = state.tokens
        self._sent = state

    @property
    def sent_tokens(self) -> int:
        """At least the tokens the client got (:meth:`StreamState.tokens_for`)."""
        return self._sent.tokens_for(self.sent_chars, self._sent_events)

    def _can_continue(self) -> bool:
        """A later tier could finish this stream if it broke now (:mod:`finish`)."""
        return time.monotonic() < self.call.deadline_at and self._cont.finishable(self.tier)

    # -- recovery ----------------------------------------------------------------------------
    async def _recover(self, sink: Sink, broken: StreamStart, b: _Broken) -> None:
        state = broken.state
        why = f"tier {self.tier} failed mid-stream ({reason(b.error)})"
        if not (state.resumable and self._can_continue()):
            await self._error(sink, f"The stream broke off: {why}; it cannot be continued.")
            return
        text = state.text()
        prefix = text[: self.sent_chars]
        if isinstance(b.error, CheckFailed):  # before the failure, where the check knows it
            good = self.call.good_prefix(b.error, text, state.finish_reason)
            held = self._guard
            if held is not None and held.holding:  # the text it holds was not sent
                good = held.start if good is None else min(good, held.start)
            if good is not None:
                prefix = text[: min(good, self.sent_chars)]
        try:
            taken = await self._cont.take_ahead(prefix, self.trail)
            self.tier, nxt = taken or await self._cont.open(
                self.tier, prefix, self.sent_tokens, self.trail
            )
        except (GatewayError, AttemptFailed):
            await self._error(
                sink, f"The stream broke off: {why}; continuing it on another tier failed too."
            )
            return
        self.trail.finished = f"{nxt.way} {self.tier}"
        if nxt.way == "restart":  # a new answer: what the client has is its "echo"
            sent = text[: self.sent_chars]
            await self._switch(sink, nxt, state, sent, Restart(len(prefix), separator(sent)))
        else:
            await self._switch(sink, nxt, state, prefix)
        try:
            await self._pump(nxt, sink)
            self._release(ok=True)
        except _Broken as b2:
            self._release(ok=not self._engine_fault(b2, nxt))
            self.trail.failures.append(Failure.of(self.tier, b2.error))
            await self._error(
                sink, f"The stream broke off: {why}; its continuation on {self.tier} failed too."
            )

    def usage(self) -> dict[str, Any]:
        """What this stream cost, for accounting: the engine's report when it sent one,
        else an estimate (the prompt's size, the content events sent: ~ a token each)."""
        if self._splice is not None:
            if self._splice.merged is not None:
                return self._splice.merged
            if self._last.usage:
                return self._splice.merge_usage(self._last.usage)
        if self.start.state.usage:
            return self.start.state.usage
        return {
            "prompt_tokens": self.call.req.prompt_tokens,
            "completion_tokens": self.sent_tokens,
        }

    def cost(self) -> float | None:
        """USD at the answering tier's price (a continuation's first part included)."""
        return self._pool.cost(self.usage())

    def charged(self) -> tuple[dict[str, Any], float | None]:
        """What the client is charged: :meth:`usage`, its prompt estimated where the stream
        ended before the engine said, and its cost at the answering tier's price."""
        usage = self.usage()
        if not usage.get("prompt_tokens"):
            usage = {**usage, "prompt_tokens": self.call.req.prompt_tokens}
        return usage, self._pool.cost(usage)

    async def _report(self, s: StreamStart) -> None:
        """The whole answer went out: the checks that report on streams (a failure goes to
        the trailer and the metrics) and the report-only ones (in the background)."""
        if not self._reporting or self._verdicts is None or not s.state.done:
            return
        out = s.state.output()
        held = s.state.done and s.held_whole  # every acting check ran before it went out
        acting = [c for c in self._reporting if not c.abilities.report_only]
        if acting and not held:
            bad = await self._verdicts.whole(self.call, out, self.call.deadline_at, acting)
            if bad is not None:
                self.trail.checks_failed = bad.check
        self._verdicts.report(self.call, out)

    # -- endings -----------------------------------------------------------------------------
    async def _error(self, sink: Sink, message: str) -> None:
        self.broken = True
        await sink.write(b"data: " + error_body(StreamBroken(message)) + b"\n\n" + DONE)

    async def _epilogue(self, sink: Sink) -> None:
        cost = self.cost()
        if cost is not None:
            await sink.write(f": {H_COST} {cost:.9f}\n\n".encode())
        finished = self.trail.finished  # how a break after the first byte was finished
        if finished is not None:
            diverged = self._splice is not None and self._splice.diverged
            finished += " diverged" if diverged else ""
            await sink.write(f": {H_FINISH} {finished}\n\n".encode("ascii", "replace"))
        # the tier that answered: none when the stream ended with the error event
        fb = describe_fallback(self.trail.failures, "none" if self.broken else self.tier)
        if fb:
            await sink.write(f": {H_FALLBACK} {fb}\n\n".encode("ascii", "replace"))
        if self.trail.bridged:
            await sink.write(f": {H_CONTINUED} {self.trail.bridged}\n\n".encode())
        if self.trail.checks_failed:  # delivered, though a check failed on it
            await sink.write(f": {H_CHECKS_FAILED} {self.trail.checks_failed}\n\n".encode())
        await sink.write_eof()
