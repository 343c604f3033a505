"""A cached answer, and the judgement that lets one in.

An entry is the whole answer as the client's JSON (``chat.completion`` or
``text_completion``, assembled from the stream when the client streamed it), with the
tier that produced it, the tokens it cost and when it was stored. Encoded as one JSON line
of metadata, a newline, then the answer's bytes untouched (orjson never writes a raw
newline), so reading one back costs one parse of the small part.

:func:`refusal` is the gate: every choice complete (``finish_reason`` ``stop`` or
``tool_calls``) and every check of the rule passed on every choice, run again here on the
answer the client got, whatever the attempt loop did on the way (a stream's live phase
runs only some checks; a continuation's text is judged whole).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.checks.base import Check, RequestFacts, run_checks
from gateway.dispatch.assemble import outputs

COMPLETE = frozenset(("stop", "tool_calls"))


@dataclass(frozen=True, slots=True)
class Entry:
    answer: bytes  # the client's JSON answer (chat.completion / text_completion)
    kind: str  # "chat" | "completions": the answer's shape
    tier: str  # the tier that produced it (a fallback's answer: the fallback's tier)
    prompt_tokens: int
    completion_tokens: int
    stored_at: float = field(default_factory=time.time)  # unix seconds
    expires_at: float = 0.0

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def age(self, now: float | None = None) -> float:
        return max(0.0, (time.time() if now is None else now) - self.stored_at)

    def meta(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "tier": self.tier,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "stored_at": self.stored_at,
            "expires_at": self.expires_at,
        }

    def encode(self) -> bytes:
        return orjson.dumps(self.meta()) + b"\n" + self.answer

    @classmethod
    def decode(cls, raw: bytes) -> Entry | None:
        """An entry from :meth:`encode`'s bytes; None when they are not one (a foreign or
        damaged value is a miss, never an error)."""
        head, sep, answer = raw.partition(b"\n")
        if not sep:
            return None
        try:
            m = orjson.loads(head)
            return cls(
                answer,
                str(m["kind"]),
                str(m["tier"]),
                int(m["prompt_tokens"]),
                int(m["completion_tokens"]),
                float(m["stored_at"]),
                float(m["expires_at"]),
            )
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            return None

    @staticmethod
    def head(raw: bytes) -> dict[str, Any] | None:
        """The metadata alone (admin listings: never the answer's text)."""
        try:
            m = orjson.loads(raw.partition(b"\n")[0])
        except orjson.JSONDecodeError:
            return None
        return m if isinstance(m, dict) else None


def refusal(kind: str, answer: Any, checks: Sequence[Check], facts: RequestFacts) -> str | None:
    """Why ``answer`` may not be kept (None: it may): incomplete, or a check failed."""
    if not isinstance(answer, dict) or not isinstance(answer.get("choices"), list):
        return "not a completion"
    if not answer["choices"]:
        return "no choices"
    for ch in answer["choices"]:
        if not isinstance(ch, dict) or ch.get("finish_reason") not in COMPLETE:
            why = ch.get("finish_reason") if isinstance(ch, dict) else None
            return f"finish_reason {why}"
    try:
        outs = outputs(kind, answer)
    except (KeyError, TypeError, AttributeError):
        return "malformed choices"
    for out in outs:
        bad = run_checks(checks, out, facts)
        if bad is not None:
            return f"check {bad.check}"
    return None
