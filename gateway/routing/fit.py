"""Which tiers of a route can hold a request: its prompt and ``max_tokens`` against each
tier's context window and its cap on ``max_tokens``. Pure.

A tier's window is the rules' ``context_window``, else what its engines report
(``max_model_len``) or named when one refused a prompt as too long; a tier whose window
is unknown can hold anything (the engine is asked, and its refusal moves the request on).
The prompt is the classifier's estimate (``context_tokens``: about 4 characters a token,
tool definitions included). A tier whose ``max_output_tokens`` is under the request's
``max_tokens`` cannot take it either.

When no tier of the route can, the request is a 400 before any engine sees it: naming
``max_tokens`` where that alone is over every tier's limit, else
``context_length_exceeded`` with the estimate and each tier's window.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gateway.errors import ContextTooLong, InvalidField


@dataclass(frozen=True, slots=True)
class Limits:
    """One tier's: its context window and its cap on ``max_tokens`` (None: unknown, none)."""

    window: int | None = None
    max_output: int | None = None

    def output_limit(self) -> int | None:
        """The most ``max_tokens`` the tier could give (its cap, at most its window)."""
        known = [n for n in (self.window, self.max_output) if n is not None]
        return min(known) if known else None


@dataclass(frozen=True, slots=True)
class Need:
    """What the request takes: its estimated prompt, and ``max_tokens`` as the client set it
    (None: the engine's default), named by the field the client used."""

    prompt: int
    max_tokens: int | None = None
    param: str = "max_tokens"

    @property
    def total(self) -> int:
        return self.prompt + (self.max_tokens or 0)


def _over_cap(lim: Limits, need: Need) -> bool:
    return (
        need.max_tokens is not None
        and lim.max_output is not None
        and (need.max_tokens > lim.max_output)
    )


def holds(lim: Limits, need: Need) -> bool:
    """Whether a tier with ``lim`` can take ``need`` (an unknown window takes anything)."""
    if _over_cap(lim, need):
        return False
    return lim.window is None or need.total <= lim.window


def fit(
    chain: tuple[str, ...], need: Need, limits: Mapping[str, Limits]
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The tiers of ``chain`` that can hold ``need`` (in order) and those that cannot; a 400
    when none can."""
    free = Limits()
    kept = tuple(t for t in chain if holds(limits.get(t, free), need))
    dropped = tuple(t for t in chain if t not in kept)
    if not kept:
        raise _refusal(chain, need, limits)
    return kept, dropped


def _why(lim: Limits, need: Need) -> str:
    """Why a tier cannot hold ``need``: its cap, or its window."""
    if _over_cap(lim, need):
        return f"{need.param} over {lim.max_output}"
    return f"window {lim.window}"


def _refusal(
    chain: tuple[str, ...], need: Need, limits: Mapping[str, Limits]
) -> ContextTooLong | InvalidField:
    free = Limits()
    outs = [limits.get(t, free).output_limit() for t in chain]
    if need.max_tokens is not None and all(o is not None and need.max_tokens > o for o in outs):
        most = max(o for o in outs if o is not None)
        each = ", ".join(f"{t}: {o}" for t, o in zip(chain, outs, strict=True))
        return InvalidField(
            f"'{need.param}' is too large: {need.max_tokens}. The tiers of this route give "
            f"at most {most} tokens ({each}).",
            param=need.param,
            code="invalid_value",
        )
    each = ", ".join(f"{t}: {_why(limits.get(t, free), need)}" for t in chain)
    asked = f" + {need.param} {need.max_tokens}" if need.max_tokens is not None else ""
    return ContextTooLong(
        f"This request needs about {need.total} tokens (a prompt of about {need.prompt}"
        f"{asked}); no tier of its route can hold it ({each}). "
        f"Shorten the prompt or lower {need.param}.",
        param="messages",
    )


def described(dropped: tuple[str, ...], need: Need, limits: Mapping[str, Limits]) -> str:
    """The route header's note on the tiers left out: ``too long for highspeed (window 4096)``."""
    free = Limits()
    return "too long for " + ", ".join(f"{t} ({_why(limits.get(t, free), need)})" for t in dropped)
