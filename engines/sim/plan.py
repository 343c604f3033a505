"""The whole answer, decided before any timing: its pieces (one per token), how it
finishes, and where a fault ends it. Deterministic in the seed and the request's content:
a continuation (``continue_final_message``) is the rest of the answer it continues."""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass, replace

from engines.sim.faults import corrupt_call, corrupt_json, leaked, looped
from engines.sim.request import SimRequest
from engines.sim.text import NOUNS, answer_length, prose, sentence, split_pieces, value_for

CONTINUE_MIN_TOKENS = 8  # a continuation of a prefix the model would not have written
Pieces = list[str] | None  # a continuation's answer, where there is one


@dataclass
class Plan:
    """The answer decided before any timing: pieces (one per token) and how it ends."""

    pieces: list[str]
    finish: str
    tool_name: str | None = None
    tool_id: str = ""
    end: str | None = None  # stall, cut or error_event
    end_after: int = 0
    slow_ttft: bool = False


def _joins(prefix: str | None) -> tuple[bool, bool]:
    """How text after ``prefix`` starts: with a space, with a capital."""
    capital = prefix is None or prefix.rstrip() == "" or prefix.rstrip()[-1] in ".!?:"
    lead = prefix is not None and prefix != "" and not prefix[-1].isspace()
    return lead, capital


def _text_plan(
    req: SimRequest, rng: random.Random, frng: random.Random, faults: set[str], rest: Pieces
) -> Plan:
    if rest is not None:  # a continuation
        pieces = rest
    else:
        lead, capital = _joins(req.continue_text)
        target = answer_length(rng)
        if req.ignore_eos:
            target = req.max_tokens or 300
        pieces = prose(rng, max(target, req.min_tokens), lead, capital)
        if req.ignore_eos:
            pieces = pieces[:target]
    if "loop" in faults:
        return Plan(looped(pieces, req.max_tokens, frng), "length")
    if "leak" in faults:
        pieces = leaked(pieces, frng)
    return Plan(pieces, "length" if req.ignore_eos else "stop")


def _continued(req: SimRequest, seed: int, rng: random.Random) -> Pieces:
    """A continuation's answer (a trailing assistant message, ``continue_final_message``):
    where its text is a start of the answer this seed gives the request without it, the
    rest of that answer, as a model with greedy or seeded sampling continues its own
    prefix; other text goes on with new sentences, as many words as that answer had left.
    None where the request continues nothing, asks for ``ignore_eos``, or the answer it
    continues is a tool call or JSON that does not start with the text."""
    if not req.base_digest or req.ignore_eos:
        return None
    asked = replace(req, digest=req.base_digest, continue_text=None, base_digest="", min_tokens=0)
    base = _answer(asked, seed, set(), *_rngs(asked, seed))
    if base.tool_name is not None:
        return None
    prefix = req.continue_text or ""
    rest = _after(base.pieces, prefix)
    if req.json_schema is not None:
        return rest
    lead, capital = _joins(prefix)
    if rest is None:
        left = len(base.pieces) - len(re.findall(r"\S+", prefix))
        rest = prose(rng, max(CONTINUE_MIN_TOKENS, left), lead, capital)
    if len(rest) < req.min_tokens:  # min_tokens counts this request's own tokens
        lead, capital = _joins(prefix + "".join(rest))
        rest += prose(rng, req.min_tokens - len(rest), lead, capital)
    return rest


def _after(pieces: list[str], prefix: str) -> list[str] | None:
    """The pieces after ``prefix`` (which may end inside one); None if it does not start
    them."""
    if not "".join(pieces).startswith(prefix):
        return None
    size = 0
    for i, p in enumerate(pieces):
        if size + len(p) > len(prefix):
            return [p[len(prefix) - size :], *pieces[i + 1 :]]
        size += len(p)
    return []


def _json_plan(
    req: SimRequest, rng: random.Random, frng: random.Random, bad: bool, rest: Pieces
) -> Plan:
    if rest is not None:  # the rest of the object a continuation continues
        text = "".join(rest)
        return Plan(split_pieces(corrupt_json(text, frng) if bad else text), "stop")
    schema = req.json_schema
    if schema:
        value = value_for(schema, rng)
    else:
        value = {
            "answer": " ".join(sentence(rng)),
            "confidence": round(rng.uniform(0.5, 0.99), 2),
            "tags": [rng.choice(NOUNS), rng.choice(NOUNS)],
        }
    text = json.dumps(value)
    if bad:
        text = corrupt_json(text, frng)
    return Plan(split_pieces(text), "stop")


def _tool_plan(req: SimRequest, rng: random.Random, frng: random.Random, bad: bool) -> Plan:
    assert req.tool is not None
    name = str(req.tool["name"])
    params = req.tool.get("parameters") or {"type": "object", "properties": {}}
    args = json.dumps(value_for(params, rng))
    if bad:
        name, args = corrupt_call(name, args, frng)
    call_id = f"call_{rng.getrandbits(48):012x}"
    return Plan(split_pieces(args), "tool_calls", tool_name=name, tool_id=call_id)


def _apply_limits(plan: Plan, req: SimRequest) -> None:
    if plan.tool_name is None and req.stop:
        _apply_stop(plan, req.stop)
    if req.max_tokens is not None and len(plan.pieces) > req.max_tokens:
        plan.pieces = plan.pieces[: req.max_tokens]
        plan.finish = "length"


def _apply_stop(plan: Plan, stops: list[str]) -> None:
    text = "".join(plan.pieces)
    hits = [i for i in (text.find(s) for s in stops) if i >= 0]
    if not hits:
        return
    cut, out, size = min(hits), [], 0
    for p in plan.pieces:
        if size + len(p) >= cut:
            if cut > size:
                out.append(p[: cut - size])
            break
        out.append(p)
        size += len(p)
    plan.pieces, plan.finish = out, "stop"


def _rngs(req: SimRequest, seed: int) -> tuple[random.Random, random.Random]:
    """The request's draws: its text's, its faults'."""
    return random.Random(f"{seed}:{req.digest}:text"), random.Random(f"{seed}:{req.digest}:fault")


def _answer(
    req: SimRequest, seed: int, faults: set[str], rng: random.Random, frng: random.Random
) -> Plan:
    """The answer from the seed, the request content and the faults, before any limit."""
    if req.tool is not None:
        return _tool_plan(req, rng, frng, "bad_tool" in faults)
    rest = _continued(req, seed, rng)
    if req.json_schema is not None:
        return _json_plan(req, rng, frng, "bad_json" in faults, rest)
    return _text_plan(req, rng, frng, faults, rest)


def make_plan(req: SimRequest, seed: int, faults: set[str]) -> Plan:
    """Decide the whole answer from the seed, the request content and the faults."""
    rng, frng = _rngs(req, seed)
    plan = _answer(req, seed, faults, rng, frng)
    _apply_limits(plan, req)
    for end in ("stall", "cut", "error_event"):
        if end in faults:
            plan.end, plan.end_after = end, min(frng.randint(3, 8), len(plan.pieces))
            break
    plan.slow_ttft = "slow_ttft" in faults
    return plan
