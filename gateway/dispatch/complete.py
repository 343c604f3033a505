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
from typing import Any

import orjson

from gateway.dispatch.assemble import assemble, assemble_state, outputs
from gateway.dispatch.call import Call
from gateway.dispatch.opening import Opening, StreamOpener, StreamStart, pull
from gateway.dispatch.outcome import Trail
from gateway.ops.telemetry import Telemetry
from gateway.upstream.pools import Pool
from gateway.upstream.transport import AttemptError

Answer = tuple[bytes, dict[str, Any] | None]


class Completer:
    def __init__(self, opener: StreamOpener, telemetry: Telemetry):
        self._opener = opener
        self._tel = telemetry

    async def complete(self, call: Call, pool: Pool, how: Opening, trail: Trail) -> Answer:
        if not pool.tier.upstream_stream:
            return await self._plain(call, pool, how, trail)
        body = call.body_for(pool, stream=True, stream_options={"include_usage": True})
        how = how.assembling()
        s = await self._opener.open(call, pool, orjson.dumps(body), how, trail)
        waited = s.waited_s  # what the opener counted already
        try:
            answer = await self._drain(call, s, how)
        except BaseException:
            s.up.close()
            s.finish(ok=True)
            raise
        finally:
            trail.upstream_s += s.waited_s - waited
        s.up.release()
        s.finish(ok=True)
        self._judge(call, answer, how, trail, s)
        return orjson.dumps(answer), answer.get("usage")

    async def _drain(self, call: Call, s: StreamStart, how: Opening) -> dict[str, Any]:
        """Read the rest of the stream, checking as it grows; the assembled answer."""
        if s.state.events is None:
            raise AssertionError("the opener keeps events for assembly")  # pragma: no cover
        if s.state.done:  # it all came with the first token: no timer to set
            return self._assembled(call, s)
        try:
            async with asyncio.timeout_at(_loop_time(how.until)):
                while not s.state.done:
                    await pull(s)
                    bad = s.live.maybe_run(s.state)
                    if bad is not None and s.checks_failed is None:
                        if not how.deliver:
                            raise AttemptError(f"check_{bad.check}", bad.reason)
                        s.checks_failed = bad
        except TimeoutError:
            raise AttemptError(
                "timeout", "the answer did not finish in its budget", timeout=True
            ) from None
        return self._assembled(call, s)

    @staticmethod
    def _assembled(call: Call, s: StreamStart) -> dict[str, Any]:
        if s.state.plain:
            return assemble_state(s.state)
        return assemble(call.req.kind, s.state.parsed_events())

    def _judge(
        self,
        call: Call,
        answer: dict[str, Any],
        how: Opening,
        trail: Trail,
        s: StreamStart | None,
    ) -> None:
        """Every check of the rule on every choice (less those the live phase already
        passed on the whole text); the last tier may deliver a failure."""
        if not answer.get("choices"):
            raise AttemptError("bad_body", "the answer has no choices")
        failed, checks = None, call.checks
        if s is not None:
            failed, seen = s.checks_failed, s.live.passed_whole(s.state)
            if seen and not s.state.multi:
                checks = tuple(c for c in checks if c.name not in seen)
        for out in outputs(call.req.kind, answer):
            bad = failed or self._tel.run_checks(checks, out, call.req.facts)
            if bad is None:
                continue
            if not how.deliver:
                raise AttemptError(f"check_{bad.check}", bad.reason)
            trail.checks_failed = bad.check
            return

    async def _plain(self, call: Call, pool: Pool, how: Opening, trail: Trail) -> Answer:
        body = orjson.dumps(call.body_for(pool))
        rep, queued = await pool.acquire(call.ticket, call.affinity, how.until)
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
        except AttemptError as e:
            pool.record(not e.retryable)
            raise
        finally:
            pool.release(rep, held)
            trail.upstream_s += time.perf_counter() - t0
        try:
            answer = orjson.loads(data)
        except orjson.JSONDecodeError:
            pool.record(False)
            raise AttemptError("bad_body", "the answer is not JSON") from None
        if not isinstance(answer, dict) or not isinstance(answer.get("choices"), list):
            pool.record(False)
            raise AttemptError("bad_body", "the answer is not a completion object")
        try:
            answer = assemble_plain(call.req.kind, answer)
        except (TypeError, ValueError, KeyError):
            pool.record(False)
            raise AttemptError("bad_body", "the answer's choices are malformed") from None
        pool.record(True)
        self._judge(call, answer, how, trail, None)
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


def _loop_time(monotonic_at: float) -> float:
    loop = asyncio.get_running_loop()
    return loop.time() + (monotonic_at - time.monotonic())
