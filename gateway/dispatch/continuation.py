"""Continuing a broken stream on the next tier: the request, and where to send it.

Chat: the text already sent becomes a trailing assistant message, rendered unclosed by
the engine's chat template so that the model continues it: ``continue_final_message``
sends SGLang's flag; ``continue_final_message_no_gen`` adds ``add_generation_prompt:
false``, which vLLM and llama.cpp's server require with it; ``prefill`` sends the message
alone (llama.cpp's server continues a trailing assistant message by itself). Some engines
answer with the prefix repeated in front (llama.cpp does); the relay strips it. Text
completions: the prefix is appended to the prompt. Usage is always requested, to add
both tiers up.

A tier configured with ``continuation: off``, or one that refused a continuation with a
4xx (learned, until its pool is rebuilt), is never sent one. A stream the client has bytes
of is finished there another way (:mod:`gateway.dispatch.finish`: a continuation prompt,
or the request restarted and what the client has skipped); a non-streamed answer starts
over there.

A continuation may be opened ahead (:class:`Ahead`): when the loop guard starts holding a
candidate loop, the next tier is asked at once to continue the text before it, so that a
confirmed loop switches to a stream already under way instead of waiting for its first
token then. At most ``AHEAD_MAX`` per request.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import orjson

from gateway.dispatch.call import Call
from gateway.dispatch.fallback import reason, verdict
from gateway.dispatch.finish import Way, finishable, prompt_body, restart_body, streamed, way
from gateway.dispatch.opening import Opening, StreamOpener, StreamStart
from gateway.dispatch.outcome import Trail
from gateway.upstream.failures import AttemptFailed, NoContinuation
from gateway.upstream.pools import Pool, Pools

log = logging.getLogger("gateway.dispatch")
Run = Callable[..., Awaitable[tuple[str, Any]]]
AHEAD_MAX = 2  # continuations opened ahead of a candidate loop, per request


def continuation_body(call: Call, pool: Pool, prefix: str, sent_tokens: int) -> bytes | None:
    """The request that asks ``pool`` to continue the assistant text ``prefix``."""
    style = pool.tier.continuation
    if style == "off" or not pool.continues or call.native(pool):
        return None  # (the Responses API has no assistant-prefix continuation)
    req = call.req
    body = call.body_for(pool)
    if req.kind == "chat":
        messages = req.body["messages"]
        own = messages[-1] if req.body.get("continue_final_message") and messages else None
        if (
            style.startswith("continue_final_message")
            and isinstance(own, dict)
            and own.get("role") == "assistant"
            and isinstance(own.get("content"), str)
        ):  # the client's own assistant prefix goes on: the text sent continues it
            body["messages"] = [*messages[:-1], {**own, "content": own["content"] + prefix}]
        else:
            body["messages"] = [*messages, {"role": "assistant", "content": prefix}]
        if style.startswith("continue_final_message"):
            body["continue_final_message"] = True
        if style == "continue_final_message_no_gen":
            body["add_generation_prompt"] = False
    else:
        prompt = body.get("prompt")
        if not isinstance(prompt, str):
            return None
        body["prompt"] = prompt + prefix
    if req.facts.json_mode:  # a grammar starts a new value: the text sent goes on unbound
        body.pop("response_format", None)  # (the whole answer is judged as JSON all the same)
    # a continuation is read as a stream, also for a non-streamed call
    return orjson.dumps(streamed(body, sent_tokens))


class Continuer:
    """Opens the continuation of one call's stream on the tiers after a broken one."""

    def __init__(
        self,
        call: Call,
        pools: Pools,
        opener: StreamOpener,
        run: Run,
    ):
        self._call = call
        self._pools = pools
        self._opener = opener
        self._run = run
        self.ahead: Ahead | None = None  # a continuation opened for a candidate loop
        self._aheads = 0

    @property
    def pools(self) -> Pools:
        return self._pools

    @property
    def call(self) -> Call:
        return self._call

    def possible(self, after: str) -> bool:
        if not self._call.can_be_continued():
            return False
        tiers = self._call.d.tiers
        later = tiers[tiers.index(after) + 1 :]
        return any(
            self._pools[t].tier.continuation != "off" and self._pools[t].continues for t in later
        )

    def finishable(self, after: str) -> bool:
        """Whether a stream broken on ``after`` could be finished on a later tier at all
        (continued, prompted or restarted: :mod:`gateway.dispatch.finish`)."""
        return finishable(self._call, self._call.d.tiers, after)

    # -- ahead of a candidate loop (see Ahead) ------------------------------------------------
    @property
    def wants_ahead(self) -> bool:
        """No continuation is open ahead, and this request has not had its share."""
        return self.ahead is None and self._aheads < AHEAD_MAX

    def open_ahead(self, after: str, prefix: str, sent_tokens: int, keep_events: bool) -> None:
        """A candidate loop is held: open its continuation now (if :attr:`wants_ahead`)."""
        if not self.wants_ahead:
            return
        self._aheads += 1
        can = self.possible(after) if keep_events else self.finishable(after)
        if prefix.strip() and time.monotonic() < self._call.deadline_at and can:
            self.ahead = Ahead(self, after, prefix, sent_tokens, keep_events)

    def drop_ahead(self) -> None:
        if self.ahead is not None:
            log.debug("continuation opened ahead: dropped (no loop)")
            self.ahead.drop()
            self.ahead = None

    async def take_ahead(self, prefix: str, trail: Trail) -> tuple[str, StreamStart] | None:
        """The continuation opened ahead, if it continues ``prefix`` (else it is dropped);
        None also when it failed (the caller then opens one as usual)."""
        ahead, self.ahead = self.ahead, None
        if ahead is None:
            return None
        if ahead.prefix != prefix:
            log.debug("continuation opened ahead: dropped (it continues another text)")
            ahead.drop()
            return None
        try:
            taken = await ahead.take(trail)
        except AttemptFailed as e:
            log.debug("continuation opened ahead: failed (%s)", reason(e))
            return None
        log.debug("continuation opened ahead: taken")
        return taken

    async def open(
        self,
        after: str,
        prefix: str,
        sent_tokens: int,
        trail: Trail,
        keep_events: bool = False,
    ) -> tuple[str, StreamStart]:
        """A stream from the tiers after ``after`` that continues the assistant ``prefix``
        (``keep_events``: for a non-streamed answer, to be assembled, by continuation only;
        else the client's stream, finished any way a tier can: :mod:`finish`). Raises
        :class:`AttemptFailed` (never a client-error relay) when none can."""
        tiers = self._call.d.tiers
        later = tiers[tiers.index(after) + 1 :]
        return await self.open_on(later, prefix, sent_tokens, trail, keep_events, not keep_events)

    async def open_on(
        self,
        tiers: tuple[str, ...],
        prefix: str,
        sent_tokens: int,
        trail: Trail,
        keep_events: bool = False,
        finish: bool = False,
    ) -> tuple[str, StreamStart]:
        """:meth:`open` on ``tiers``, in order; by continuation only, unless ``finish``."""
        call = self._call

        async def attempt(tier: str, how: Opening) -> StreamStart:
            pool = self._pools[tier]
            # a trickle fails it where a tier after it can take over (a hand-back's)
            guard = self.finishable(tier) if finish else self.possible(tier)
            how = Opening(
                hold_tokens=0,
                until=how.until,
                deliver=False,
                stream=not keep_events,
                guard_rate=guard,
                continuing=True,
            )
            w = way(call, pool)
            if w == "continue":
                try:
                    return await self._continued(pool, prefix, sent_tokens, how, trail)
                except NoContinuation:
                    if not (finish and not pool.continues):
                        raise
                    w = way(call, pool)  # it refused: finish it another way there
            if not finish:
                raise NoContinuation(f"tier {tier} cannot continue a stream")
            return await self._finished(pool, w, prefix, sent_tokens, how, trail)

        if not tiers:
            raise NoContinuation("no tier left")
        result: tuple[str, StreamStart] = await self._run(call, tiers, attempt, trail)
        return result

    async def _continued(
        self, pool: Pool, prefix: str, sent_tokens: int, how: Opening, trail: Trail
    ) -> StreamStart:
        """The continuation of ``prefix`` on ``pool``; a 4xx to it is learned (never again)."""
        body = continuation_body(self._call, pool, prefix, sent_tokens)
        if body is None:
            raise NoContinuation(f"tier {pool.name} cannot continue a stream")
        try:
            s = await self._opener.open(self._call, pool, body, how, trail)
        except AttemptFailed as e:
            if verdict(e).next_tier:
                raise
            pool.continues = False  # it refuses assistant prefixes: never ask again
            log.info("tier %s refused a continuation (%s): not asked again", pool.name, reason(e))
            raise NoContinuation(f"tier {pool.name} refused ({reason(e)})") from None
        s.way = "continue"
        return s

    async def _finished(
        self, pool: Pool, w: Way, prefix: str, sent_tokens: int, how: Opening, trail: Trail
    ) -> StreamStart:
        """A tier that cannot continue ``prefix``: asked to by its prompt, or restarted."""
        body = prompt_body(self._call, pool, prefix, sent_tokens) if w == "prompt" else None
        if body is None:  # a restart is an answer's beginning: judged as one
            w, body = "restart", restart_body(self._call, pool)
            how = replace(how, continuing=False)
        s = await self._opener.open(self._call, pool, body, how, trail)
        s.way = w
        return s


class Ahead:
    """A continuation opened before it is known to be needed.

    The loop guard holds a candidate from its second copy and confirms it at its fourth
    (and 200 characters): on a fast tier, tens of tokens later. Opened at the second copy,
    the continuation has its first token by the time the loop is confirmed, and the answer's
    tail is the standard tier's time for the rest, not that plus the fast tier's time for two
    more copies and the standard tier's first token. A candidate that breaks off (a list, a
    refrain) drops it: its connection is closed and its engine stops, at the cost of a
    prefill and a few tokens on the next tier.
    """

    __slots__ = ("_task", "prefix", "trail")

    def __init__(
        self, cont: Continuer, after: str, prefix: str, sent_tokens: int, keep_events: bool
    ):
        self.prefix = prefix
        self.trail = Trail()  # its own: a dropped one leaves nothing in the request's
        opening = cont.open(after, prefix, sent_tokens, self.trail, keep_events)
        self._task = asyncio.ensure_future(opening)

    async def take(self, trail: Trail) -> tuple[str, StreamStart]:
        """The continuation (waiting for its first token if it has none yet)."""
        try:
            return await self._task
        finally:
            trail.failures += self.trail.failures
            trail.queue_s += self.trail.queue_s
            trail.backoff_s += self.trail.backoff_s

    def drop(self) -> None:
        if not self._task.done():
            self._task.cancel()  # the opener closes what it opened
        self._task.add_done_callback(_discard)


def _discard(task: asyncio.Future[tuple[str, StreamStart]]) -> None:
    if task.cancelled() or task.exception() is not None:
        return  # (the exception is retrieved: nothing is logged for it)
    task.result()[1].discard()
