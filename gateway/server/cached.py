"""An answer from the response cache, written in the client's format.

A hit is admitted like any request (rate limits, concurrency) but reserves nothing against
the tenant's budgets, and is charged zero engine tokens: its usage record says ``cache``
for the tier, with the tokens it saved (``cache_hits``, ``cache_saved_tokens``). Its
headers say where the answer came from: ``x-gateway-cache: hit``, ``age``,
``x-gateway-cache-match``, and ``x-gateway-tier`` the tier that produced it.
"""

from __future__ import annotations

from dataclasses import replace

from aiohttp import web

from gateway.access.guard import rate_headers
from gateway.cache.replay import json_body, sse_body
from gateway.dispatch.outcome import Trail
from gateway.headers import H_REQUEST_ID, H_TIER
from gateway.server.exchange import Exchange
from gateway.server.replies import JSON, Wire, new_id
from gateway.server.slots import free_slot
from gateway.server.state import Gateway
from gateway.tenancy.tenants import Effective

CACHE_TIER = "cache"  # the tier of a hit in metrics and usage: no engine ran


def hit_policy(eff: Effective) -> Effective:
    """The policy a hit is admitted under: no budget reservation (it spends no tokens)."""
    p = eff.policy
    if not p.has_budget:
        return eff
    return replace(eff, policy=p.model_copy(update={"token_budget": None, "cost_budget": None}))


async def serve_hit(
    request: web.Request, gw: Gateway, ex: Exchange, wire: Wire | None
) -> web.StreamResponse:
    look, eff = ex.cache, ex.eff
    assert look is not None and look.entry is not None and eff is not None
    entry = look.entry
    eff = ex.eff = hit_policy(eff)
    slot = new_id("adm_")
    ex.admission = await gw.access.admit(eff, slot)
    ex.slot, ex.trail, ex.tier = slot, Trail(), CACHE_TIER
    ex.usage = {"prompt_tokens": 0, "completion_tokens": 0, "cache_saved_tokens": entry.tokens}
    headers = {H_REQUEST_ID: ex.rid, **ex.headers(), H_TIER: entry.tier}
    if ex.admission is not None and eff.tenant_id is not None:
        headers.update(rate_headers(ex.admission))
    await free_slot(gw, ex)  # before the answer: the client's next request finds it free
    _account(gw, ex)
    if not look.ask.req.stream:
        body = json_body(entry)
        return web.Response(
            body=body if wire is None else wire.answer(body), content_type=JSON, headers=headers
        )
    ex.stream = True
    headers["Cache-Control"] = "no-cache"
    resp = web.StreamResponse(headers=headers)
    resp.content_type = "text/event-stream"
    await resp.prepare(request)
    ex.mark_first_byte()
    sink = resp if wire is None else wire.sink(resp)
    so = look.ask.req.body.get("stream_options")
    await sink.write(sse_body(entry, isinstance(so, dict) and bool(so.get("include_usage"))))
    await sink.write_eof()
    return resp


def _account(gw: Gateway, ex: Exchange) -> None:
    """The hit's slot freed and its zero tokens counted, in a task of its own."""
    eff, slot = ex.eff, ex.slot
    ex.slot = None
    if slot is not None and eff is not None and eff.tenant_id is not None:
        gw.spawn(gw.access.done(eff, slot, CACHE_TIER, ex.usage, None, 0.0))
