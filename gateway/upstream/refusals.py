"""What an engine's 4xx says: its message, and whether it is a context-window overflow.

Engines answer a refused request in shapes of their own: OpenAI's envelope
``{"error": {"message", "type", "param", "code"}}``, vLLM's and SGLang's flat
``{"object": "error", "message", ...}``, llama.cpp's envelope with ``n_ctx``, FastAPI's
``{"detail": ...}``, Anthropic's ``{"type": "error", "error": {...}}``, plain text.
:func:`refusal` reads any of them into one :class:`Refusal`, which the gateway answers in
the client's own format with the engine's message kept.

"The prompt does not fit my context window" is told apart from the other 400s
(:func:`context_exceeded`): OpenAI's code ``context_length_exceeded``; vLLM "This model's
maximum context length is 4096 tokens" or "... longer than the maximum model length of
4096"; SGLang "... longer than the model's context length (4096 tokens)"; llama.cpp's
``exceed_context_size_error`` with ``n_ctx``; LiteLLM's ``ContextWindowExceededError``;
Anthropic's "prompt is too long". Another tier's window may be larger, so such an answer
moves the request on (:class:`~gateway.upstream.failures.ContextExceeded`), where any other
400 is the request's own fault. The window the engine names, where it names one, is read
too: the tier learns it, and a later request that cannot fit skips the tier unsent.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import orjson

_STATUSES = frozenset((400, 413, 422))
_SAYS = re.compile(
    rb"context[_ ]length|context[_ ]window|context[_ ]size|exceed_context|maximum model length"
    rb"|max_model_len|prompt is too long|input is too long for",
    re.IGNORECASE,
)
# the window after the words that name it: "context length (4096 tokens)", "maximum context
# length is 4096", "maximum model length of 4096", "n_ctx": 4096
_WINDOW = re.compile(
    rb"(?:context[_ ]length|context[_ ]window|context[_ ]size|model length|max_model_len|n_ctx)"
    rb"[^0-9.]{0,24}?(\d{3,9})\b",
    re.IGNORECASE,
)
_HEAD = 4096  # the part of an error body searched (an engine's error is short)
_MAX_MESSAGE = 2000


def context_exceeded(status: int, body: bytes) -> tuple[bool, int | None]:
    """Whether an engine's answer says the request does not fit its context window, and the
    window it names (None when it names none)."""
    if status not in _STATUSES:
        return False, None
    head = body[:_HEAD]
    if not _SAYS.search(head):
        return False, None
    m = _WINDOW.search(head)
    return True, int(m.group(1)) if m else None


@dataclass(frozen=True, slots=True)
class Refusal:
    """An engine's 4xx as its fields: ``kind`` and ``code`` as the engine named them (None
    where it named none, or named them by number)."""

    message: str
    kind: str | None = None
    code: str | None = None
    param: str | None = None


def _text(v: object) -> str | None:
    return v if isinstance(v, str) and v else None


def refusal(status: int, body: bytes) -> Refusal:
    """The engine's message and its names for the error, from whatever shape it answered."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        doc = None
    if isinstance(doc, dict):
        err = doc.get("error")
        if isinstance(err, str):  # {"error": "no"}
            err = {"message": err}
        if not isinstance(err, dict):
            err = doc  # vLLM, SGLang: the fields at the top
        message = _text(err.get("message")) or _detail(doc.get("detail"))
        if message is not None:
            code = err.get("code")
            return Refusal(
                message[:_MAX_MESSAGE], _text(err.get("type")), _text(code), _text(err.get("param"))
            )
    text = body[:_MAX_MESSAGE].decode("utf-8", "replace").strip()
    return Refusal(text or f"The engine refused the request (HTTP {status}).")


def _detail(detail: object) -> str | None:
    """FastAPI's ``detail``: a string, or a list of validation errors."""
    if isinstance(detail, str):
        return detail or None
    if isinstance(detail, list) and detail:
        return "; ".join(str(d.get("msg", d)) if isinstance(d, dict) else str(d) for d in detail)
    return None
