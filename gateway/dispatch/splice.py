"""Splicing a continuation stream into the first one, as the client sees it.

Continuation events are dressed as the first stream's (same ``id``/``model``/``created``),
role-only chunks are dropped, the prefix an engine repeats in front of its continuation
is stripped (llama.cpp does; SGLang and vLLM don't), and the usage chunk adds both tiers
up. A restarted answer (``gateway.dispatch.finish``) is spliced the same way: the text the
client has is its "echo", skipped where the new answer begins with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from gateway.upstream.sse import StreamState

DONE = b"data: [DONE]\n\n"


@dataclass(frozen=True, slots=True)
class Restart:
    """A stream spliced in is a new answer, not a continuation (``gateway.dispatch.finish``):
    it goes on after the text the client has where it begins with at least that text's
    first ``good`` characters (the text before a loop), else whole, after ``separator``."""

    good: int
    separator: str


def _common(a: str, b: str) -> int:
    """The length of the prefix ``a`` and ``b`` share."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class Splice:
    __slots__ = (
        "_chat",
        "_echo",
        "_first",
        "_first_tokens",
        "_first_usage",
        "_held",
        "_restart",
        "diverged",
        "merged",
        "wants_usage",
    )

    def __init__(
        self,
        first: StreamState,
        prefix: str,
        sent_tokens: int,
        wants_usage: bool,
        restart: Restart | None = None,
    ):
        """``prefix``: what the engine may repeat in front of its text (a restart: all the
        text the client has)."""
        self._first = first
        self._chat = first.chat
        self._echo: str | None = prefix or None  # the prefix, while it may still be repeated
        self._held = ""  # continuation text that matched the prefix so far
        self._first_tokens = sent_tokens
        self._first_usage = first.usage
        self.wants_usage = wants_usage
        self.merged: dict[str, Any] | None = None
        self._restart = restart
        self.diverged = False  # a restart that began otherwise went out whole

    def rewrite(self, payloads: list[bytes]) -> bytes:
        out: list[bytes] = []
        first = self._first
        for p in payloads:
            if p == b"[DONE]":
                out.append(DONE)
                continue
            obj: dict[str, Any] = orjson.loads(p)
            obj["id"], obj["model"], obj["created"] = first.id, first.model, first.created
            choices = obj.get("choices") or []
            if self._echo is not None and choices:
                self._strip_echo(choices[0])
            if choices and all(_role_only(c) for c in choices):
                continue
            if obj.get("usage") and not choices:
                usage = self.merge_usage(obj["usage"])
                if not self.wants_usage:
                    continue
                obj["usage"] = usage
            out.append(b"data: " + orjson.dumps(obj) + b"\n\n")
        return b"".join(out)

    def _strip_echo(self, choice: Any) -> None:
        """Drop the prefix when the engine repeats it in front of its continuation. Text
        that merely *starts* like the prefix is held, not lost: at the first mismatch it
        is given back."""
        if not isinstance(choice, dict):
            return
        holder = choice.get("delta") if self._chat else choice
        key = "content" if self._chat else "text"
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
            r = self._restart
            if r is not None:  # a restart: after the good text it shares, or whole
                k = _common(text, echo)
                if k >= max(r.good, 1):
                    holder[key] = text[k:]
                else:
                    holder[key], self.diverged = r.separator + text, True

    def merge_usage(self, u2: dict[str, Any]) -> dict[str, Any]:
        self.merged = merge_usage(self._first_usage, self._first_tokens, u2)
        return self.merged


def merge_usage(u1: dict[str, Any] | None, c1: int, u2: dict[str, Any]) -> dict[str, Any]:
    """Both tiers' usage. The first tier's own usage chunk never came (it broke off): its
    completion tokens are the events it gave (one token each), its prompt tokens the
    continuation's prompt minus the prefix it was given."""
    p2 = int(u2.get("prompt_tokens") or 0)
    p1 = int((u1 or {}).get("prompt_tokens") or max(0, p2 - c1))
    c2 = int(u2.get("completion_tokens") or 0)
    return {
        **u2,
        "prompt_tokens": p1 + p2,
        "completion_tokens": c1 + c2,
        "total_tokens": p1 + p2 + c1 + c2,
    }


def _role_only(choice: Any) -> bool:
    if not isinstance(choice, dict) or choice.get("finish_reason"):
        return False
    delta = choice.get("delta")
    if not isinstance(delta, dict):
        return False
    return not any(v for k, v in delta.items() if k != "role")
