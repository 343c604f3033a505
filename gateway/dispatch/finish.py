"""How a stream that breaks after the client got bytes is finished, known before its first
byte from what the tiers after it can do.

Each later tier finishes it one of three ways (:func:`way`):

* ``continue``: the tier continues an assistant prefix (SGLang and vLLM with
  ``continue_final_message``, llama.cpp's server by prefill, a LiteLLM model whose map
  entry takes an assistant prefill); the text sent goes on from where it stopped.
* ``prompt``: it cannot, and the operator gave it a ``continuation_prompt``: it is shown
  the text sent as its own message and asked, in a user message, to go on with it.
* ``restart``: neither: the request starts over there, and the client gets only the part
  of the new answer after the text it already has (where the new answer begins with that
  text, as the same model family decoding greedily does); a new answer that begins
  otherwise follows the text sent after a paragraph break, whole (the trailing
  ``x-gateway-finish`` comment says ``diverged``), never an error event.

A tier that cannot continue is ``continuation: off``, a hosted model without assistant
prefill (LiteLLM's model map, asked when the tier is built) or one that refused a
continuation once (a 4xx: remembered per tier, until its pool is rebuilt); the stream is
then finished the next way on the same tier, within the same request.

Where no way fits the stream's shape (tool-call deltas, ``n > 1``: the client has parts no
new answer lines up with), its first tokens are held back instead while the early checks
run (``gateway.dispatch.attempts``), and a break after that window ends with the error
event. The plan goes to the client as the ``x-gateway-finish`` header.
"""

from __future__ import annotations

from typing import Literal

import orjson

from gateway.dispatch.call import Call
from gateway.upstream.pools import Pool, Pools

Way = Literal["continue", "prompt", "restart"]
PARAGRAPH = "\n\n"  # between the text sent and a restarted answer that begins otherwise


def way(call: Call, pool: Pool) -> Way:
    """How ``pool``'s tier would finish a stream of ``call`` that another tier began."""
    if pool.tier.continuation != "off" and pool.continues and not call.native(pool):
        return "continue"
    if pool.tier.continuation_prompt and call.req.kind == "chat" and not call.native(pool):
        return "prompt"
    return "restart"


def finishable(call: Call, tiers: tuple[str, ...], after: str) -> bool:
    """Whether a stream of ``call`` broken on ``after`` could be finished by a later tier
    at all: one is left, and the stream's shape lines up with a new answer (one choice)."""
    return call.can_be_continued() and tiers.index(after) < len(tiers) - 1


def plan(call: Call, pools: Pools, tier: str, held: bool) -> str:
    """The ``x-gateway-finish`` header of a stream answered by ``tier``: ``<way> <tier>``
    for the first tier after it, ``held`` where its first tokens were held back because no
    tier could finish it, ``none`` where no tier is left after it."""
    tiers = call.d.tiers
    if not finishable(call, tiers, tier):
        return "held" if held else "none"
    nxt = tiers[tiers.index(tier) + 1]
    return f"{way(call, pools[nxt])} {nxt}"


def prompt_body(call: Call, pool: Pool, prefix: str, sent_tokens: int) -> bytes | None:
    """The request that shows ``pool``'s tier the text sent and asks it to go on with it
    (its ``continuation_prompt`` as the last user message)."""
    ask = pool.tier.continuation_prompt
    if ask is None or call.req.kind != "chat":
        return None
    body = call.body_for(pool)
    body["messages"] = [
        *call.req.body["messages"],
        {"role": "assistant", "content": prefix},
        {"role": "user", "content": ask},
    ]
    return orjson.dumps(streamed(body, sent_tokens))


def restart_body(call: Call, pool: Pool) -> bytes:
    """The request itself, anew on ``pool``'s tier, as a stream with its usage."""
    return orjson.dumps(call.stream_body(pool))


def streamed(body: dict[str, object], sent_tokens: int) -> dict[str, object]:
    """``body`` read as a stream with its usage, its token limits lowered by the tokens the
    client has already (a ``min_tokens`` too: SGLang and vLLM refuse one over
    ``max_tokens``, and that 4xx would read as a tier that cannot continue)."""
    body["stream"] = True
    so = body.get("stream_options")
    body["stream_options"] = {**(so if isinstance(so, dict) else {}), "include_usage": True}
    caps: list[int] = []
    for key in ("max_tokens", "max_completion_tokens"):
        v = body.get(key)
        if isinstance(v, int):
            body[key] = max(1, v - sent_tokens)
            caps.append(max(1, v - sent_tokens))
    low = body.get("min_tokens")
    if isinstance(low, int):
        body["min_tokens"] = min(max(0, low - sent_tokens), *caps)
    return body


def separator(sent: str) -> str:
    """What goes between the text sent and a restarted answer that does not begin with it."""
    if sent.endswith(PARAGRAPH) or not sent:
        return ""
    return "\n" if sent.endswith("\n") else PARAGRAPH
