"""One non-streamed attempt on one tier.

The engine is asked for a stream (unless its tier says it cannot stream): the first-token
budget, the stall limit and the live checks (loops, template leaks) then act while the
answer is generated, and a bad answer is dropped the moment it is seen — the upstream
connection closed, so the engine stops. The JSON the client gets is assembled from the
events. Engines that cannot stream get a plain request within the attempt's budget.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from typing import Any

import orjson

from gateway.dispatch.assemble import assembled, outputs
from gateway.dispatch.bridge import bridge
from gateway.dispatch.call import Call, Guards
from gateway.dispatch.continuation import Continuer, continuation_body
from gateway.dispatch.fallback import verdict
from gateway.dispatch.opening import Opening, StreamOpener, StreamStart, pull
from gateway.dispatch.outcome import Failure, Salvage, Trail
from gateway.dispatch.splice import merge_usage
from gateway.dispatch.verdicts import Verdicts
from gateway.telemetry.recorder import Telemetry
from gateway.upstream.failures import (
    AnswerTimeout,
    AttemptFailed,
    BadBody,
    CheckFailed,
    check_failed,
)
from gateway.upstream.pools import Pool
from gateway.upstream.sse import StreamState

Answer = tuple[bytes, dict[str, Any] | None]


class Completer:
    def __init__(self, opener: StreamOpener, telemetry: Telemetry, verdicts: Verdicts):
        self._opener = opener
        self._tel = telemetry
        self._verdicts = verdicts

    async def complete(
        self, call: Call, pool: Pool, how: Opening, trail: Trail, cont: Continuer | None = None
    ) -> Answer:
        if not pool.tier.upstream_stream:
            return await self._plain(call, pool, how, trail)
        salvage = trail.salvage  # an earlier tier's good text: continue it, don't start over
        s = await _taken(cont, salvage, pool, trail)  # opened while the loop was a candidate
        if s is None:
            body = (
                continuation_body(call, pool, salvage.prefix, salvage.tokens) if salvage else None
            )
            if body is None:
                salvage = None
                usage = {"include_usage": True}
                body = orjson.dumps(call.body_for(pool, stream=True, stream_options=usage))
            try:
                s = await self._opener.open(
                    call, pool, body, _continuing(how, salvage is not None), trail
                )
            except AttemptFailed as e:
                if isinstance(e.partial, StreamState):  # e.g. a loop in the first read
                    self._keep(call, pool.name, e.partial, e, trail)
                if salvage is None or verdict(e).next_tier:
                    raise
                pool.continues = False  # it refuses assistant prefixes: start over there
                trail.salvage = None
                return await self.complete(call, pool, how, trail, cont)
            if how.bridge is not None and cont is not None and salvage is None:
                bridged = await self._bridged(call, pool, s, how, trail, cont)
                if bridged is not None:
                    return bridged
        answer = await self._read(call, s, how, trail, cont)
        live: StreamStart | None = s
        if salvage is not None:  # the whole text is judged: the live phase saw only a part
            answer, live = _joined(call, answer, salvage), None
            trail.continued, trail.salvage = f"{salvage.tier}:{len(salvage.prefix)}", None
        await self._judged(call, answer, how, trail, live, pool)
        return orjson.dumps(answer), answer.get("usage")

    async def _judged(
        self,
        call: Call,
        answer: dict[str, Any],
        how: Opening,
        trail: Trail,
        s: StreamStart | None,
        pool: Pool,
    ) -> None:
        """:meth:`_judge`; a failure leaves the next tier what of ``s``'s text it can use."""
        try:
            await self._judge(call, answer, how, trail, s, pool)
        except AttemptFailed as e:
            if s is not None:
                self._keep(call, s.pool.name, s.state, e, trail)
            raise

    async def _bridged(
        self, call: Call, pool: Pool, s: StreamStart, how: Opening, trail: Trail, cont: Continuer
    ) -> Answer | None:
        """A hedge's second tier has its first token: the rest from the first tier, if its
        continuation comes in time (:mod:`bridge`); when that fails later, this tier
        continues what it left, as after any failure."""
        assert how.bridge is not None
        first_usage, tokens = s.state.usage, s.state.tokens_for(s.state.chars)
        try:
            nxt = await bridge(cont, how.bridge, s, trail, keep_events=True)
        except BaseException:  # the client left while it waited: this stream too
            s.discard()
            raise
        if nxt is None:
            return None
        fast = replace(how, until=how.bridge.until, deliver=False, first_token=None, bridge=None)
        try:
            answer = await self._read(call, nxt, fast, trail, cont)
            if isinstance(answer.get("usage"), dict):
                answer["usage"] = merge_usage(first_usage, tokens, answer["usage"])
            await self._judged(call, answer, fast, trail, nxt, nxt.pool)
        except AttemptFailed as e:
            trail.failures.append(Failure.of(nxt.pool.name, e))
            trail.bridged = None
            return await self.complete(call, pool, replace(how, bridge=None), trail, cont)
        trail.continued = trail.bridged
        return orjson.dumps(answer), answer.get("usage")

    async def _read(
        self, call: Call, s: StreamStart, how: Opening, trail: Trail, cont: Continuer | None
    ) -> dict[str, Any]:
        """The rest of the stream, assembled; a failure leaves its good text to the next tier."""
        waited = s.waited_s  # what the opener counted already
        try:
            answer = await self._drain(call, s, how, cont)
        except BaseException as e:
            s.up.close()
            s.finish(ok=True)
            if isinstance(e, AttemptFailed):
                self._keep(call, s.pool.name, s.state, e, trail)
            raise
        finally:
            trail.upstream_s += s.waited_s - waited
        s.up.release()
        s.finish(ok=True)
        return answer

    def _keep(
        self, call: Call, tier: str, state: StreamState, e: AttemptFailed, trail: Trail
    ) -> None:
        """What of a failed attempt's text the next tier can continue: what came before a
        failed check's failure where the check knows it (a loop -- not one copy of its unit:
        a model shown it tends to go on with it -- a leaked template token), all of it before
        a cut, a stall, a trickle, a timeout."""
        if trail.salvage or not (state.plain and state.resumable):
            return
        text, at = state.text(), None
        if isinstance(e, CheckFailed):
            at = call.good_prefix(e, text, state.finish_reason)
        elif verdict(e).continuable:
            at = len(text)
        if at and text[:at].strip() and call.can_be_continued():
            tokens = state.tokens_for(at)
            trail.salvage = Salvage(tier, text[:at], tokens, state.usage)

    async def _drain(
        self, call: Call, s: StreamStart, how: Opening, cont: Continuer | None
    ) -> dict[str, Any]:
        """Read the rest of the stream, checking as it grows; the assembled answer."""
        if s.state.events is None:
            raise AssertionError("the opener keeps events for assembly")  # pragma: no cover
        if s.state.done:  # it all came with the first token: no timer to set
            return self._assembled(call, s)
        ahead = _Ahead.of(call, s, cont)
        try:
            async with asyncio.timeout_at(_loop_time(how.until)):
                while not s.state.done:
                    await pull(s)
                    bad = s.live.maybe_run(s.state)
                    if bad is not None and s.checks_failed is None:
                        if not how.deliver:
                            raise check_failed(bad, s.state.text())
                        s.checks_failed = bad
                    if ahead is not None:
                        ahead.watch(s)
        except TimeoutError:
            raise AnswerTimeout("the answer did not finish in its budget") from None
        if ahead is not None:
            ahead.cont.drop_ahead()  # it finished: a candidate loop was none
        return self._assembled(call, s)

    @staticmethod
    def _assembled(call: Call, s: StreamStart) -> dict[str, Any]:
        return assembled(call.req.kind, s.state)

    async def _judge(
        self,
        call: Call,
        answer: dict[str, Any],
        how: Opening,
        trail: Trail,
        s: StreamStart | None,
        pool: Pool,
    ) -> None:
        """Every check of the rule on every choice (less those the live phase already
        passed on the whole text); the last tier may deliver a failure."""
        if not answer.get("choices"):
            raise BadBody("the answer has no choices")
        failed, checks = None, call.checks
        if s is not None:
            failed, seen = s.checks_failed, s.live.passed_whole(s.state)
            if seen and not s.state.multi:
                checks = tuple(c for c in checks if id(c) not in seen)
        for out in outputs(call.req.kind, answer):
            facts = call.facts_for(pool)
            bad = failed or await self._verdicts.whole(call, out, how.until, checks, facts=facts)
            if bad is None:
                continue
            if not how.deliver:
                raise check_failed(bad, out.text)
            trail.checks_failed = bad.check
            return
        for out in outputs(call.req.kind, answer):
            self._verdicts.report(call, out)

    async def _plain(self, call: Call, pool: Pool, how: Opening, trail: Trail) -> Answer:
        body = orjson.dumps(call.body_for(pool))
        rep, queued = await pool.acquire(call.ticket, call.req.routing_key, how.until)
        trail.queue_s += queued
        t0 = time.perf_counter()
        held: float | None = None
        try:
            data = await pool.post(
                rep,
                call.path_for(pool),
                body,
                pool.limits(how.until - time.monotonic(), stream=False),
            )
            held = time.perf_counter() - t0
        except AttemptFailed as e:
            pool.record(not verdict(e).tier_fault)
            raise
        finally:
            pool.release(rep, held)
            trail.upstream_s += time.perf_counter() - t0
        try:
            answer = orjson.loads(data)
        except orjson.JSONDecodeError:
            pool.record(False)
            raise BadBody("the answer is not JSON") from None
        if not isinstance(answer, dict) or not isinstance(answer.get("choices"), list):
            pool.record(False)
            raise BadBody("the answer is not a completion object")
        try:
            answer = assemble_plain(call.req.kind, answer)
        except (TypeError, ValueError, KeyError):
            pool.record(False)
            raise BadBody("the answer's choices are malformed") from None
        pool.record(True)
        await self._judge(call, answer, how, trail, None, pool)
        return data, answer.get("usage")


def assemble_plain(kind: str, answer: dict[str, Any]) -> dict[str, Any]:
    """Check a plain answer's shape, the way the checks will read it."""
    for ch in answer["choices"]:
        if not isinstance(ch, dict):
            raise TypeError("a choice is not an object")
        ch.setdefault("finish_reason", None)
        if kind == "chat":
            msg = ch.get("message")
            if not isinstance(msg, dict):
                raise TypeError("a message is not an object")
            if not isinstance(msg.get("content") or "", str):
                raise TypeError("content is not a string")
            if not isinstance(msg.get("tool_calls") or [], list):
                raise TypeError("tool_calls is not a list")
        elif not isinstance(ch.get("text") or "", str):
            raise TypeError("text is not a string")
    if answer.get("usage") is not None and not isinstance(answer["usage"], dict):
        raise TypeError("usage is not an object")
    return answer


def _joined(call: Call, answer: dict[str, Any], salvage: Salvage) -> dict[str, Any]:
    """A continuation's answer with the text it continues in front (once: an engine that
    repeats the prefix, as llama.cpp's server does, has it stripped); both tiers' usage."""
    choice = answer["choices"][0]
    msg, key = (choice["message"], "content") if call.req.kind == "chat" else (choice, "text")
    text = msg.get(key) or ""
    if text.startswith(salvage.prefix):
        text = text[len(salvage.prefix) :]
    msg[key] = salvage.prefix + text
    if isinstance(answer.get("usage"), dict):
        answer["usage"] = merge_usage(salvage.usage, salvage.tokens, answer["usage"])
    return answer


async def _taken(
    cont: Continuer | None, salvage: Salvage | None, pool: Pool, trail: Trail
) -> StreamStart | None:
    """The continuation of ``salvage`` that was opened ahead on ``pool``'s tier, if any."""
    if cont is None or cont.ahead is None:
        return None
    if salvage is None:  # the earlier tier left nothing to continue: this one starts over
        cont.drop_ahead()
        return None
    taken = await cont.take_ahead(salvage.prefix, trail)
    if taken is None:
        return None
    if taken[0] != pool.name:
        taken[1].discard()
        return None
    return taken[1]


class _Ahead:
    """A check's stream guard on a non-streamed answer, as on a stream: a candidate (a loop)
    opens its continuation on the next tier (:class:`~gateway.dispatch.continuation.Ahead`),
    and a confirmed one fails the attempt at once, not at the check's next periodic run.
    Nothing is held: nothing was sent."""

    __slots__ = ("cont", "guard")

    def __init__(self, cont: Continuer, guard: Guards):
        self.cont = cont
        self.guard = guard

    @classmethod
    def of(cls, call: Call, s: StreamStart, cont: Continuer | None) -> _Ahead | None:
        if cont is None or not cont.possible(s.pool.name):
            return None
        guards = call.guards(ahead_only=True)
        return cls(cont, guards) if guards is not None else None

    def watch(self, s: StreamStart) -> None:
        state, cont = s.state, self.cont
        if not self.guard.update(state):
            if cont.ahead is not None:
                cont.drop_ahead()  # the candidate broke off
            return
        check = self.guard.confirmed(state)
        if check is not None:
            detail = "the text it held confirmed a failure"
            raise CheckFailed(detail, check, self.guard.start, state.text())
        if cont.wants_ahead and state.plain and state.resumable:
            at = self.guard.start
            tokens = state.tokens_for(at)
            cont.open_ahead(s.pool.name, state.text()[:at], tokens, True)


def _continuing(how: Opening, continuing: bool) -> Opening:
    """``how`` for an attempt that does (or does not) continue another tier's text."""
    return how if how.continuing == continuing else replace(how, continuing=continuing)


def _loop_time(monotonic_at: float) -> float:
    loop = asyncio.get_running_loop()
    return loop.time() + (monotonic_at - time.monotonic())
