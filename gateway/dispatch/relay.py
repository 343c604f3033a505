"""The live phase of a stream: forward, keep checking, and never fail silently.

After the dispatcher hands over a stream (its first tokens held back and checked),
:class:`StreamRelay` forwards the engine's events as they come — the bytes untouched,
each batch only after its events were checked. When the stream goes bad after the
client got bytes (a live check fails, an error event, a stall, a cut before
``[DONE]``), the relay asks the next tier to *continue* the assistant text already
sent and splices that stream in: same ``id``/``model``/``created`` on every chunk,
no text lost or repeated, the finish reason of the tier that finished, and one usage
chunk that adds both tiers up. For a loop, the continuation starts from the text
before the loop; the looping text already sent is the one thing the client cannot get
back (the hold-back window keeps it short). When no continuation is possible the
stream ends with an OpenAI-style error event and ``data: [DONE]``.

When nothing needs parsing (no live checks and no tier left to continue on), bytes are
relayed without looking inside them.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from gateway.core.request import ClientRequest
from gateway.core.router import RouteDecision
from gateway.dispatch.attempts import Dispatcher, Failure, Outcome, StreamStart, describe_fallback
from gateway.errors import GatewayError, StreamBroken, error_body
from gateway.headers import H_FALLBACK
from gateway.upstream.pools import AttemptError
from gateway.upstream.sse import StreamState, data_payloads

_DONE = b"data: [DONE]\n\n"


class _Broken(Exception):
    """The current upstream stream failed after the client got bytes."""

    def __init__(self, kind: str, detail: str, upstream_fault: bool):
        super().__init__(detail)
        self.kind = kind
        self.detail = detail
        self.upstream_fault = upstream_fault


@contextlib.contextmanager
def _as_broken() -> Iterator[None]:
    """Upstream trouble while a stream is relayed, as :class:`_Broken`."""
    try:
        yield
    except AttemptError as e:
        raise _Broken(e.kind, e.detail, upstream_fault=True) from None
    except TimeoutError:
        raise _Broken(
            "stall", "no token within the stall or total timeout", upstream_fault=True
        ) from None
    except aiohttp.ClientError as e:
        raise _Broken("stream_cut", str(e)[:160] or type(e).__name__, upstream_fault=True) from None


class StreamRelay:
    def __init__(
        self,
        dispatcher: Dispatcher,
        req: ClientRequest,
        d: RouteDecision,
        out: Outcome,
        deadline_at: float,
    ):
        self.dispatcher = dispatcher
        self.req = req
        self.d = d
        self.out = out
        self.deadline_at = deadline_at
        self.failures: list[Failure] = list(out.failures)
        self.tier = out.tier
        self.sent_chars = 0
        self.sent_tokens = 0
        self.broken = False  # it ended with an error event
        self._first_tokens = 0  # what the first tier sent, for the merged usage
        self._first_usage: dict[str, Any] | None = None
        self._active: StreamStart | None = None  # the upstream stream being relayed
        self._merged: dict[str, Any] | None = None
        self._cont: StreamState | None = None  # the continuation's state, if there was one
        self._echo: str | None = None  # the prefix, while a continuation may still repeat it
        self._held = ""  # continuation text that matched the prefix so far

    async def run(self, resp: web.StreamResponse) -> None:
        assert self.out.stream is not None
        start = self.out.stream
        first = start.state  # the stream whose id/model/created the client sees
        self._active = start
        try:
            await resp.write(start.head)
            self._mark_sent(first)
            try:
                await self._pump(start, resp, first, splice=None)
                self._release(ok=True)
            except _Broken as b:
                self._release(ok=not b.upstream_fault)
                self.failures.append(Failure(self.tier, b.kind, b.detail, False))
                await self._recover(resp, start, first, b)
            await self._epilogue(resp)
        finally:
            # the client went away (or we were cancelled): stop the generation upstream now
            if self._active is not None:
                self._active.resp.close()
                self._release(ok=True)

    def _release(self, ok: bool) -> None:
        """The active upstream stream is over: drop its connection unless it ended cleanly."""
        s = self._active
        if s is None:
            return
        self._active = None
        if not s.state.done:
            s.resp.close()
        else:
            s.resp.release()
        s.finish(ok)

    # -- forwarding --------------------------------------------------------------------------
    async def _pump(
        self,
        start: StreamStart,
        resp: web.StreamResponse,
        first: StreamState,
        splice: StreamState | None,
    ) -> None:
        """Forward one upstream stream to the end; raise :class:`_Broken` if it goes bad.

        ``splice`` is the state of a continuation stream whose events are rewritten to
        look like ``first``'s; None for the original stream.
        """
        up, framer, live = start.resp, start.framer, start.live
        state = splice or first
        parse = bool(live) or splice is not None or self._can_continue()
        if not parse:
            await self._passthrough(start, resp)
            return
        with _as_broken():
            while True:
                chunk = await up.content.readany()
                if not chunk:
                    break
                complete, payloads = framer.feed(chunk)
                for p in payloads:
                    state.feed(p)
                bad = live.maybe_run(state)
                if bad is not None:
                    raise _Broken(f"check_{bad.check}", bad.reason, upstream_fault=False)
                if complete:
                    if splice is not None:
                        complete = self._rewrite(payloads, first, splice)
                    if complete:
                        await resp.write(complete)
                    self._mark_sent(state)
        if not state.done:
            raise _Broken("stream_cut", "the stream ended without [DONE]", upstream_fault=True)

    async def _passthrough(self, start: StreamStart, resp: web.StreamResponse) -> None:
        up = start.resp
        if start.framer.pending:
            await resp.write(start.framer.pending)
        last = prev = b""
        with _as_broken():
            async for chunk in up.content.iter_any():
                await resp.write(chunk)
                prev, last = last, chunk
        if b"[DONE]" not in (prev + last)[-64:] and not start.state.done:
            raise _Broken("stream_cut", "the stream ended without [DONE]", upstream_fault=True)

    def _mark_sent(self, state: StreamState) -> None:
        self.sent_chars = state.chars
        self.sent_tokens = state.tokens

    def _can_continue(self) -> bool:
        return time.monotonic() < self.deadline_at and self.dispatcher.can_continue(
            self.req, self.d, self.tier
        )

    # -- recovery ----------------------------------------------------------------------------
    async def _recover(
        self, resp: web.StreamResponse, broken: StreamStart, first: StreamState, b: _Broken
    ) -> None:
        state = broken.state
        why = f"tier {self.tier} failed mid-stream ({b.kind}: {b.detail})"
        if state.tool_calls or state.multi or not self._can_continue():
            await self._error(resp, f"The stream broke off: {why}; it cannot be continued.")
            return
        text = state.text()
        prefix = text[: self.sent_chars]
        if b.kind == "check_repetition":
            start = self.dispatcher.loop_start(state)
            if start is not None:
                prefix = text[: min(start, self.sent_chars)]
        # The continuation's text follows what the client already has.
        try:
            cont = await self.dispatcher.continuation(
                self.req,
                self.d,
                self.tier,
                prefix,
                self.sent_tokens,
                self.deadline_at,
                self.req.affinity,
            )
        except GatewayError as e:
            await self._error(
                resp,
                f"The stream broke off: {why}; continuing it on another "
                f"tier failed too: {e.message}",
            )
            return
        self.failures.extend(cont.failures)
        assert cont.stream is not None
        self.tier = cont.tier
        nxt = cont.stream
        self._active = nxt
        self._cont = nxt.state
        self._echo = prefix or None
        self._first_tokens = self.sent_tokens
        self._first_usage = state.usage
        head = self._rewrite(data_payloads(nxt.head), first, nxt.state)
        if head:
            await resp.write(head)
        try:
            await self._pump(nxt, resp, first, splice=nxt.state)
            self._release(ok=True)
        except _Broken as b2:
            self._release(ok=not b2.upstream_fault)
            self.failures.append(Failure(self.tier, b2.kind, b2.detail, False))
            await self._error(
                resp,
                f"The stream broke off: {why}; its continuation on "
                f"{self.tier} failed too ({b2.kind}: {b2.detail}).",
            )

    def _rewrite(self, payloads: list[bytes], first: StreamState, cont: StreamState) -> bytes:
        """Continuation events dressed as the first stream's; role-only chunks dropped."""
        out: list[bytes] = []
        for p in payloads:
            if p == b"[DONE]":
                out.append(_DONE)
                continue
            obj: dict[str, Any] = orjson.loads(p)
            obj["id"], obj["model"], obj["created"] = first.id, first.model, first.created
            choices = obj.get("choices") or []
            if self._echo is not None and choices:
                self._strip_echo(choices[0])
            if choices and all(_role_only(c) for c in choices):
                continue
            if obj.get("usage") and not choices:
                if not self._client_wants_usage():
                    continue
                obj["usage"] = self._merged_usage(obj["usage"])
            out.append(b"data: " + orjson.dumps(obj) + b"\n\n")
        return b"".join(out)

    def _strip_echo(self, choice: Any) -> None:
        """Drop the prefix when the engine repeats it in front of its continuation.

        llama.cpp's server does; SGLang and vLLM don't. Text that merely *starts* like the
        prefix is held back, not lost: at the first mismatch it is given back.
        """
        if not isinstance(choice, dict):
            return
        holder = choice.get("delta") if self.req.kind == "chat" else choice
        key = "content" if self.req.kind == "chat" else "text"
        if not isinstance(holder, dict) or not isinstance(holder.get(key), str):
            return
        echo, text = self._echo or "", self._held + holder[key]
        if echo.startswith(text):  # all of it may still be the echo: hold it
            self._held, holder[key] = text, ""
            if len(text) == len(echo):
                self._echo, self._held = None, ""
        elif text.startswith(echo):  # the echo ends in this chunk
            holder[key] = text[len(echo) :]
            self._echo, self._held = None, ""
        else:  # no echo after all: give back what was held
            holder[key] = text
            self._echo, self._held = None, ""

    def _client_wants_usage(self) -> bool:
        so = self.req.body.get("stream_options")
        return isinstance(so, dict) and bool(so.get("include_usage"))

    def _merged_usage(self, u2: dict[str, Any]) -> dict[str, Any]:
        """Both tiers' usage. The first tier's own usage chunk never came (it broke off):
        its completion tokens are the events it sent (one token each), its prompt tokens
        the continuation's prompt minus the prefix it was given."""
        c1 = self._first_tokens
        u1 = self._first_usage or {}
        p2 = int(u2.get("prompt_tokens") or 0)
        p1 = int(u1.get("prompt_tokens") or max(0, p2 - c1))
        c2 = int(u2.get("completion_tokens") or 0)
        self._merged = {
            **u2,
            "prompt_tokens": p1 + p2,
            "completion_tokens": c1 + c2,
            "total_tokens": p1 + p2 + c1 + c2,
        }
        return self._merged

    def usage(self) -> dict[str, Any]:
        """What this stream cost, for accounting: the engine's report when it sent one,
        else the content events sent (about one token each)."""
        if self._merged is not None:
            return self._merged
        if self._cont is not None and self._cont.usage:
            return self._merged_usage(self._cont.usage)
        first = self.out.stream.state if self.out.stream else None
        if first is not None and first.usage:
            return first.usage
        return {"prompt_tokens": 0, "completion_tokens": self.sent_tokens}

    # -- endings -----------------------------------------------------------------------------
    async def _error(self, resp: web.StreamResponse, message: str) -> None:
        self.broken = True
        await resp.write(b"data: " + error_body(StreamBroken(message)) + b"\n\n" + _DONE)

    async def _epilogue(self, resp: web.StreamResponse) -> None:
        fb = describe_fallback(self.failures, self.tier)
        if fb:
            await resp.write(f": {H_FALLBACK} {fb}\n\n".encode("ascii", "replace"))
        await resp.write_eof()


def _role_only(choice: Any) -> bool:
    if not isinstance(choice, dict) or choice.get("finish_reason"):
        return False
    delta = choice.get("delta")
    if not isinstance(delta, dict):
        return False
    return not any(v for k, v in delta.items() if k != "role")
