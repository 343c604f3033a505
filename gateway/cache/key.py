"""The cache key: who asks, exactly what, and under which rules and route.

Pure. Two requests share a key only when all of these are equal:

* the tenant (``-`` without tenancy): one tenant's answer is never another's;
* the endpoint (chat, text completion, Responses) and the request body, normalised:
  ``stream``, ``stream_options`` and ``user`` left out (they change how the answer is
  delivered, not what it says), ``n: 1`` as absent, whole-number sampling fields as floats
  (``0`` and ``0.0`` are one temperature). Everything else counts: model alias, messages,
  tools, tool choice, response format, sampling fields, seed, ``n``, ``max_tokens``, and
  fields the gateway does not know (they go to the engine, so they may change the answer);
* the route: the rules' digest (any change to the rules is a new cache), the rule and
  canary arm that matched, the tier hint, the checks, what the last tier does on a failed
  check, the policy that changes the answer (forced tier, allowed tiers, fallback off,
  the tenant's own rules), and the model every tier serves.

A semantic scope is the same key with the last user turn left out, plus the task: near
duplicates are compared only inside it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.routing.router import RouteDecision
from gateway.rules.schema import Rules
from gateway.tenancy.tenants import Policy

IGNORED = frozenset(("stream", "stream_options", "user"))
FLOAT_FIELDS = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
)
NO_TENANT = "-"
_HOLE = "\x00"  # where the last user turn was, in a semantic scope


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def deterministic(body: Mapping[str, Any]) -> bool:
    """The client asked for one answer: ``temperature: 0``, or a ``seed``."""
    t = body.get("temperature")
    seed = body.get("seed")
    return (_number(t) and t == 0) or (isinstance(seed, int) and not isinstance(seed, bool))


def normalised(body: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in body.items() if k not in IGNORED}
    if out.get("n") == 1:
        del out["n"]
    for f in FLOAT_FIELDS:
        v = out.get(f)
        if isinstance(v, int) and not isinstance(v, bool):
            out[f] = float(v)
    return out


def rules_digest(rules: Rules) -> str:
    """The rules as they decide answers: everything but where the engines are (replicas
    that reach the same tiers through other addresses share one cache)."""
    data = rules.model_dump(mode="json")
    for tier in data["tiers"].values():
        tier.pop("endpoints", None)
    return _digest(data)


@dataclass(frozen=True, slots=True)
class Route:
    """What of the routing decision and the policy a cached answer depends on."""

    rules: str  # :func:`rules_digest`
    decision: RouteDecision
    policy: Policy
    served: Mapping[str, str]  # tier -> the model its engines serve

    def parts(self) -> list[Any]:
        d, p = self.decision, self.policy
        own = [r.model_dump(mode="json") for r in p.rules] if p.rules else None
        return [
            self.rules,
            d.rule,
            d.arm,
            d.cls.tier_hint,
            list(d.checks),
            d.on_last_failure,
            p.forced_tier,
            list(p.allowed_tiers) if p.allowed_tiers is not None else None,
            p.fallback_enabled,
            own,
            sorted(self.served.items()),
        ]


def exact_key(tenant: str, kind: str, body: Mapping[str, Any], route: Route) -> str:
    return _digest(["exact", tenant, kind, normalised(body), route.parts()])


def last_user_text(body: Mapping[str, Any]) -> tuple[int, str] | None:
    """The last user turn of a chat body (its index and text), or a text prompt (-1);
    None when there is none to compare (token ids, a non-text turn)."""
    msgs = body.get("messages")
    if isinstance(msgs, list):
        for i in range(len(msgs) - 1, -1, -1):
            m = msgs[i]
            if isinstance(m, dict) and m.get("role") == "user":
                return (i, text) if (text := _text(m.get("content"))) else None
        return None
    prompt = body.get("prompt")
    return (-1, prompt) if isinstance(prompt, str) and prompt else None


def scope_key(
    tenant: str, kind: str, body: Mapping[str, Any], route: Route, task: str, at: int
) -> str:
    """The exact key's parts with the last user turn (at ``at``; -1: the prompt) left out."""
    rest = normalised(body)
    if at < 0:
        rest["prompt"] = _HOLE
    else:
        msgs = list(rest["messages"])
        msgs[at] = {**msgs[at], "content": _HOLE}
        rest["messages"] = msgs
    return _digest(["scope", tenant, kind, task, rest, route.parts()])


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(
        isinstance(p, dict) and p.get("type", "text") == "text" for p in content
    ):
        return "\n".join(str(p.get("text", "")) for p in content)
    return ""  # images, audio: not compared by meaning


def _digest(parts: Any) -> str:
    raw = orjson.dumps(parts, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)
    return hashlib.blake2b(raw, digest_size=16).hexdigest()
