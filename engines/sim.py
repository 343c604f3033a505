"""An SGLang-shaped replica simulator: OpenAI API, load, faults and metrics without a GPU.

Run::

    python -m engines.sim --port 30000 [--host 127.0.0.1] [--profile highspeed|standard]
        [--seed N] [--model NAME] [--time-scale 0.01] [--max-running-requests N]
        [--max-total-tokens N] [--context-length N] [--fault NAME=RATE ...]
        [--retry-after S]

It answers like one SGLang replica under load: ``POST /v1/chat/completions`` and
``POST /v1/completions`` (JSON or SSE with ``stream: true``), ``GET /v1/models``,
``GET /health``, ``GET /get_server_info``, ``GET /get_model_info`` and ``GET /metrics``
(Prometheus text, SGLang's metric names, label ``model_name``).

**Latency.** :mod:`engines.sim_model` holds the model and its sources: continuous batching
with ``max_running_requests`` slots and a FIFO queue, TTFT = queue + prefill of the
uncached prompt (radix prefix cache), TPOT by batch size, EAGLE-3 bursts and FP8 on the
``highspeed`` profile. ``--time-scale`` maps model seconds to wall seconds (0.01: 100x
faster); all reported figures are in model time.

Design: one coroutine per request, no global stepping loop. A request takes a slot (or
queues), books the replica's prefill lane, sleeps until its first token, then sleeps step
by step; each step's cost is computed from the batch size at that moment, so requests
slow each other down as they join and leave. Steps are coalesced into one wake-up of at
least 2 ms of wall time (50 ms for non-streamed answers), which keeps hundreds of streams
cheap on one core. Deadlines are absolute, so sleep overshoot does not accumulate.

**The model's figures per request** (model milliseconds): response headers
``x-sim-profile``, ``x-sim-batch`` (running requests at admission), ``x-sim-queue-ms``,
``x-sim-prefill-ms`` (lane wait + prefill), ``x-sim-cached-tokens``,
``x-sim-prompt-tokens``, ``x-sim-ttft-ms``, ``x-sim-tpot-ms`` (per output token at the
admission batch size), ``x-sim-accept-len`` and ``x-sim-faults`` (plus ``x-sim-e2e-ms`` and
``x-sim-steps`` on non-streamed answers); and a ``sim`` object
(top level of the JSON answer, or of the final chunk of a stream) with the realised
``ttft_ms``, ``tpot_ms`` (including decode stalls caused by other requests' prefills),
``e2e_ms``, ``steps`` and ``accept_len``.

**Text.** Pseudo-English, one word per token, deterministic in ``--seed`` and the request
content (``stream``, ``model``, ``max_tokens``, ``min_tokens`` and ``stop`` do not change the
text, only where it ends). Length: log-normal around 80 tokens,
clipped to 20-300, ending on a sentence; ``max_tokens`` / ``max_completion_tokens`` cut it
(``finish_reason: "length"``). ``stop`` strings, ``ignore_eos`` and ``min_tokens`` are
honoured; other SGLang extras (``top_k``, ``regex``, ``chat_template_kwargs``...) are
accepted and ignored. ``continue_final_message: true`` with a trailing assistant message
continues that text. Where the text is a start of the answer this seed gives the same
request without that message and flag (plain text or JSON; the replica's
``--profile`` does not change the text, so two replicas with one ``--seed`` continue each
other's answers), the continuation is the rest of that answer, as a model with greedy or
seeded sampling continues its own prefix (``tests/test_local_engine.py`` checks llama.cpp's
server); other text goes on with new sentences, as many words as that answer had left
(at least 8), other JSON with a new object; ``min_tokens`` counts the continuation's own
tokens. With ``ignore_eos``, on ``/v1/completions`` (where a prefix is only more prompt)
and for tool calls a continuation is a new answer. ``response_format`` ``json_object`` /
``json_schema`` gives a valid JSON object (simple schemas: properties of basic types,
nested objects, arrays, enums); ``tools`` give a valid call to the first tool (or the one
``tool_choice`` names), unless ``tool_choice`` is ``"none"`` or the last message is a tool
result.

**Faults**, per request with ``x-sim-fault: NAME[;NAME...]`` (``none`` turns off the
rate-drawn ones) or per rate with ``--fault NAME=RATE`` (drawn in request order from the
seed; with ``--fault-draw content``, from the seed and the request's content, so that
the same request draws the same faults whenever it comes, as every target of a side-by-side
benchmark sends it): ``500`` (HTTP 500, OpenAI-style error body), ``429`` (with ``Retry-After``),
``hang`` (never answers), ``slow_ttft`` (TTFT + max(19 x TTFT, 5 s)), ``stall`` (a few
tokens, then silence on an open connection; the slot is freed), ``cut`` (connection
closed mid-stream, no ``[DONE]``), ``loop`` (a few words, then one sentence over and over
up to ``max_tokens`` or 400 tokens), ``leak`` (``<|im_end|><|im_start|>user`` in the
text), ``bad_json`` (invalid JSON when JSON mode was asked), ``bad_tool`` (a call to a
function that does not exist or with arguments that do not parse, when tools were
given), ``error_event`` (a mid-stream ``data: {"error": ...}`` event, then ``[DONE]``; an
HTTP 500 for a non-streamed answer). Faults that do not apply to the request are no-ops.
Same seed + same request sequence -> same outputs and same fault draws.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import math
import random
import re
import signal
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import orjson
from aiohttp import web

from engines.sim_model import Admission, Profile, Replica, make_profile

FAULTS = (
    "500",
    "429",
    "hang",
    "slow_ttft",
    "stall",
    "cut",
    "loop",
    "leak",
    "bad_json",
    "bad_tool",
    "error_event",
)
LOOP_DEFAULT_TOKENS = 400
CONTINUE_MIN_TOKENS = 8  # a continuation of a prefix the model would not have written
SLOW_TTFT_MIN_S = 5.0
SLOW_TTFT_FACTOR = 20.0
MIN_SLEEP_STREAM_S = 0.002
MIN_SLEEP_BLOCKING_S = 0.05
DESCRIPTION = "An SGLang-shaped replica simulator: OpenAI API, load, faults, metrics, no GPU."
LEAK_PIECES = (" <|im_end|>", "\n<|im_start|>", "user", "\n")
Json = dict[str, Any]


# --- configuration --------------------------------------------------------------------


@dataclass(frozen=True)
class SimConfig:
    port: int
    host: str = "127.0.0.1"
    profile: str = "highspeed"
    seed: int = 0
    model: str = ""
    time_scale: float = 1.0
    max_running_requests: int | None = None
    max_total_tokens: int | None = None
    context_length: int = 131072
    faults: dict[str, float] = field(default_factory=dict)
    fault_draw: str = "order"  # or "content"
    retry_after: float = 1.0

    @property
    def served_model_name(self) -> str:
        return self.model or f"sim-{self.profile}"


def _fault_rate(spec: str) -> tuple[str, float]:
    name, sep, rate = spec.partition("=")
    if not sep or name not in FAULTS:
        raise argparse.ArgumentTypeError(f"expected NAME=RATE with NAME in {', '.join(FAULTS)}")
    try:
        value = float(rate)
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad rate {rate!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError("RATE must be within [0, 1]")
    return name, value


def _positive(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError("must be > 0")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="engines.sim", description=DESCRIPTION)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--profile", choices=("highspeed", "standard"), default="highspeed")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--model", "--served-model-name", dest="model", default="")
    p.add_argument("--time-scale", type=_positive, default=1.0, help="wall s per model s")
    p.add_argument("--max-running-requests", type=int, default=None)
    p.add_argument("--max-total-tokens", type=int, default=None, help="KV pool / cache size")
    p.add_argument("--context-length", type=int, default=131072)
    p.add_argument("--fault", type=_fault_rate, action="append", default=[], metavar="NAME=RATE")
    p.add_argument(
        "--fault-draw",
        choices=("order", "content"),
        default="order",
        help="draw rate faults in request order, or from each request's content (the same "
        "request always draws the same faults: side-by-side targets get the same ones)",
    )
    p.add_argument("--retry-after", type=_positive, default=1.0, help="seconds, for 429")
    return p


def parse_args(argv: list[str] | None = None) -> SimConfig:
    a = build_parser().parse_args(argv)
    return SimConfig(
        port=a.port,
        host=a.host,
        profile=a.profile,
        seed=a.seed,
        model=a.model,
        time_scale=a.time_scale,
        max_running_requests=a.max_running_requests,
        max_total_tokens=a.max_total_tokens,
        context_length=a.context_length,
        faults=dict(a.fault),
        fault_draw=a.fault_draw,
        retry_after=a.retry_after,
    )


# --- pseudo-text ----------------------------------------------------------------------

DETS = ("the", "a", "each", "every", "this", "that", "our", "their", "one", "another")
ADJS = (
    "careful", "stable", "simple", "modern", "small", "large", "quiet", "rapid", "useful",
    "clear", "robust", "shared", "recent", "common", "local", "narrow", "broad", "steady",
    "efficient", "reliable", "complex", "gentle", "precise", "open",
)  # fmt: skip
NOUNS = (
    "system", "model", "network", "river", "garden", "process", "answer", "question",
    "method", "signal", "teacher", "library", "market", "engine", "pattern", "record",
    "window", "result", "village", "journey", "update", "request", "server", "forest",
    "report", "budget", "design", "problem", "reason", "history",
)  # fmt: skip
VERBS = (
    "improves", "explains", "follows", "supports", "changes", "describes", "reaches",
    "builds", "measures", "protects", "connects", "reveals", "shapes", "carries",
    "balances", "extends", "guides", "tracks", "combines", "handles",
)  # fmt: skip
PREPS = ("across", "within", "under", "beyond", "through", "near", "after", "before")
CONJS = ("and", "while", "because", "although", "so")


def _noun_phrase(rng: random.Random) -> list[str]:
    words = [rng.choice(DETS)]
    if rng.random() < 0.6:
        words.append(rng.choice(ADJS))
    words.append(rng.choice(NOUNS))
    return words


def _clause(rng: random.Random) -> list[str]:
    words = [*_noun_phrase(rng), rng.choice(VERBS), *_noun_phrase(rng)]
    if rng.random() < 0.5:
        words += [rng.choice(PREPS), *_noun_phrase(rng)]
    return words


def sentence(rng: random.Random) -> list[str]:
    """One plausible sentence, as words; the first capitalised, the last with a period."""
    words = _clause(rng)
    if rng.random() < 0.35:
        words[-1] += ","
        words += [rng.choice(CONJS), *_clause(rng)]
    words[0] = words[0].capitalize()
    words[-1] += "."
    return words


def prose(rng: random.Random, target: int, lead_space: bool, capital: bool) -> list[str]:
    """Whole sentences, at least ``target`` words, as pieces (one per token)."""
    pieces: list[str] = []
    while len(pieces) < target:
        words = sentence(rng)
        if not capital and not pieces:
            words[0] = words[0].lower()
        sep = "\n\n" if pieces and rng.random() < 0.15 else " "
        for w in words:
            first = not pieces
            pieces.append((" " if lead_space else "") + w if first else sep + w)
            sep = " "
    return pieces


def split_pieces(text: str) -> list[str]:
    """Token-sized pieces (about 4 characters each) whose concatenation is ``text``."""
    return re.findall(r"\s*\S{1,4}|\s+$", text)


def answer_length(rng: random.Random) -> int:
    """Natural answer length in tokens: log-normal around 80, clipped to 20-300."""
    return max(20, min(300, round(rng.lognormvariate(math.log(80), 0.7))))


def value_for(schema: Any, rng: random.Random, depth: int = 0) -> Any:
    """A JSON value satisfying a simple JSON schema."""
    if not isinstance(schema, dict) or depth > 6:
        return " ".join(sentence(rng)[:3]).rstrip(".,")
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return rng.choice(schema["enum"])
    for key in ("anyOf", "oneOf", "allOf"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            return value_for(options[0], rng, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind is None and "properties" in schema:
        kind = "object"
    return _typed_value(schema, str(kind or "string"), rng, depth)


def _typed_value(schema: Json, kind: str, rng: random.Random, depth: int) -> Any:
    if kind == "object":
        props = schema.get("properties")
        props = props if isinstance(props, dict) else {}
        return {k: value_for(v, rng, depth + 1) for k, v in props.items()}
    if kind == "array":
        count = max(int(schema.get("minItems", 1)), 1)
        count = min(count + rng.randint(0, 1), int(schema.get("maxItems", count + 1)))
        return [value_for(schema.get("items", {}), rng, depth + 1) for _ in range(count)]
    if kind in ("integer", "number"):
        lo = float(schema.get("minimum", 0))
        hi = max(lo, float(schema.get("maximum", lo + 100)))
        if kind == "integer":
            return rng.randint(math.ceil(lo), max(math.ceil(lo), math.floor(hi)))
        return round(rng.uniform(lo, hi), 2)
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "null":
        return None
    return _string_value(schema, rng)


def _string_value(schema: Json, rng: random.Random) -> str:
    fmt = schema.get("format")
    if fmt == "date":
        return f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    if fmt == "email":
        return f"{rng.choice(NOUNS)}@example.com"
    text = " ".join(sentence(rng)[: rng.randint(2, 4)]).rstrip(".,")
    text = text.ljust(int(schema.get("minLength", 0)), "x")
    return text[: int(schema.get("maxLength", len(text)))]


# --- requests -------------------------------------------------------------------------


class BadRequest(Exception):
    """The request is invalid: answered with HTTP 400."""


@dataclass
class SimRequest:
    """What the simulator needs from an OpenAI request."""

    chat: bool
    prompt_tokens: list[str]
    stream: bool = False
    include_usage: bool = False
    max_tokens: int | None = None
    min_tokens: int = 0
    ignore_eos: bool = False
    stop: list[str] = field(default_factory=list)
    json_schema: Json | None = None
    tool: Json | None = None
    continue_text: str | None = None
    model: str = ""
    digest: str = ""
    base_digest: str = ""  # a chat continuation: the digest of the request it continues


def _text_of(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for p in content:
            if isinstance(p, dict) and p.get("type") == "text":
                parts.append(str(p.get("text", "")))
            elif isinstance(p, dict):
                parts.append("<image>")
        return " ".join(parts)
    raise BadRequest("message content must be a string, a list of parts or null")


def _render_message(m: Json) -> str:
    text = _text_of(m.get("content"))
    if m.get("tool_calls"):
        text += " " + json.dumps(m["tool_calls"])
    return f"<|im_start|> {m['role']}\n{text} <|im_end|>\n"


def _check_messages(messages: Any) -> list[Json]:
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty list")
    for m in messages:
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise BadRequest("each message must be an object with a 'role'")
    return messages


def _pick_tool(body: Json, messages: list[Json]) -> Json | None:
    tools = body.get("tools")
    if not tools:
        return None
    if not isinstance(tools, list) or not all(
        isinstance(t, dict) and isinstance(t.get("function"), dict) and t["function"].get("name")
        for t in tools
    ):
        raise BadRequest("'tools' must be a list of {type: function, function: {name, ...}}")
    choice = body.get("tool_choice")
    if choice == "none" or messages[-1]["role"] == "tool":
        return None
    if isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name")
        for t in tools:
            if t["function"]["name"] == name:
                return dict(t["function"])
        raise BadRequest(f"tool_choice names an unknown function {name!r}")
    return dict(tools[0]["function"])


def _json_schema(body: Json) -> Json | None:
    rf = body.get("response_format")
    if not isinstance(rf, dict):
        return None
    if rf.get("type") == "json_object":
        return {}
    if rf.get("type") == "json_schema":
        js = rf.get("json_schema") or {}
        schema = js.get("schema") if isinstance(js, dict) else None
        return schema if isinstance(schema, dict) else {"type": "object"}
    return None


def _limits(body: Json) -> tuple[int | None, int]:
    raw = body.get("max_completion_tokens", body.get("max_tokens"))
    if raw is not None and (not isinstance(raw, int) or isinstance(raw, bool) or raw < 1):
        raise BadRequest("'max_tokens' must be a positive integer")
    min_tokens = body.get("min_tokens") or 0
    if not isinstance(min_tokens, int) or min_tokens < 0:
        raise BadRequest("'min_tokens' must be a non-negative integer")
    return raw, min_tokens


def _stops(body: Json) -> list[str]:
    stop = body.get("stop")
    if stop is None:
        return []
    stops = [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise BadRequest("'stop' must be a string or a list of strings")
    return [s for s in stops if s]


def _digest(body: Json, chat: bool) -> str:
    # max_tokens and stop only cut the same text short, min_tokens only makes it go on:
    # they are not part of the digest
    keys = ("messages", "prompt", "tools", "tool_choice", "response_format", "ignore_eos",
            "continue_final_message")  # fmt: skip
    canon = {k: body.get(k) for k in keys}
    canon["continue_final_message"] = body.get("continue_final_message") or None  # false: unset
    canon["chat"] = chat
    raw = orjson.dumps(canon, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)
    return hashlib.sha256(raw).hexdigest()


def _common(body: Json, chat: bool, tokens: list[str]) -> SimRequest:
    max_tokens, min_tokens = _limits(body)
    opts = body.get("stream_options")
    return SimRequest(
        chat=chat,
        prompt_tokens=tokens,
        stream=bool(body.get("stream")),
        include_usage=isinstance(opts, dict) and bool(opts.get("include_usage")),
        max_tokens=max_tokens,
        min_tokens=min_tokens,
        ignore_eos=bool(body.get("ignore_eos")),
        stop=_stops(body),
        json_schema=_json_schema(body),
        model=str(body.get("model") or ""),
        digest=_digest(body, chat),
    )


def parse_chat(body: Json) -> SimRequest:
    messages = _check_messages(body.get("messages"))
    continuing = bool(body.get("continue_final_message")) and messages[-1]["role"] == "assistant"
    head = messages[:-1] if continuing else messages
    tool = _pick_tool(body, head or messages)  # a continued text answer stays text
    prompt = "".join(_render_message(m) for m in head)
    if body.get("tools"):
        prompt = f"<|im_start|> tools\n{json.dumps(body['tools'])} <|im_end|>\n" + prompt
    continue_text = _text_of(messages[-1].get("content")) if continuing else None
    prompt += "<|im_start|> assistant\n" + (continue_text or "")
    req = _common(body, True, re.findall(r"\S+", prompt))
    req.tool = tool
    req.continue_text = continue_text
    if continuing:
        req.base_digest = _digest({**body, "messages": head, "continue_final_message": None}, True)
    return req


def parse_completion(body: Json) -> SimRequest:
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        tokens = re.findall(r"\S+", prompt)
        text = prompt
    elif isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
        text = "\n".join(prompt)
        tokens = re.findall(r"\S+", text)
    elif isinstance(prompt, list) and prompt and all(isinstance(p, int) for p in prompt):
        tokens, text = [str(p) for p in prompt], ""
    else:
        raise BadRequest("'prompt' must be a string, a list of strings or a list of token ids")
    req = _common(body, False, tokens or [""])
    req.continue_text = text
    return req


# --- what to answer -------------------------------------------------------------------


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
        return _looped(pieces, req, frng)
    if "leak" in faults:
        at = min(len(pieces), frng.randint(8, 24))
        pieces = [*pieces[:at], *LEAK_PIECES, *pieces[at:]]
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


def _looped(pieces: list[str], req: SimRequest, frng: random.Random) -> Plan:
    head = pieces[: frng.randint(8, 20)]
    again = [" " + w for w in sentence(frng)]
    limit = req.max_tokens or LOOP_DEFAULT_TOKENS
    out = list(head)
    while len(out) < limit:
        out += again
    return Plan(out[:limit], "length")


def _json_plan(
    req: SimRequest, rng: random.Random, frng: random.Random, bad: bool, rest: Pieces
) -> Plan:
    if rest is not None:  # the rest of the object a continuation continues
        text = "".join(rest)
        return Plan(split_pieces(_corrupt_json(text, frng) if bad else text), "stop")
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
        text = _corrupt_json(text, frng)
    return Plan(split_pieces(text), "stop")


def _corrupt_json(text: str, frng: random.Random) -> str:
    variant = frng.randrange(3)
    if variant == 0:
        return text[: max(1, len(text) * 2 // 3)]  # truncated
    if variant == 1:
        return text[:-1] + ", }" if text.endswith("}") else text + ","  # trailing comma
    return f"Here is the JSON you asked for:\n```json\n{text}\n```"


def _tool_plan(req: SimRequest, rng: random.Random, frng: random.Random, bad: bool) -> Plan:
    assert req.tool is not None
    name = str(req.tool["name"])
    params = req.tool.get("parameters") or {"type": "object", "properties": {}}
    args = json.dumps(value_for(params, rng))
    if bad and frng.random() < 0.5:
        name = f"{name}_undefined"
    elif bad:
        args = args[:-1] + ', "'
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


# --- metrics --------------------------------------------------------------------------

TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
ITL_BUCKETS = (
    0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.06, 0.08,
    0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8,
)  # fmt: skip
E2E_BUCKETS = (*TTFT_BUCKETS, 600, 1200, 1800, 2400)
QUEUE_BUCKETS = (0, 0.1, 0.2, 0.5, 1, 2, 3, 4, 5, 10, 15, 20, 30, 40, 50, 60, 100, 200, 300)


def _num(v: float) -> str:
    return repr(float(v)) if math.isfinite(v) else ("+Inf" if v > 0 else "-Inf")


class Histogram:
    """A Prometheus histogram (cumulative buckets rendered on demand)."""

    def __init__(self, name: str, doc: str, buckets: Sequence[float]):
        self.name, self.doc = name, doc
        self.bounds = [float(b) for b in buckets]
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        i = next((i for i, b in enumerate(self.bounds) if value <= b), len(self.bounds))
        self.counts[i] += 1
        self.sum += value
        self.count += 1

    def render(self, labels: str) -> list[str]:
        lines = [f"# HELP {self.name} {self.doc}", f"# TYPE {self.name} histogram"]
        total = 0
        for bound, n in zip([*self.bounds, math.inf], self.counts, strict=True):
            total += n
            lines.append(f'{self.name}_bucket{{{labels},le="{_num(bound)}"}} {_num(total)}')
        lines.append(f"{self.name}_sum{{{labels}}} {_num(self.sum)}")
        lines.append(f"{self.name}_count{{{labels}}} {_num(self.count)}")
        return lines


@dataclass
class Metrics:
    """SGLang's metric names (python/sglang/srt/metrics/collector.py)."""

    prompt_tokens: float = 0
    generation_tokens: float = 0
    cached_tokens: float = 0
    requests: float = 0
    aborted: float = 0
    ttft: Histogram = field(
        default_factory=lambda: Histogram(
            "sglang:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            TTFT_BUCKETS,
        )
    )
    itl: Histogram = field(
        default_factory=lambda: Histogram(
            "sglang:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            ITL_BUCKETS,
        )
    )
    e2e: Histogram = field(
        default_factory=lambda: Histogram(
            "sglang:e2e_request_latency_seconds",
            "Histogram of End-to-end request latency in seconds",
            E2E_BUCKETS,
        )
    )
    queue: Histogram = field(
        default_factory=lambda: Histogram(
            "sglang:queue_time_seconds", "Histogram of queueing time in seconds.", QUEUE_BUCKETS
        )
    )

    def render(self, model: str, replica: Replica) -> str:
        labels = f'model_name="{model}"'
        prof = replica.profile
        batch = replica.running
        gauges = {
            "num_running_reqs": ("The number of running requests.", batch),
            "num_queue_reqs": ("The number of requests in the waiting queue.", replica.queued),
            "cache_hit_rate": ("The prefix cache hit rate.", self.hit_rate()),
            "gen_throughput": (
                "The generation throughput (token/s).",
                batch * 1000.0 / prof.tpot_ms(batch) if batch else 0.0,
            ),
            "spec_accept_length": (
                "The average acceptance length of speculative decoding.",
                prof.accept_len(max(batch, 1)) if prof.speculative else 0.0,
            ),
            "num_used_tokens": ("The number of used tokens.", replica.cache.size_tokens),
            "token_usage": (
                "The token usage.",
                replica.cache.size_tokens / prof.max_total_num_tokens,
            ),
            "max_total_num_tokens": (
                "Maximum total number of tokens in the KV cache pool.",
                prof.max_total_num_tokens,
            ),
        }
        counters = {
            "prompt_tokens": ("Number of prefill tokens processed.", self.prompt_tokens),
            "generation_tokens": ("Number of generation tokens processed.", self.generation_tokens),
            "cached_tokens": ("Number of cached prompt tokens.", self.cached_tokens),
            "num_requests": ("Number of requests processed.", self.requests),
            "num_aborted_requests": ("Number of requests aborted.", self.aborted),
        }
        lines: list[str] = []
        for name, (doc, value) in gauges.items():
            lines += [f"# HELP sglang:{name} {doc}", f"# TYPE sglang:{name} gauge"]
            lines.append(f"sglang:{name}{{{labels}}} {_num(value)}")
        for name, (doc, value) in counters.items():
            lines += [f"# HELP sglang:{name} {doc}", f"# TYPE sglang:{name} counter"]
            lines.append(f"sglang:{name}_total{{{labels}}} {_num(value)}")
        for h in (self.ttft, self.itl, self.e2e, self.queue):
            lines += h.render(labels)
        return "\n".join(lines) + "\n"

    def hit_rate(self) -> float:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


# --- answer shapes --------------------------------------------------------------------


def _error_body(status: int, message: str, kind: str) -> Json:
    return {"error": {"message": message, "type": kind, "param": None, "code": status}}


def _error(
    status: int, message: str, kind: str, headers: dict[str, str] | None = None
) -> web.Response:
    body = orjson.dumps(_error_body(status, message, kind))
    return web.Response(status=status, body=body, content_type="application/json", headers=headers)


@dataclass
class Shape:
    """OpenAI object shapes for one answer (chat or text completion)."""

    chat: bool
    rid: str
    model: str
    created: int = field(default_factory=lambda: int(time.time()))

    def chunk(self, choice: Json, **extra: Any) -> Json:
        kind = "chat.completion.chunk" if self.chat else "text_completion"
        base = {"id": self.rid, "object": kind, "created": self.created, "model": self.model}
        return {**base, "choices": [choice], **extra}

    def _choice(self, delta: Json | None, text: str, finish: str | None) -> Json:
        if self.chat:
            return {"index": 0, "delta": delta or {}, "logprobs": None, "finish_reason": finish}
        return {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}

    def opening(self, plan: Plan) -> list[Json]:
        """Chunks sent with the first token: the role, then a tool call's header."""
        if not self.chat:
            return []
        out = [self.chunk(self._choice({"role": "assistant", "content": ""}, "", None))]
        if plan.tool_name is not None:
            call = {
                "index": 0,
                "id": plan.tool_id,
                "type": "function",
                "function": {"name": plan.tool_name, "arguments": ""},
            }
            out.append(self.chunk(self._choice({"tool_calls": [call]}, "", None)))
        return out

    def delta(self, plan: Plan, text: str) -> Json:
        if plan.tool_name is not None:
            call = {"index": 0, "function": {"arguments": text}}
            return self.chunk(self._choice({"tool_calls": [call]}, text, None))
        return self.chunk(self._choice({"content": text}, text, None))

    def finish(self, plan: Plan, sim: Json) -> Json:
        return self.chunk(self._choice({}, "", plan.finish), sim=sim)

    def usage_chunk(self, usage: Json) -> Json:
        chunk = self.chunk({}, usage=usage)
        chunk["choices"] = []
        return chunk

    def full(self, plan: Plan, usage: Json, sim: Json) -> Json:
        text = "".join(plan.pieces)
        base = {"id": self.rid, "created": self.created, "model": self.model}
        tail = {"usage": usage, "sim": sim}
        if not self.chat:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": plan.finish}
            return {**base, "object": "text_completion", "choices": [choice], **tail}
        message: Json = {"role": "assistant", "content": text}
        if plan.tool_name is not None:
            call = {"name": plan.tool_name, "arguments": text}
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": plan.tool_id, "type": "function", "function": call}],
            }
        choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": plan.finish}
        return {**base, "object": "chat.completion", "choices": [choice], **tail}


# --- one request in flight ------------------------------------------------------------


@dataclass
class Flight:
    """Timing state of one admitted request (model seconds)."""

    replica: Replica
    adm: Admission
    plan: Plan
    burst: random.Random
    t: float  # model time of the next emission
    prompt_len: int = 0
    ttft_s: float = 0.0
    produced: int = 0
    steps: int = 0
    decode_s: float = 0.0
    busy_seen: float = 0.0
    holds_slot: bool = True

    def release(self) -> None:
        if self.holds_slot:
            self.holds_slot = False
            self.replica.release()

    def next_steps(self, limit: int, min_sleep: float) -> tuple[int, float]:
        """Coalesce decode steps into one wake-up: (tokens, model seconds)."""
        prof, rep = self.replica.profile, self.replica
        tokens, dt = 0, 0.0
        while self.produced + tokens < limit and (tokens == 0 or dt * rep.time_scale < min_sleep):
            b = rep.running
            mean = prof.accept_len(b)
            k = int(mean) + (1 if self.burst.random() < mean - int(mean) else 0)
            tokens += max(k, 1)
            dt += prof.step_ms(b) / 1000.0
            self.steps += 1
        stall = rep.prefill_busy_s - self.busy_seen  # decode waits while others prefill
        self.busy_seen = rep.prefill_busy_s
        self.decode_s += dt + stall
        self.t += dt + stall
        return min(tokens, limit - self.produced), dt

    def figures(self) -> Json:
        prof, adm = self.replica.profile, self.adm
        decoded = max(self.produced - 1, 0)
        return {
            "profile": prof.name,
            "batch": adm.batch,
            "queue_ms": round(adm.queue_s * 1000, 3),
            "prefill_ms": round((adm.lane_wait_s + adm.prefill_s) * 1000, 3),
            "cached_tokens": adm.cached_tokens,
            "ttft_ms": round(self.ttft_s * 1000, 3),
            "tpot_ms": round(self.decode_s * 1000 / decoded, 3) if decoded else 0.0,
            "tpot_model_ms": round(prof.tpot_ms(adm.batch), 3),
            "e2e_ms": round((self.ttft_s + self.decode_s) * 1000, 3),
            "steps": self.steps,
            "accept_len": round(decoded / self.steps, 3) if self.steps else 0.0,
        }


Emit = Callable[[int, int], Awaitable[None]]


class SimServer:
    """The aiohttp application of one simulated replica."""

    def __init__(self, cfg: SimConfig):
        self.cfg = cfg
        self.profile: Profile = make_profile(cfg.profile, cfg.max_running_requests)
        if cfg.max_total_tokens:
            self.profile = _with_pool(self.profile, cfg.max_total_tokens)
        self.replica = Replica(self.profile, cfg.time_scale)
        self.metrics = Metrics()
        self.fault_rng = random.Random(f"{cfg.seed}:faults")
        self.counter = 0

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        app.router.add_get("/health_generate", self.health)
        app.router.add_get("/get_server_info", self.server_info)
        app.router.add_get("/get_model_info", self.model_info)
        app.router.add_get("/metrics", self.metrics_text)
        return app

    # --- small endpoints

    async def health(self, request: web.Request) -> web.StreamResponse:
        return web.Response(status=200)

    async def models(self, request: web.Request) -> web.StreamResponse:
        name = self.cfg.served_model_name
        card = {
            "id": name,
            "object": "model",
            "created": int(time.time()),
            "owned_by": "sglang",
            "root": name,
            "max_model_len": self.cfg.context_length,
        }
        return web.json_response({"object": "list", "data": [card]}, dumps=_dumps)

    async def model_info(self, request: web.Request) -> web.StreamResponse:
        info = {"model_path": self.cfg.served_model_name, "is_generation": True}
        return web.json_response(info, dumps=_dumps)

    async def server_info(self, request: web.Request) -> web.StreamResponse:
        return web.json_response(self.server_settings(), dumps=_dumps)

    def server_settings(self) -> Json:
        p, cfg = self.profile, self.cfg
        spec = p.speculative
        return {
            "model_path": cfg.served_model_name,
            "served_model_name": cfg.served_model_name,
            "version": "sim",
            "dtype": "bfloat16",
            "quantization": p.quantization,
            "kv_cache_dtype": p.kv_cache_dtype,
            "speculative_algorithm": p.speculative_algorithm,
            "speculative_num_steps": 5 if spec else None,
            "speculative_eagle_topk": 4 if spec else None,
            "speculative_num_draft_tokens": 8 if spec else None,
            "max_running_requests": p.max_running_requests,
            "max_total_num_tokens": p.max_total_num_tokens,
            "chunked_prefill_size": p.chunked_prefill_size,
            "context_length": cfg.context_length,
            "schedule_policy": "fcfs",
            "disable_radix_cache": False,
            "page_size": 1,
            "tp_size": 1,
            "dp_size": 1,
            "enable_metrics": True,
            "random_seed": cfg.seed,
            "internal_states": [{"avg_spec_accept_length": p.accept_len(1) if spec else None}],
            "sim": {
                "profile": p.name,
                "time_scale": cfg.time_scale,
                "faults": cfg.faults,
                "step_ms_batch1": round(p.step_ms(1), 3),
                "tpot_ms_batch1": round(p.tpot_ms(1), 3),
                "accept_len_batch1": round(p.accept_len(1), 3),
                "prefill_tokens_per_s": p.prefill_tok_s,
                "batch_alpha": p.batch_alpha,
            },
        }

    async def metrics_text(self, request: web.Request) -> web.StreamResponse:
        text = self.metrics.render(self.cfg.served_model_name, self.replica)
        return web.Response(text=text, content_type="text/plain", charset="utf-8")

    # --- generation endpoints

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, parse_chat)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, parse_completion)

    async def _generate(
        self, request: web.Request, parse: Callable[[Json], SimRequest]
    ) -> web.StreamResponse:
        try:
            body = await request.json(loads=orjson.loads)
            if not isinstance(body, dict):
                raise BadRequest("the body must be a JSON object")
            req = parse(body)
            self._check_context(req)
            faults = self._faults(request.headers.get("x-sim-fault", ""), req.digest)
        except (BadRequest, orjson.JSONDecodeError, UnicodeDecodeError) as e:
            return _error(400, str(e) or "invalid JSON body", "BadRequestError")
        return await self._answer(request, req, faults)

    def _check_context(self, req: SimRequest) -> None:
        need = len(req.prompt_tokens) + (req.max_tokens or 0)
        if need > self.cfg.context_length:
            raise BadRequest(
                f"Requested token count exceeds the model's maximum context length of "
                f"{self.cfg.context_length} tokens ({need} requested)."
            )

    def _faults(self, header: str, digest: str) -> set[str]:
        """Faults of this request: drawn by rate (always, to keep the sequence) + header."""
        rng = self.fault_rng
        if self.cfg.fault_draw == "content":
            rng = random.Random(f"{self.cfg.seed}:{digest}:faults")
        drawn = {n for n, rate in sorted(self.cfg.faults.items()) if rng.random() < rate}
        asked = {f.strip() for f in header.split(";") if f.strip()}
        unknown = asked - set(FAULTS) - {"none"}
        if unknown:
            raise BadRequest(f"unknown x-sim-fault {sorted(unknown)}; known: {', '.join(FAULTS)}")
        if "none" in asked:
            return asked - {"none"}
        return drawn | asked

    async def _answer(
        self, request: web.Request, req: SimRequest, faults: set[str]
    ) -> web.StreamResponse:
        if "500" in faults:
            return _error(500, "simulated internal server error", "InternalServerError")
        if "429" in faults:
            retry = {"Retry-After": f"{self.cfg.retry_after:g}"}
            return _error(429, "simulated rate limit", "RateLimitError", retry)
        if "hang" in faults:
            await _forever()
        self.counter += 1
        prefix = "chatcmpl" if req.chat else "cmpl"
        rid = f"{prefix}-{self.counter:06x}{req.digest[:18]}"
        shape = Shape(req.chat, rid, req.model or self.cfg.served_model_name)
        plan = make_plan(req, self.cfg.seed, faults)
        arrival = self.replica.now()
        try:
            waited = await self.replica.acquire()
        except asyncio.CancelledError:
            self.metrics.aborted += 1
            raise
        flight = self._admit(req, plan, arrival, waited)
        try:
            headers = self._headers(flight, faults)
            if req.stream:
                return await self._stream(request, req, flight, shape, headers)
            return await self._blocking(request, req, flight, shape, headers)
        except (asyncio.CancelledError, ConnectionError):
            self.metrics.aborted += 1
            raise
        finally:
            flight.release()

    def _admit(self, req: SimRequest, plan: Plan, arrival: float, waited: bool) -> Flight:
        queue_s = self.replica.now() - arrival if waited else 0.0
        adm = self.replica.admit(req.prompt_tokens, queue_s)
        ttft = adm.queue_s + adm.lane_wait_s + adm.prefill_s
        if plan.slow_ttft:
            ttft += max(SLOW_TTFT_FACTOR * ttft - ttft, SLOW_TTFT_MIN_S)
        m = self.metrics
        m.prompt_tokens += len(req.prompt_tokens)
        m.cached_tokens += adm.cached_tokens
        m.requests += 1
        m.queue.observe(adm.queue_s)
        burst = random.Random(f"{self.cfg.seed}:{req.digest}:burst")
        start = arrival + ttft
        flight = Flight(self.replica, adm, plan, burst, start, len(req.prompt_tokens), ttft)
        flight.busy_seen = self.replica.prefill_busy_s
        return flight

    def _headers(self, f: Flight, faults: set[str]) -> dict[str, str]:
        prof, adm = self.profile, f.adm
        return {
            "x-sim-profile": prof.name,
            "x-sim-batch": str(adm.batch),
            "x-sim-queue-ms": f"{adm.queue_s * 1000:.3f}",
            "x-sim-prefill-ms": f"{(adm.lane_wait_s + adm.prefill_s) * 1000:.3f}",
            "x-sim-cached-tokens": str(adm.cached_tokens),
            "x-sim-prompt-tokens": str(f.prompt_len),
            "x-sim-ttft-ms": f"{f.ttft_s * 1000:.3f}",
            "x-sim-tpot-ms": f"{prof.tpot_ms(adm.batch):.3f}",
            "x-sim-accept-len": f"{prof.accept_len(adm.batch):.3f}",
            "x-sim-faults": ";".join(sorted(faults)) or "none",
        }

    async def _run(self, f: Flight, limit: int, emit: Emit | None, min_sleep: float) -> None:
        """Sleep through prefill and decode of the first ``limit`` pieces, emitting them."""
        rep, m = self.replica, self.metrics
        if f.produced == 0:
            await rep.sleep_until(f.t)  # queue + prefill: the first token comes from prefill
            m.ttft.observe(f.ttft_s)
            if limit > 0:
                await self._emit(f, emit, 1)
        while f.produced < limit:
            n, dt = f.next_steps(limit, min_sleep)
            await rep.sleep_until(f.t)
            m.itl.observe(dt / n)
            await self._emit(f, emit, n)

    async def _emit(self, f: Flight, emit: Emit | None, n: int) -> None:
        if emit is not None:
            await emit(f.produced, f.produced + n)
        f.produced += n
        self.metrics.generation_tokens += n

    def _usage(self, req: SimRequest, f: Flight) -> Json:
        p = len(req.prompt_tokens)
        return {
            "prompt_tokens": p,
            "completion_tokens": f.produced,
            "total_tokens": p + f.produced,
            "prompt_tokens_details": {"cached_tokens": f.adm.cached_tokens},
        }

    def _done(self, req: SimRequest, f: Flight) -> Json:
        """A normal finish: cache prompt + answer (as the next turn renders it), figures."""
        if f.plan.tool_name is None:
            answer = "".join(f.plan.pieces).split()
            tail = ["<|im_end|>"] if req.chat else []
            self.replica.cache.insert([*req.prompt_tokens, *answer, *tail])
        sim = f.figures()
        self.metrics.e2e.observe(sim["e2e_ms"] / 1000.0)
        return sim

    async def _blocking(
        self,
        request: web.Request,
        req: SimRequest,
        f: Flight,
        shape: Shape,
        headers: dict[str, str],
    ) -> web.StreamResponse:
        plan = f.plan
        limit = plan.end_after if plan.end else len(plan.pieces)
        await self._run(f, limit, None, MIN_SLEEP_BLOCKING_S)
        if plan.end == "stall":
            f.release()
            await _forever()
        if plan.end == "cut":
            _close(request)  # aiohttp's write of this answer then fails quietly
            return web.Response(status=200, headers=headers)
        if plan.end == "error_event":
            return _error(500, "simulated engine error", "InternalServerError", headers)
        sim = self._done(req, f)
        headers.update(_final_headers(sim))
        body = orjson.dumps(shape.full(plan, self._usage(req, f), sim))
        return web.Response(body=body, content_type="application/json", headers=headers)

    async def _stream(
        self,
        request: web.Request,
        req: SimRequest,
        f: Flight,
        shape: Shape,
        headers: dict[str, str],
    ) -> web.StreamResponse:
        resp = web.StreamResponse(headers={**headers, "Cache-Control": "no-cache"})
        resp.content_type = "text/event-stream"
        await resp.prepare(request)
        plan = f.plan

        async def emit(lo: int, hi: int) -> None:
            events = shape.opening(plan) if lo == 0 else []
            events.append(shape.delta(plan, "".join(plan.pieces[lo:hi])))
            await resp.write(b"".join(_sse(e) for e in events))

        limit = plan.end_after if plan.end else len(plan.pieces)
        await self._run(f, limit, emit, MIN_SLEEP_STREAM_S)
        if plan.end is not None:
            return await self._stream_fault(request, resp, f)
        opening = shape.opening(plan) if f.produced == 0 else []  # an empty answer
        finish = shape.finish(plan, self._done(req, f))
        await resp.write(b"".join(_sse(e) for e in [*opening, finish]))
        if req.include_usage:
            await resp.write(_sse(shape.usage_chunk(self._usage(req, f))))
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def _stream_fault(
        self, request: web.Request, resp: web.StreamResponse, f: Flight
    ) -> web.StreamResponse:
        if f.plan.end == "stall":
            f.release()
            await _forever()
        if f.plan.end == "cut":
            _close(request)  # aiohttp's write_eof then fails quietly: no last chunk
            return resp
        err = _error_body(500, "simulated engine error mid-stream", "InternalServerError")
        await resp.write(_sse(err) + b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp


# --- helpers and entry point ----------------------------------------------------------


def _dumps(obj: Any) -> str:
    return orjson.dumps(obj).decode()


def _sse(obj: Json) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def _final_headers(sim: Json) -> dict[str, str]:
    return {"x-sim-e2e-ms": f"{sim['e2e_ms']:.3f}", "x-sim-steps": str(sim["steps"])}


async def _forever() -> None:
    """Never return (until the client goes away and the handler is cancelled)."""
    await asyncio.Event().wait()


def _close(request: web.Request) -> None:
    """Drop the connection as it is: no end of body, no [DONE]."""
    if request.transport is not None:
        request.transport.close()


def _with_pool(profile: Profile, tokens: int) -> Profile:
    return replace(profile, max_total_num_tokens=tokens)


async def serve(cfg: SimConfig, ready: Callable[[], None] | None = None) -> None:
    """Serve until SIGINT/SIGTERM."""
    server = SimServer(cfg)
    runner = web.AppRunner(
        server.app(), access_log=None, handler_cancellation=True, shutdown_timeout=0.5
    )
    await runner.setup()
    await web.TCPSite(runner, cfg.host, cfg.port, shutdown_timeout=0.5).start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    print(
        f"sim: {cfg.profile} replica {cfg.served_model_name!r} on http://{cfg.host}:{cfg.port}"
        f" (seed {cfg.seed}, time scale {cfg.time_scale:g})",
        flush=True,
    )
    if ready is not None:
        ready()
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


def sim_main(argv: list[str] | None = None) -> int:
    """``python -m engines.sim --port P ...``; returns the exit status."""
    cfg = parse_args(argv)
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is optional
        asyncio.run(serve(cfg))
    else:
        uvloop.run(serve(cfg))
    return 0


if __name__ == "__main__":
    raise SystemExit(sim_main())
