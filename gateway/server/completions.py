"""``POST /v1/chat/completions`` and ``/v1/completions``: the OpenAI wire format in and out.

Thin on purpose: take the runtime snapshot once, authenticate, parse, route (classify and
decide), admit, hand the request to the dispatcher (:meth:`Dispatcher.serve`, its one
entry point), then write its answer (JSON, or the relayed stream) with the headers that
explain it. Every error leaves as an OpenAI envelope.
"""

from __future__ import annotations

import asyncio
import logging
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass

import orjson
from aiohttp import web
from opentelemetry import trace

from gateway.access.guard import rate_headers
from gateway.cache import Ask
from gateway.dispatch.fallback import reason
from gateway.dispatch.outcome import Outcome
from gateway.dispatch.relay import Sink, StreamRelay
from gateway.dispatch.review import Delivered
from gateway.dispatch.shadow import Served, answer_text
from gateway.errors import (
    BodyTimeout,
    GatewayError,
    InvalidBody,
    PayloadTooLarge,
    RateLimited,
    StreamBroken,
    UnsupportedEncoding,
    UnsupportedMediaType,
    UpstreamFailed,
    error_body,
)
from gateway.headers import H_REQUEST_ID, H_SHOULD_RETRY
from gateway.request.model import ClientRequest, parse_chat, parse_completion
from gateway.server import drain
from gateway.server.cached import serve_hit
from gateway.server.exchange import Exchange
from gateway.server.replies import (
    JSON,
    Wire,
    authorization,
    engine_error,
    error_response,
    new_id,
    request_id,
)
from gateway.server.slots import FreeAtEnd, free_slot
from gateway.server.state import GATEWAY, Gateway, Runtime
from gateway.settings import Settings
from gateway.telemetry.context import REQUEST_ID
from gateway.tenancy.limits import NO_RESERVE
from gateway.upstream.failures import ClientRejected

log = logging.getLogger("gateway.server")
Parse = Callable[[bytes], ClientRequest]


@dataclass(frozen=True, slots=True)
class Endpoint:
    """What one completion route speaks: how its body is parsed, the operation's name (in
    the span, the metrics and the access log), and how its answers leave (``wire``; None:
    as the engine wrote them)."""

    parse: Parse
    kind: str
    wire: Wire | None = None


@dataclass(frozen=True, slots=True)
class _Turn:
    """One request on its way through this handler: what each of its steps needs."""

    request: web.Request
    gw: Gateway
    rt: Runtime  # the one snapshot this request uses, whatever is published meanwhile
    ep: Endpoint
    ex: Exchange


_ENCODINGS = frozenset(("", "identity", "gzip", "deflate", "x-gzip"))
CHAT = Endpoint(parse_chat, "chat")
TEXT = Endpoint(parse_completion, "text_completion")


async def chat_completions(request: web.Request) -> web.StreamResponse:
    return await handle(request, CHAT)


async def completions(request: web.Request) -> web.StreamResponse:
    return await handle(request, TEXT)


async def handle(request: web.Request, ep: Endpoint) -> web.StreamResponse:
    """Serve one completion request as ``ep`` speaks it."""
    gw = request.app[GATEWAY]
    t = _Turn(request, gw, gw.runtime, ep, Exchange(request_id(request), ep.kind))
    REQUEST_ID.set(t.ex.rid)  # for the log lines written below (the handler's own context)
    with t.rt.in_use():
        attrs = {"gateway.request_id": t.ex.rid}
        with gw.telemetry.span(ep.kind, attrs, trace.SpanKind.SERVER) as span:
            try:
                return await _serve(t)
            finally:
                if t.ex.cache is not None:
                    t.ex.cache.done()
                rec = t.ex.record()
                gw.telemetry.record(rec)
                gw.quality.observe(rec)  # the quality circuit counts its tiers' answers
                gw.rollouts.observe(rec)  # an analysed rule's arms are counted
                if gw.telemetry.tracing:
                    t.ex.annotate(span)


async def _serve(t: _Turn) -> web.StreamResponse:
    gw, rt, ex = t.gw, t.rt, t.ex
    try:
        eff = ex.eff = await gw.access.authenticate(authorization(t.request.headers))
        req = t.ep.parse(await read_body(t.request, gw.settings))
        d = ex.d = rt.route(req, t.request.headers, eff, gw.quality.for_request())
        ex.models = rt.pools.served()  # who answered, by the tier that did (headers, log)
        if gw.cache is not None and d.cache is not None:
            ask = Ask(req, d, eff, t.request.headers, rt.rules, rt.pools, ex.kind)
            ex.cache = await gw.cache.lookup(ask)
            if ex.cache is not None and ex.cache.entry is not None:
                return await serve_hit(t.request, gw, ex, t.ep.wire)
        slot = new_id("adm_")  # the in-flight member: ours, never the client's
        want = NO_RESERVE
        if eff.policy.has_budget:
            want = rt.dispatcher.worst_case(req, d, gw.settings.reserve_max_tokens)
        ex.admission = await gw.access.admit(eff, slot, want)
        ex.slot = slot
        ex.stream = req.stream
        out = await rt.dispatcher.serve(req, d, eff)
        if isinstance(out, StreamRelay):
            return await _relay(t, out)
        if ex.cache is not None:
            ex.cache.keep_answer(out, rt.dispatcher.call(req, d, 0.0).checks)
    except GatewayError as e:
        await free_slot(gw, ex)
        return _failed(gw, ex, e)
    except ClientRejected as e:  # the engine refused the request: its status and message
        ex.status, ex.error = e.status, reason(e)
        await free_slot(gw, ex)
        _account(gw, ex)
        headers = {H_REQUEST_ID: ex.rid, **ex.headers()}
        body = error_body(engine_error(e))
        return web.Response(status=ex.status, body=body, content_type=JSON, headers=headers)
    except BaseException as e:  # a bug, or the client left: the slot is released all the same
        ex.status, ex.error = (499, "client_closed") if _cancelled(e) else (500, "internal_error")
        _account(gw, ex)
        raise
    resp = await _answer(t, req, out)
    if t.ep.wire is not None:
        resp.body = t.ep.wire.answer(out.body)
    return resp


def _cancelled(e: BaseException) -> bool:
    return isinstance(e, asyncio.CancelledError | ConnectionResetError)


def _failed(gw: Gateway, ex: Exchange, e: GatewayError) -> web.Response:
    ex.status, ex.error = e.status, e.code
    extra = ex.headers()
    if isinstance(e, RateLimited):
        extra.update(e.headers)
    if isinstance(e, UpstreamFailed):
        extra[H_SHOULD_RETRY] = "false"  # every tier was tried: a client retry adds load only
    _account(gw, ex)
    return error_response(e, ex.rid, extra)


async def _answer(t: _Turn, req: ClientRequest, out: Outcome) -> web.Response:
    gw, ex = t.gw, t.ex
    ex.trail, ex.tier, ex.usage, ex.cost = out.trail, out.tier, out.usage, out.cost
    if ex.eff is not None:
        _maybe_shadow(t, req, lambda: answer_text(req.kind, orjson.loads(out.body)))
        _maybe_review(t, req, lambda: answer_text(req.kind, orjson.loads(out.body)))
    headers = ex.headers()
    headers[H_REQUEST_ID] = ex.rid
    if ex.admission is not None and ex.eff is not None and ex.eff.tenant_id is not None:
        headers.update(rate_headers(ex.admission))
    await free_slot(gw, ex)  # before the answer: the client's next request finds it free
    settling = _account(gw, ex)
    if settling is not None and ex.admission is not None and ex.admission.hold is not None:
        # settled before the answer leaves: the client's next request sees its real usage,
        # not this one's reservation (bounded: the store's calls time out)
        await asyncio.wait({settling}, timeout=4 * gw.settings.redis_timeout)
    return web.Response(body=out.body, content_type=JSON, headers=headers)


async def _relay(t: _Turn, relay: StreamRelay) -> web.StreamResponse:
    gw, ex, wire = t.gw, t.ex, t.ep.wire
    ex.trail, ex.tier = relay.trail, relay.tier
    headers = ex.headers()
    headers[H_REQUEST_ID] = ex.rid
    headers["Cache-Control"] = "no-cache"
    if ex.admission is not None and ex.eff is not None and ex.eff.tenant_id is not None:
        headers.update(rate_headers(ex.admission))
    resp = web.StreamResponse(headers=headers)
    resp.content_type = "text/event-stream"
    try:
        await resp.prepare(t.request)
    except BaseException:
        relay.abandon()
        _account(gw, ex)
        raise
    ex.mark_first_byte()
    try:
        sink = resp if wire is None else wire.sink(resp)
        sink = sink if ex.cache is None else ex.cache.tee(sink)
        await _drive(relay, FreeAtEnd(sink, gw, ex), ex, drain.of(t.request.app))
    finally:
        ex.tier = relay.tier
        ex.usage, ex.cost = relay.charged()
        if relay.broken:
            ex.error = "stream_broken"
        else:
            _maybe_shadow(t, relay.call.req, relay.start.state.text)
            _maybe_review(t, relay.call.req, relay.start.state.text)
            if ex.cache is not None:
                ex.cache.keep_stream(relay)
        _account(gw, ex)
    return resp


async def _drive(relay: StreamRelay, resp: Sink, ex: Exchange, d: drain.Drain | None) -> None:
    """Relay to the end. The head is sent: a bug from here on ends the stream with an error
    event and ``[DONE]`` (logged once), never a second response head; so does the end of a
    shutdown's drain (it cancels this task: the relay closes the upstream stream)."""
    task = asyncio.current_task()
    try:
        if d is not None and task is not None:
            if d.cut:
                raise asyncio.CancelledError
            d.streams.add(task)
        await relay.run(resp)
        return
    except ConnectionResetError:
        return  # the client left; the relay has closed the upstream
    except asyncio.CancelledError:
        if d is None or not d.cut or task is None:
            return  # the client left; the relay has closed the upstream
        task.uncancel()
        relay.broken = True
        msg = f"The gateway is shutting down; retry the request. Request id {ex.rid}."
    except Exception:
        log.exception("unexpected error relaying a stream (request %s)", ex.rid)
        relay.broken = True
        msg = f"The stream failed inside the gateway; request id {ex.rid}."
    finally:
        if d is not None and task is not None:
            d.streams.discard(task)
    await _end_with_error(resp, msg)


async def _end_with_error(resp: Sink, msg: str) -> None:
    event = b"data: " + error_body(StreamBroken(msg)) + b"\n\ndata: [DONE]\n\n"
    try:
        await resp.write(event)
        await resp.write_eof()
    except (ConnectionResetError, RuntimeError):
        pass


def _maybe_shadow(t: _Turn, req: ClientRequest, text: Callable[[], str]) -> None:
    ex, rt = t.ex, t.rt
    eff, d = ex.eff, ex.d
    if eff is None or d is None:
        return
    against = rt.shadow.wanted(eff.policy.shadow_rate, d, ex.tier)
    if against is not None:
        t.gw.spawn(
            rt.shadow.compare(
                req, dict(req.body), d, Served(ex.tier, text()), against, eff.tenant_id
            )
        )


def _maybe_review(t: _Turn, req: ClientRequest, text: Callable[[], str]) -> None:
    """A sample of the answered requests whose way had a failed check, to the review
    queue (after the answer, in the background)."""
    ex, rt = t.ex, t.rt
    eff, d = ex.eff, ex.d
    if eff is None or d is None or not rt.review.wanted(ex.trail, eff.policy.review is False):
        return
    assert ex.trail is not None
    got = Delivered(ex.tier, text(), time.perf_counter() - ex.t0, eff.tenant_id)
    item = rt.review.caught(req, d, ex.trail, got)
    t.gw.spawn(rt.review.keep(item))


def _account(gw: Gateway, ex: Exchange) -> asyncio.Task[None] | None:
    """Free the concurrency slot, count the usage and settle the budget hold (tenants
    only), in a task of its own."""
    eff, slot = ex.eff, ex.slot
    ex.slot = None  # once: every exit path calls this
    if slot is None or eff is None or eff.tenant_id is None:
        return None
    # a fallback is an attempt that failed and went on, as the tiers page counts them: an
    # error answered to the client (a relayed engine 400, a limit) is none
    why = ex.trail.fallback_reason if ex.trail is not None else None
    return gw.spawn(gw.access.done(eff, slot, ex.tier, ex.usage, why, ex.cost))


async def read_body(request: web.Request, settings: Settings) -> bytes:
    """The request body, within the size limit and the body-read timeout; a body in an
    encoding we do not take is a 415, a corrupt one a 400."""
    _check_media_type(request)
    enc = request.headers.get("Content-Encoding", "").strip().lower()
    if enc not in _ENCODINGS:
        raise UnsupportedEncoding(
            f"Content-Encoding {enc!r} is not supported; send identity, gzip or deflate."
        )
    limit = settings.max_body_bytes
    if request.content_length is not None and request.content_length > limit:
        raise PayloadTooLarge(
            f"The request body is {request.content_length} bytes; the limit is {limit} bytes."
        )
    try:
        if request.content.is_eof():  # all of it is here already (the norm): no timer
            raw = await request.read()
        else:
            async with asyncio.timeout(settings.body_timeout):
                raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise PayloadTooLarge(f"The request body is over the limit of {limit} bytes.") from None
    except TimeoutError:
        msg = f"The request body did not arrive within {settings.body_timeout:.0f}s."
        raise BodyTimeout(msg) from None
    return raw if enc in ("", "identity") else _decompress(raw, enc, limit)


_FORM_TYPES = frozenset(("text/plain", "multipart/form-data", "application/x-www-form-urlencoded"))


def _check_media_type(request: web.Request) -> None:
    """A 415 for a body a browser may send cross-origin without a preflight (``text/plain``,
    a form) when it is such a request: always for ``text/plain`` and multipart, for a
    urlencoded form when the request has an ``Origin`` (curl ``-d`` and urllib send that
    type without one, and keep working)."""
    ctype = request.content_type  # "application/octet-stream" when absent
    if ctype not in _FORM_TYPES:
        return
    if ctype == "application/x-www-form-urlencoded" and "Origin" not in request.headers:
        return
    raise UnsupportedMediaType(
        f"Content-Type {ctype!r} is not accepted; send the JSON body as 'application/json'."
    )


def _decompress(raw: bytes, enc: str, limit: int) -> bytes:
    """gzip or deflate (zlib or raw), never more than ``limit`` bytes out (no bombs)."""
    wbits = 47 if enc in ("gzip", "x-gzip") else 15  # 47: gzip or zlib header, detected
    for bits in (wbits, -15) if enc == "deflate" else (wbits,):
        d = zlib.decompressobj(bits)
        try:
            out = d.decompress(raw, limit + 1)
        except zlib.error:
            continue
        if len(out) > limit or d.unconsumed_tail:
            raise PayloadTooLarge(f"The decompressed request body is over {limit} bytes.")
        if d.eof:
            return out
    raise InvalidBody(f"The request body is not valid {enc} data.")
