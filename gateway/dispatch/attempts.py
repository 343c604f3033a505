"""The attempt loop: the gateway's one retry layer.

Given a :class:`RouteDecision`, try its tiers in order within the request's deadline.
An attempt fails on a 5xx/429/408 answer, a connection error, a timeout (time to
first token for streams, total for everything), a body that is not the JSON we
expect, or a failed quality check; the next tier is then tried after a capped,
jittered backoff from tenacity, never past the deadline. The answer that failed its
check is dropped: the client never receives it. Upstream 4xx answers (other than
408/429) are the request's own fault and end the loop at once.

The first attempt runs outside tenacity (its bookkeeping costs ~30 us, the first
attempt needs none of it); tenacity owns every retry after that.

Streams: an attempt succeeds once the first SSE data event has arrived and is not an
error; everything up to that point can still fall back. What follows the first
byte sent to the client is the api layer's business.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import aiohttp
import orjson
from opentelemetry import trace
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential_jitter,
)
from tenacity.stop import stop_base

from gateway.checks.base import Check, Output, RepetitionSettings, find_loop_start
from gateway.core.request import ClientRequest
from gateway.core.router import RouteDecision
from gateway.core.rules import Dispatch
from gateway.errors import UpstreamFailed, UpstreamTimeout
from gateway.ops.telemetry import Telemetry
from gateway.upstream.pools import AttemptError, Pool, Pools, Replica
from gateway.upstream.sse import LiveChecks, SSEFramer, StreamState

T = TypeVar("T")
_PATHS = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}
_MIN_ATTEMPT_S = 0.05  # no point starting an attempt with less time than this left


@dataclass(slots=True)
class Failure:
    tier: str
    kind: str
    detail: str
    timeout: bool
    seconds: float = 0.0

    def short(self) -> str:
        return f"{self.tier}:{self.kind}"


@dataclass(slots=True)
class StreamStart:
    """An upstream stream past its first token (and hold-back window): ``head`` holds the
    complete events read so far, not yet sent to the client."""

    resp: aiohttp.ClientResponse
    head: bytes
    framer: SSEFramer
    state: StreamState
    live: LiveChecks
    pool: Pool
    replica: Replica

    def finish(self, ok: bool) -> None:
        """The stream is over: free the replica slot; an upstream fault counts against it."""
        self.replica.in_flight -= 1
        if not ok:
            self.pool.record(False)


@dataclass(slots=True)
class Outcome:
    tier: str
    body: bytes  # non-stream: the upstream's JSON, untouched
    stream: StreamStart | None
    failures: list[Failure] = field(default_factory=list)
    upstream_s: float = 0.0  # time spent waiting on engines (for x-gateway-overhead-ms)
    usage: dict[str, Any] | None = None  # the engine's usage report (non-stream)
    ok_attempt_s: float | None = None  # how long the attempt that answered took

    @property
    def fallback(self) -> str | None:
        return describe_fallback(self.failures, self.tier)


def describe_fallback(failures: list[Failure], tier: str) -> str | None:
    """Why we fell back (x-gateway-fallback): ``highspeed:check_repetition (...) -> standard``."""
    if not failures:
        return None
    return "; ".join(f"{f.short()} ({f.detail[:80]})" for f in failures) + f" -> {tier}"


def _outputs(kind: str, payload: Any) -> list[Output]:
    if not isinstance(payload, dict):
        raise AttemptError("bad_body", "answer is not a JSON object")
    choices = payload.get("choices")
    if not isinstance(choices, list) or not choices:
        raise AttemptError("bad_body", "answer has no choices")
    outs = []
    for ch in choices:
        if not isinstance(ch, dict):
            raise AttemptError("bad_body", "a choice is not an object")
        if kind == "chat":
            msg = ch.get("message") or {}
            text = msg.get("content") or ""
            calls = msg.get("tool_calls") or []
        else:
            text, calls = ch.get("text") or "", []
        if not isinstance(text, str) or not isinstance(calls, list):
            raise AttemptError("bad_body", "content or tool_calls of the wrong type")
        outs.append(Output(text=text, finish_reason=ch.get("finish_reason"), tool_calls=calls))
    return outs


def continuation_body(
    req: ClientRequest, pool: Pool, prefix: str, sent_tokens: int
) -> bytes | None:
    """The request that asks ``pool`` to continue the assistant text ``prefix``.

    Chat: the prefix becomes a trailing assistant message, rendered unclosed by the
    engine's chat template so that the model continues it: ``continue_final_message``
    sends SGLang's flag; ``continue_final_message_no_gen`` adds
    ``add_generation_prompt: false``, which vLLM and llama.cpp's server require with it;
    ``prefill`` sends the message alone (llama.cpp's server continues a trailing
    assistant message by itself). Some engines answer with the prefix repeated in front
    (llama.cpp does); the relay strips it. Text completions: the prefix is appended to
    the prompt. Usage is always requested, to add both tiers up.
    """
    style = pool.tier.continuation
    if style == "off":
        return None
    body = {**pool.tier.request_defaults, **req.body}
    body["model"] = pool.model
    if req.kind == "chat":
        body["messages"] = [*req.body["messages"], {"role": "assistant", "content": prefix}]
        if style.startswith("continue_final_message"):
            body["continue_final_message"] = True
        if style == "continue_final_message_no_gen":
            body["add_generation_prompt"] = False
    else:
        prompt = body.get("prompt")
        if not isinstance(prompt, str):
            return None
        body["prompt"] = prompt + prefix
    body["stream_options"] = {**(body.get("stream_options") or {}), "include_usage": True}
    for key in ("max_tokens", "max_completion_tokens"):
        if isinstance(body.get(key), int):
            body[key] = max(1, body[key] - sent_tokens)
    return orjson.dumps(body)


class _StopAt(stop_base):
    """Stop retrying when too little of the request's deadline is left for an attempt."""

    def __init__(self, deadline_at: float):
        self.deadline_at = deadline_at

    def __call__(self, retry_state: RetryCallState) -> bool:
        return self.deadline_at - time.monotonic() < _MIN_ATTEMPT_S


class Dispatcher:
    def __init__(
        self,
        pools: Pools,
        checks: dict[str, Check],
        cfg: Dispatch,
        repetition: RepetitionSettings,
        telemetry: Telemetry,
    ):
        self._tel = telemetry
        self._repetition = repetition
        self._pools = pools
        self._checks = checks
        self._cfg = cfg
        self._wait = wait_exponential_jitter(
            multiplier=cfg.backoff_initial, max=cfg.backoff_max, jitter=cfg.backoff_jitter
        )

    # -- public --------------------------------------------------------------------------
    async def complete(
        self, req: ClientRequest, d: RouteDecision, deadline_at: float, affinity: int
    ) -> Outcome:
        checks = [self._checks[n] for n in d.checks]
        upstream = [0.0]
        usage: list[dict[str, Any] | None] = [None]

        async def attempt(tier: str) -> bytes:
            pool = self._pools[tier]
            remaining = deadline_at - time.monotonic()
            body = self._body(req, pool)
            rep = pool.choose(affinity)
            rep.in_flight += 1
            t0 = time.perf_counter()
            try:
                data = await pool.post(
                    rep, _PATHS[req.kind], body, pool.timeout(remaining, stream=False)
                )
            except AttemptError as e:
                pool.record(not e.retryable)
                raise
            finally:
                rep.in_flight -= 1
                upstream[0] += time.perf_counter() - t0
            try:
                payload = orjson.loads(data)
            except orjson.JSONDecodeError:
                pool.record(False)
                raise AttemptError("bad_body", "answer is not JSON") from None
            outs = _outputs(req.kind, payload)
            usage[0] = payload.get("usage")
            pool.record(True)
            for out in outs:
                bad = self._tel.run_checks(checks, out, req.facts)
                if bad is not None:
                    raise AttemptError(f"check_{bad.check}", bad.reason)
            return data

        tier, data, failures, ok_s = await self._run(d.tiers, attempt, deadline_at)
        return Outcome(tier, data, None, failures, upstream[0], usage[0], ok_s)

    async def stream(
        self, req: ClientRequest, d: RouteDecision, deadline_at: float, affinity: int
    ) -> Outcome:
        checks = [self._checks[n] for n in d.checks]
        upstream = [0.0]

        async def attempt(tier: str) -> StreamStart:
            pool = self._pools[tier]
            body = self._body(req, pool)
            hold = pool.tier.stream.hold_back_tokens if d.hold_back else 0
            return await self._open(
                req, d, pool, body, affinity, deadline_at, checks, hold, upstream
            )

        tier, start, failures, ok_s = await self._run(d.tiers, attempt, deadline_at)
        return Outcome(tier, b"", start, failures, upstream[0], None, ok_s)

    async def continuation(
        self,
        req: ClientRequest,
        d: RouteDecision,
        after: str,
        prefix: str,
        sent_tokens: int,
        deadline_at: float,
        affinity: int,
    ) -> Outcome:
        """A stream from the tiers after ``after`` that continues the assistant ``prefix``."""
        tiers = d.tiers[d.tiers.index(after) + 1 :]
        checks = [self._checks[n] for n in d.checks]
        upstream = [0.0]

        async def attempt(tier: str) -> StreamStart:
            pool = self._pools[tier]
            body = continuation_body(req, pool, prefix, sent_tokens)
            if body is None:
                raise AttemptError(
                    "no_continuation", f"tier {tier} cannot continue this stream", retryable=True
                )
            return await self._open(req, d, pool, body, affinity, deadline_at, checks, 0, upstream)

        if not tiers:
            self._give_up(AttemptError("no_continuation", "no tier left"), [])
        tier, start, failures, ok_s = await self._run(tiers, attempt, deadline_at)
        return Outcome(tier, b"", start, failures, upstream[0], None, ok_s)

    def loop_start(self, state: StreamState) -> int | None:
        """Where the loop in a stream's text begins (the clean text is before it)."""
        return find_loop_start(state.text(), self._repetition)

    def can_continue(self, req: ClientRequest, d: RouteDecision, after: str) -> bool:
        if req.kind == "completions" and not isinstance(req.body.get("prompt"), str):
            return False
        if req.body.get("n", 1) not in (1, None):
            return False
        later = d.tiers[d.tiers.index(after) + 1 :]
        return any(self._pools[t].tier.continuation != "off" for t in later)

    async def _open(
        self,
        req: ClientRequest,
        d: RouteDecision,
        pool: Pool,
        body: bytes,
        affinity: int,
        deadline_at: float,
        checks: list[Check],
        hold: int,
        upstream: list[float],
    ) -> StreamStart:
        """Open a stream; return it once its first token (and hold-back window) passed."""
        remaining = deadline_at - time.monotonic()
        ttft = min(pool.tier.timeouts.ttft, d.ttft_budget, remaining)
        cfg = pool.tier.stream
        rep = pool.choose(affinity)
        framer, state = SSEFramer(), StreamState(req.kind == "chat")
        live = LiveChecks(checks, req.facts, cfg.check_every_chars, cfg.check_window_chars)
        head: list[bytes] = []
        t0 = time.perf_counter()
        rep.in_flight += 1
        resp = None
        try:
            async with asyncio.timeout(ttft):
                resp = await pool.open_stream(
                    rep, _PATHS[req.kind], body, pool.timeout(remaining, stream=True)
                )
                await self._first_token(resp, framer, state, head)
            # nothing goes out unchecked: the first read may already hold many tokens
            bad = live.maybe_run(state)
            if bad is None and hold:
                if state.tokens < hold and not state.done:
                    await self._hold_back(resp, framer, state, head, live, hold, cfg.hold_back_ms)
                if state.done:  # all of it is here: every check of the rule
                    bad = self._tel.run_checks(checks, state.output(), req.facts)
                else:
                    bad = live.run(state)
            if bad is not None:
                raise AttemptError(f"check_{bad.check}", bad.reason)
        except TimeoutError:
            self._abandon(resp, rep)
            pool.record(False)
            raise AttemptError(
                "timeout_ttft", f"no first token within {ttft:.2f}s", timeout=True
            ) from None
        except AttemptError as e:
            self._abandon(resp, rep)
            pool.record(not e.retryable or e.kind.startswith("check_"))
            raise
        except BaseException:
            self._abandon(resp, rep)
            raise
        finally:
            upstream[0] += time.perf_counter() - t0
        pool.record(True)
        assert resp is not None
        return StreamStart(resp, b"".join(head), framer, state, live, pool, rep)

    @staticmethod
    def _abandon(resp: aiohttp.ClientResponse | None, rep: Replica) -> None:
        rep.in_flight -= 1
        if resp is not None:
            resp.close()  # drop the connection: the engine stops generating

    @staticmethod
    async def _pull(
        resp: aiohttp.ClientResponse, framer: SSEFramer, state: StreamState, head: list[bytes]
    ) -> bool:
        """One read into ``head``; True when it carried a token. Raises on a dead stream."""
        try:
            chunk = await resp.content.readany()
        except aiohttp.ClientError as e:
            raise AttemptError("stream_cut", str(e)[:160] or type(e).__name__) from None
        if not chunk:
            raise AttemptError("stream_cut", "stream ended without [DONE]")
        complete, payloads = framer.feed(chunk)
        token = False
        for p in payloads:
            token = state.feed(p) or token
        if complete:
            head.append(complete)
        return token

    @classmethod
    async def _first_token(
        cls,
        resp: aiohttp.ClientResponse,
        framer: SSEFramer,
        state: StreamState,
        head: list[bytes],
    ) -> None:
        """Read until a token arrives; a stream that ends before one is a failure."""
        while not await cls._pull(resp, framer, state, head):
            if state.done:
                raise AttemptError("stream_empty", "stream ended before the first token")

    async def _hold_back(
        self,
        resp: aiohttp.ClientResponse,
        framer: SSEFramer,
        state: StreamState,
        head: list[bytes],
        live: LiveChecks,
        tokens: int,
        ms: float,
    ) -> None:
        """Keep reading until ``tokens`` tokens, ``ms`` ms or the end; run live checks."""
        loop = asyncio.get_running_loop()
        until = loop.time() + ms / 1000 if ms > 0 else None
        try:
            async with asyncio.timeout_at(until):
                while state.tokens < tokens and not state.done:
                    await self._pull(resp, framer, state, head)
                    bad = live.maybe_run(state)
                    if bad is not None:
                        raise AttemptError(f"check_{bad.check}", bad.reason)
        except TimeoutError:
            pass  # the window's time is up: what we hold so far goes out

    # -- internals -----------------------------------------------------------------------
    @staticmethod
    def _body(req: ClientRequest, pool: Pool) -> bytes:
        req.body["model"] = pool.model
        defaults = pool.tier.request_defaults
        if defaults:  # the tier's own generation settings, where the client set none
            return orjson.dumps({**defaults, **req.body})
        return orjson.dumps(req.body)

    async def _timed(
        self,
        tier: str,
        attempt: Callable[[str], Awaitable[T]],
        failures: list[Failure],
        ok: list[float],
    ) -> T:
        t0 = time.perf_counter()
        with self._tel.span(
            f"attempt {tier}", {"gateway.tier": tier}, kind=trace.SpanKind.CLIENT
        ) as span:
            try:
                value = await attempt(tier)
            except AttemptError as e:
                failures.append(
                    Failure(tier, e.kind, e.detail, e.timeout, time.perf_counter() - t0)
                )
                span.set_attribute("gateway.attempt.outcome", e.kind)
                raise
            ok.append(time.perf_counter() - t0)
            return value

    async def _run(
        self, tiers: tuple[str, ...], attempt: Callable[[str], Awaitable[T]], deadline_at: float
    ) -> tuple[str, T, list[Failure], float]:
        failures: list[Failure] = []
        ok: list[float] = []
        try:
            return tiers[0], await self._timed(tiers[0], attempt, failures, ok), failures, ok[0]
        except AttemptError as e:
            if not e.retryable or len(tiers) == 1:
                self._give_up(e, failures)
        rest = iter(tiers[1:])

        def retryable(exc: BaseException) -> bool:
            return isinstance(exc, AttemptError) and exc.retryable

        def wait(state: RetryCallState) -> float:
            return max(0.0, min(self._wait(state), deadline_at - time.monotonic() - _MIN_ATTEMPT_S))

        first_wait = min(
            self._cfg.backoff_initial + random.uniform(0, self._cfg.backoff_jitter),
            self._cfg.backoff_max,
            deadline_at - time.monotonic() - _MIN_ATTEMPT_S,
        )
        if first_wait < 0:
            self._give_up(AttemptError("deadline", "deadline reached", timeout=True), failures)
        await asyncio.sleep(first_wait)
        retrying = AsyncRetrying(
            stop=stop_after_attempt(len(tiers) - 1) | _StopAt(deadline_at),
            wait=wait,
            retry=retry_if_exception(retryable),
            reraise=True,
        )
        try:
            async for a in retrying:
                with a:
                    tier = next(rest)
                    value = await self._timed(tier, attempt, failures, ok)
                    return tier, value, failures, ok[0]
        except AttemptError as e:
            self._give_up(e, failures)
        raise AssertionError("unreachable")  # pragma: no cover

    @staticmethod
    def _give_up(last: AttemptError, failures: list[Failure]) -> None:
        if not last.retryable and last.status is not None and last.body is not None:
            raise last  # a client error from the engine: relayed as it is
        what = "; ".join(f"{f.tier}: {f.kind} ({f.detail})" for f in failures)
        msg = f"Every tier failed: {what}."
        if failures and failures[-1].timeout:
            raise UpstreamTimeout(msg)
        raise UpstreamFailed(msg)
