"""What an attempt loop leaves behind: the failures on the way, the time spent, the answer."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gateway.dispatch.fallback import reason, verdict
from gateway.errors import (
    ContextTooLong,
    GatewayError,
    RateLimited,
    UpstreamFailed,
    UpstreamTimeout,
)
from gateway.upstream.failures import (
    AttemptFailed,
    CheckFailed,
    ClientRejected,
    ContextExceeded,
    Shed,
)


@dataclass(frozen=True, slots=True)
class Failure:
    """One failed attempt, as the headers, metrics and logs tell it (:meth:`of`)."""

    tier: str
    reason: str  # its type's reason (gateway.dispatch.fallback): stall, http_503 ...
    detail: str
    timeout: bool
    seconds: float = 0.0
    check: str | None = None  # the check that failed, if a check failed
    text: str | None = None  # the answer that failed it (bounded): for the review queue

    @classmethod
    def of(cls, tier: str, e: AttemptFailed, seconds: float = 0.0) -> Failure:
        v = verdict(e)
        check, text = (e.check, e.text) if isinstance(e, CheckFailed) else (None, None)
        return cls(tier, v.reason_of(e), e.detail, v.timeout, seconds, check, text)

    def short(self) -> str:
        return f"{self.tier}:{self.reason}"


@dataclass(frozen=True, slots=True)
class Salvage:
    """What a non-streamed attempt that broke off leaves the next tier: its good text (before
    a loop, or all of it before a cut, stall or timeout), the tokens it took, its usage."""

    tier: str
    prefix: str
    tokens: int
    usage: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class BridgePlan:
    """A hedge's second tier may hand its answer back to the first (:mod:`bridge`): to
    ``tier``, if that tier's continuation has a first token within ``wait`` seconds; its
    answer must be over by ``until`` (monotonic), which leaves the second tier time."""

    tier: str
    wait: float
    until: float


@dataclass(slots=True)
class Trail:
    """One request's way through the tiers: failures, time on engines, deliberate waits."""

    failures: list[Failure] = field(default_factory=list)
    upstream_s: float = 0.0  # waiting on engines (not the gateway's overhead)
    backoff_s: float = 0.0  # deliberate waits before retrying a tier (not overhead either)
    ok_attempt_s: float | None = None  # how long the attempt that answered took
    checks_failed: str | None = None  # the check the delivered answer failed (last tier)
    hedge: str | None = None  # a hedge fired: which tier won
    queue_s: float = 0.0  # waiting in the gateway's queue for a free slot (counts to deadline)
    salvage: Salvage | None = None  # a failed non-streamed attempt's good text, to continue
    continued: str | None = None  # "<tier>:<chars>": the answer continues that tier's text
    bridge: BridgePlan | None = None  # a hedge's second tier is answering: it may hand back
    bridged: str | None = None  # "<tier>:<chars>": a hedge's second tier handed back after
    finish: str | None = None  # a stream's plan for a break after its first byte (finish.py)
    finished: str | None = None  # "<way> <tier>": how a break after the first byte was finished

    @property
    def fallback_reason(self) -> str | None:
        return self.failures[0].reason if self.failures else None


@dataclass(slots=True)
class Outcome:
    """A non-streamed answer: the engine's JSON, untouched."""

    tier: str
    body: bytes
    trail: Trail
    usage: dict[str, Any] | None = None
    cost: float | None = None  # USD at the answering tier's price (None: it has none)

    @property
    def fallback(self) -> str | None:
        return describe_fallback(self.trail.failures, self.tier)


def describe_fallback(failures: list[Failure], tier: str) -> str | None:
    """Why we fell back (x-gateway-fallback): ``highspeed:check_repetition -> standard``.
    The reason and the tier only: engine addresses and bodies go to the log, not to tenants."""
    if not failures:
        return None
    return "; ".join(f.short() for f in failures) + f" -> {tier}"


def all_failed(last: AttemptFailed, failures: Sequence[Failure]) -> GatewayError | ClientRejected:
    """What the client gets when no tier answered; ``last`` is the last attempt's failure.
    An engine's client error is relayed as it is; a request the queues could not start is
    a 429 with ``Retry-After``; a prompt too long for every window tried is a 400 quoting
    each engine; else a 504 when the last failure was a timeout, a 502."""
    if isinstance(last, ContextExceeded):
        said = "; ".join(f"{f.tier}: {f.detail}" for f in failures if f.reason == "context_length")
        return ContextTooLong(
            "The prompt and max_tokens fit the context window of no tier of this route "
            f"({said or last.detail}).",
            param="messages",
        )
    if isinstance(last, ClientRejected):
        return last
    if isinstance(last, Shed):  # the queue could not start it in time: come back later
        retry = last.retry_after or 1.0
        return RateLimited(
            f"The gateway is saturated: {last.detail}.",
            retry_after=retry,
            type_="server_overloaded",
            code="overloaded",
            headers={"Retry-After": str(int(retry))},
        )
    what = "; ".join(f"{f.tier}: {f.reason}" for f in failures) or reason(last)
    msg = f"Every tier failed: {what}."
    if failures and failures[-1].timeout:
        return UpstreamTimeout(msg)
    return UpstreamFailed(msg)
