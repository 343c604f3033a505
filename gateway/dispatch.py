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
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential_jitter,
)
from tenacity.stop import stop_base

from gateway.checks import Check, Output, run_checks
from gateway.errors import UpstreamFailed, UpstreamTimeout
from gateway.pools import AttemptError, Pools
from gateway.request import ClientRequest
from gateway.router import RouteDecision
from gateway.rules import Dispatch

T = TypeVar("T")
_PATHS = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}
_MIN_ATTEMPT_S = 0.05  # no point starting an attempt with less time than this left


@dataclass(slots=True)
class Failure:
    tier: str
    kind: str
    detail: str
    timeout: bool

    def short(self) -> str:
        return f"{self.tier}:{self.kind}"


@dataclass(slots=True)
class StreamStart:
    """An upstream stream whose first data event has arrived (held in ``head``)."""

    resp: aiohttp.ClientResponse
    head: bytes


@dataclass(slots=True)
class Outcome:
    tier: str
    body: bytes  # non-stream: the upstream's JSON, untouched
    stream: StreamStart | None
    failures: list[Failure] = field(default_factory=list)
    upstream_s: float = 0.0  # time spent waiting on engines (for x-gateway-overhead-ms)

    @property
    def fallback(self) -> str | None:
        """Why we fell back, for x-gateway-fallback: ``highspeed:check_repetition (...)``."""
        if not self.failures:
            return None
        return "; ".join(f"{f.short()} ({f.detail[:80]})" for f in self.failures) + (
            f" -> {self.tier}"
        )


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


def _data_events(buf: bytes) -> tuple[list[bytes], int]:
    """Complete SSE events' data payloads in ``buf`` and the offset after the last event."""
    out: list[bytes] = []
    pos = 0
    buf_n = buf.replace(b"\r\n", b"\n") if b"\r" in buf else buf
    while True:
        end = buf_n.find(b"\n\n", pos)
        if end < 0:
            return out, pos
        for line in buf_n[pos:end].split(b"\n"):
            if line.startswith(b"data:"):
                out.append(line[5:].strip())
        pos = end + 2


def _is_token(event: bytes) -> bool:
    """True when an SSE data payload carries output (or ends it); raise on an error event."""
    try:
        obj = orjson.loads(event)
    except orjson.JSONDecodeError:
        raise AttemptError("bad_stream", "an event is not JSON") from None
    if not isinstance(obj, dict):
        raise AttemptError("bad_stream", "an event is not a JSON object")
    err = obj.get("error")
    if err:
        msg = err.get("message", "") if isinstance(err, dict) else str(err)
        raise AttemptError("stream_error", str(msg)[:160] or "error event")
    for ch in obj.get("choices") or ():
        if not isinstance(ch, dict):
            continue
        if ch.get("finish_reason") or ch.get("text"):
            return True
        delta = ch.get("delta")
        if isinstance(delta, dict) and any(
            delta.get(k)
            for k in ("content", "tool_calls", "reasoning_content", "function_call", "refusal")
        ):
            return True
    return "usage" in obj and not obj.get("choices")


class _StopAt(stop_base):
    """Stop retrying when too little of the request's deadline is left for an attempt."""

    def __init__(self, deadline_at: float):
        self.deadline_at = deadline_at

    def __call__(self, retry_state: RetryCallState) -> bool:
        return self.deadline_at - time.monotonic() < _MIN_ATTEMPT_S


class Dispatcher:
    def __init__(self, pools: Pools, checks: dict[str, Check], cfg: Dispatch):
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

        async def attempt(tier: str) -> bytes:
            pool = self._pools[tier]
            remaining = deadline_at - time.monotonic()
            body = self._body(req, pool.model)
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
            pool.record(True)
            for out in outs:
                bad = run_checks(checks, out, req.facts)
                if bad is not None:
                    raise AttemptError(f"check_{bad.check}", bad.reason)
            return data

        tier, data, failures = await self._run(d.tiers, attempt, deadline_at)
        return Outcome(tier, data, None, failures, upstream[0])

    async def stream(
        self, req: ClientRequest, d: RouteDecision, deadline_at: float, affinity: int
    ) -> Outcome:
        upstream = [0.0]

        async def attempt(tier: str) -> StreamStart:
            pool = self._pools[tier]
            remaining = deadline_at - time.monotonic()
            ttft = min(pool.tier.timeouts.ttft, d.ttft_budget, remaining)
            body = self._body(req, pool.model)
            rep = pool.choose(affinity)
            t0 = time.perf_counter()
            rep.in_flight += 1
            try:
                async with asyncio.timeout(ttft):
                    resp = await pool.open_stream(
                        rep, _PATHS[req.kind], body, pool.timeout(remaining, stream=True)
                    )
                    try:
                        head = await self._first_event(resp)
                    except BaseException:
                        resp.close()
                        raise
            except TimeoutError:
                pool.record(False)
                raise AttemptError(
                    "timeout_ttft", f"no first token within {ttft:.2f}s", timeout=True
                ) from None
            except AttemptError as e:
                pool.record(not e.retryable)
                raise
            finally:
                rep.in_flight -= 1
                upstream[0] += time.perf_counter() - t0
            pool.record(True)
            return StreamStart(resp, head)

        tier, start, failures = await self._run(d.tiers, attempt, deadline_at)
        return Outcome(tier, b"", start, failures, upstream[0])

    # -- internals -----------------------------------------------------------------------
    @staticmethod
    def _body(req: ClientRequest, model: str) -> bytes:
        req.body["model"] = model
        return orjson.dumps(req.body)

    @staticmethod
    async def _first_event(resp: aiohttp.ClientResponse) -> bytes:
        """Read until the first token arrives; fail on an error event or an empty stream.

        Engines open a chat stream with a role-only chunk; that is not a token yet, so
        it is held back too: a stream that dies right after it can still fall back.
        """
        buf = b""
        try:
            while True:
                chunk = await resp.content.readany()
                if not chunk:
                    raise AttemptError("stream_cut", "stream ended before the first token")
                buf += chunk
                events, _ = _data_events(buf)
                for ev in events:
                    if ev == b"[DONE]":
                        raise AttemptError("stream_empty", "stream ended before the first token")
                    if _is_token(ev):
                        return buf
        except aiohttp.ClientError as e:
            raise AttemptError("stream_cut", str(e)[:160] or type(e).__name__) from None

    async def _run(
        self, tiers: tuple[str, ...], attempt: Callable[[str], Awaitable[T]], deadline_at: float
    ) -> tuple[str, T, list[Failure]]:
        failures: list[Failure] = []
        try:
            return tiers[0], await attempt(tiers[0]), failures
        except AttemptError as e:
            failures.append(Failure(tiers[0], e.kind, e.detail, e.timeout))
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
        tier = tiers[0]
        try:
            async for a in retrying:
                with a:
                    tier = next(rest)
                    try:
                        return tier, await attempt(tier), failures
                    except AttemptError as e:
                        failures.append(Failure(tier, e.kind, e.detail, e.timeout))
                        raise
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
