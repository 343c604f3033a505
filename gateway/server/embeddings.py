"""``POST /v1/embeddings``: routed to the tiers whose engines serve embeddings.

A tier serves embeddings when the rules say so (``tiers.<t>.embeddings: true``). The
request's ``model`` may pin one (a tier alias, a tier name or a tier's model name);
``auto`` or any other name takes the embedding tiers in the rules' order. The body goes
to the engine with only ``model`` replaced; an upstream failure (5xx, 429, a timeout, a
refused connection) moves on to the next embedding tier within the deadline, an engine's
4xx is relayed. No embedding tier (or none the caller may use): a 404 envelope.
"""

from __future__ import annotations

import time
import zlib
from typing import Any

import orjson
from aiohttp import web

from gateway.dispatch.fallback import reason, verdict
from gateway.dispatch.outcome import Failure, Trail, describe_fallback
from gateway.errors import (
    GatewayError,
    InvalidField,
    ModelNotFound,
    UpstreamFailed,
    UpstreamTimeout,
)
from gateway.headers import H_FALLBACK, H_REQUEST_ID, H_TIER
from gateway.request.model import decode_body, require_str
from gateway.server.completions import read_body
from gateway.server.exchange import Exchange
from gateway.server.replies import (
    JSON,
    authorization,
    engine_error,
    error_response,
    new_id,
    request_id,
)
from gateway.server.slots import free_slot
from gateway.server.state import GATEWAY, Runtime
from gateway.tenancy.tenants import Effective
from gateway.upstream.failures import AttemptFailed, ClientRejected, TierUnavailable, kept
from gateway.upstream.scheduler import ANYONE, Ticket

_DEADLINE_S = 60.0  # embeddings are short; the whole request, every tier tried


async def embeddings(request: web.Request) -> web.Response:
    gw = request.app[GATEWAY]
    rt = gw.runtime
    ex = Exchange(request_id(request), "embeddings")
    ex.trail = Trail()
    with rt.in_use():
        try:
            resp = await _serve(request, rt, ex)
            await free_slot(gw, ex)  # before the answer: the client's next request finds it free
            return resp
        finally:
            gw.telemetry.record(ex.record())
            eff, slot = ex.eff, ex.slot
            if slot is not None and eff is not None and eff.tenant_id is not None:
                gw.spawn(gw.access.done(eff, slot, ex.tier, ex.usage, None, ex.cost))


async def _serve(request: web.Request, rt: Runtime, ex: Exchange) -> web.Response:
    gw = request.app[GATEWAY]
    try:
        eff = ex.eff = await gw.access.authenticate(authorization(request.headers))
        body = decode_body(await read_body(request, gw.settings))
        tiers = _tiers(rt, eff, require_str(body, "model"))
        if body.get("input") is None:
            raise InvalidField(
                "Missing required parameter: 'input'.",
                param="input",
                code="missing_required_parameter",
            )
        slot = new_id("adm_")
        await gw.access.admit(eff, slot)
        ex.slot = slot
        ex.tier, answer = await _send(rt, tiers, body, ex)
        ex.usage = _usage(answer)
        ex.cost = rt.pools[ex.tier].cost(ex.usage)
    except GatewayError as e:
        ex.status, ex.error = e.status, e.code
        return error_response(e, ex.rid, _explain(ex))
    except ClientRejected as e:  # the engine refused the request: its status and message
        ex.status, ex.error = e.status, reason(e)
        return error_response(engine_error(e), ex.rid, _explain(ex))
    headers = {H_REQUEST_ID: ex.rid, H_TIER: ex.tier, **_explain(ex)}
    return web.Response(body=answer, content_type=JSON, headers=headers)


def _explain(ex: Exchange) -> dict[str, str]:
    fb = describe_fallback(ex.trail.failures, ex.tier) if ex.trail is not None else None
    return {H_FALLBACK: fb} if fb else {}


def _tiers(rt: Runtime, eff: Effective, model: str) -> list[str]:
    """The embedding tiers to try, in order (the pinned one alone when ``model`` pins one)."""
    tiers = [n for n, t in rt.rules.tiers.items() if t.embeddings]
    allowed = eff.policy.allowed_tiers
    if allowed is not None:
        tiers = [t for t in tiers if t in allowed]
    pinned = rt.rules.aliases.get(model) or (model if model in rt.rules.tiers else None)
    pinned = pinned or next((n for n, m in rt.pools.served().items() if m == model), None)
    if pinned is not None:
        tiers = [t for t in tiers if t == pinned]
    if not tiers:
        which = "no tier of this gateway serves"
        if pinned:
            which = f"the tier {pinned!r} does not serve"
        raise ModelNotFound(
            f"No embeddings here: {which} POST /v1/embeddings "
            "(tiers.<tier>.embeddings in the routing rules).",
            param="model",
        )
    return tiers


async def _send(
    rt: Runtime, tiers: list[str], body: dict[str, Any], ex: Exchange
) -> tuple[str, bytes]:
    deadline = time.monotonic() + _DEADLINE_S
    trail = ex.trail or Trail()
    last: AttemptFailed | None = None
    for tier in tiers:
        pool = rt.pools[tier]
        left = deadline - time.monotonic()
        if left <= 0 or not pool.available(time.monotonic()):
            trail.failures.append(
                Failure.of(tier, TierUnavailable("circuit open or no replica up"))
            )
            continue
        payload = orjson.dumps({**body, "model": pool.model})
        t0 = time.perf_counter()
        rep = None
        try:  # through the tier's queue like a completion: capacity, fair share, shedding
            rep, queued = await pool.acquire(_ticket(ex), zlib.crc32(payload[:512]), deadline)
            trail.queue_s += queued
            t0 = time.perf_counter()
            answer = await pool.post(rep, "/v1/embeddings", payload, pool.limits(left, False))
        except AttemptFailed as e:
            if not verdict(e).next_tier:
                raise
            pool.record(False)
            trail.failures.append(Failure.of(tier, e))
            last = kept(e)  # without the traceback that holds this frame and its payload
            continue
        finally:
            held = time.perf_counter() - t0
            if rep is not None:
                pool.release(rep, held)
                trail.upstream_s += held
        pool.record(True)
        return tier, answer
    msg = "Every embedding tier failed: " + "; ".join(f.short() for f in trail.failures) + "."
    timeout = last is not None and verdict(last).timeout
    raise UpstreamTimeout(msg) if timeout else UpstreamFailed(msg)


def _ticket(ex: Exchange) -> Ticket:
    eff = ex.eff
    if eff is None:
        return ANYONE
    p = eff.policy
    return Ticket.of(eff.tenant_id, "standard", p.priority_shift or 0, p.share_weight or 1)


def _usage(answer: bytes) -> dict[str, Any] | None:
    try:
        usage = orjson.loads(answer).get("usage")
    except (orjson.JSONDecodeError, AttributeError):
        return None
    return usage if isinstance(usage, dict) else None
