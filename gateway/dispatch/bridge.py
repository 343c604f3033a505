"""Bridging a hedge: the standard tier answered first, the fast tier takes the rest.

A hedge fires when the fast tier has no first token after a delay (its p90 x 3); the
standard tier then starts beside it and, usually, answers first. Left at that, the answer
is the standard tier's from start to end: its speed, plus the delay. Bridged, the standard
tier's first token goes out at once and the fast tier is asked to *continue* that text
(a continuation, as after a failure: :mod:`gateway.dispatch.continuation`), on a new
request; a stuck replica or a slow prefill held up the first request, not the next. When
the continuation's first token comes within the same delay, the standard stream is closed
(its engine stops) and the fast one is relayed in its place, as if it were the first:
the client's stream keeps its id and its text, the checks see the whole text, and a
failure later is continued on the standard tier like any other. When it does not, the
standard tier goes on, having waited at most that delay (its events wait in the socket,
not lost).

Only where the fast tier continues without repeating the text it was given in front of
its answer (``continuation: continue_final_message*``: SGLang, vLLM), only for a plain
text answer (not JSON mode, tools or ``n > 1``), and only once per request; the standard
stream is held at most :data:`WAIT_MAX_S`. ``dispatch.bridge: false`` turns it off.
"""

from __future__ import annotations

import asyncio
import logging
import time

from gateway.dispatch.call import Call
from gateway.dispatch.continuation import Continuer
from gateway.dispatch.opening import StreamStart
from gateway.dispatch.outcome import BridgePlan, Trail
from gateway.errors import GatewayError
from gateway.upstream.failures import AttemptFailed
from gateway.upstream.pools import Pools

log = logging.getLogger("gateway.dispatch")
# The longest the standard stream is held for the continuation's first token, whatever the
# hedge delay (up to 2 s): the standard engine goes on generating meanwhile (its events
# wait in the gateway's buffer), so a continuation that never comes costs a pause, not
# latency (tests/bench_bridge_pause.py: 1,072 ms against 1,071, a 200 ms pause).
WAIT_MAX_S = 0.25


def possible(call: Call, pools: Pools, plan: BridgePlan) -> bool:
    """Whether ``plan``'s tier could take over this call's answer at all: not where the
    answer is structured (JSON mode, a schema, tools: a grammar starts from the start)."""
    pool, facts = pools[plan.tier], call.req.facts
    return (
        call.can_be_continued()
        and not (facts.json_mode or facts.tools or facts.other_tools)
        and pool.tier.continuation.startswith("continue_final_message")
        and pool.continues
        and not call.native(pool)
        and pool.available(time.monotonic())
    )


async def bridge(
    cont: Continuer, plan: BridgePlan, s: StreamStart, trail: Trail, keep_events: bool
) -> StreamStart | None:
    """The continuation on ``plan.tier`` of ``s``'s text so far, past its first token, its
    state begun with that text (:meth:`StreamState.prepend`); ``s`` is then closed. None
    (``s`` untouched) when it cannot be, or does not answer within ``plan.wait``."""
    call, state = cont.call, s.state
    chars = state.chars
    tokens = state.tokens_for(chars)
    prefix = state.text()
    if state.done or not (state.plain and state.resumable) or not prefix.strip():
        return None
    wait = min(plan.wait, WAIT_MAX_S)
    if not possible(call, cont.pools, plan) or time.monotonic() + wait >= call.deadline_at:
        return None
    own = Trail()  # its failures are not the answer's: it was only ever an option
    try:
        async with asyncio.timeout(wait):
            _, nxt = await cont.open_on((plan.tier,), prefix, tokens, own, keep_events)
    except (TimeoutError, AttemptFailed, GatewayError) as e:
        log.debug("bridge to %s: none (%s)", plan.tier, type(e).__name__)
        return None
    finally:
        trail.upstream_s += own.upstream_s
        trail.queue_s += own.queue_s
        trail.backoff_s += own.backoff_s
    nxt.state.prepend(state, chars, tokens)
    s.discard()  # the standard stream was fine: closing it is not its fault
    trail.bridged = f"{s.pool.name}:{chars}"
    return nxt
