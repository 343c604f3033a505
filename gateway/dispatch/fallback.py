"""What a failed attempt means for its request: one table over the failure types.

Each type of :mod:`gateway.upstream.failures` (and so each subtype, unless it has a row of
its own) maps to a :class:`Verdict`: the reason that ``x-gateway-fallback``, the
``gateway_fallbacks_total{reason}`` and ``gateway_upstream_attempt_seconds{outcome}``
labels, the span and the access log give it; whether another tier may be tried; whether
the same tier is tried again after a short wait; whether it was a timeout (the last
failure decides 504 over 502); whether it counts against the tier's circuit; whether a
non-streamed attempt's text so far may be continued by the next tier. These are the
fallback triggers of the rules: every failure moves on to the next tier but the
request's own 4xx (a prompt too long for the tier's context window is not the request's
fault: a larger window may hold it), and a check failure never opens a circuit. The
OpenAI error when no tier answered is :func:`gateway.dispatch.outcome.all_failed`.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

from gateway.upstream.failures import (
    AnswerTimeout,
    AnswerTooLarge,
    AttemptFailed,
    BadBody,
    BadStream,
    CheckFailed,
    ClientRejected,
    ClientSlow,
    ConnectFailed,
    ConnectionReset,
    ContextExceeded,
    DeadlineSpent,
    EmptyStream,
    FirstTokenTimeout,
    MalformedAnswerHead,
    NoContinuation,
    ProviderError,
    QueueTimeout,
    ServerError,
    Shed,
    Stall,
    StreamCut,
    StreamErrorEvent,
    TierMisconfigured,
    TierUnavailable,
    TooSlow,
    UpstreamRateLimited,
    UpstreamStatus,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    reason: str  # ASCII; ``{0.status}`` and ``{0.check}`` are the failure's own fields
    next_tier: bool = True  # another tier may be tried
    same_tier: bool = False  # retried on its tier first, after a short wait (a transient fault)
    timeout: bool = False  # as the last failure: 504 upstream_timeout (else 502)
    tier_fault: bool = True  # counts against the tier's circuit breaker
    continuable: bool = False  # the text before it is good: the next tier may continue it

    def reason_of(self, e: AttemptFailed) -> str:
        return self.reason.format(e) if "{" in self.reason else self.reason


_STATUS = "http_{0.status}"
VERDICTS: MappingProxyType[type[AttemptFailed], Verdict] = MappingProxyType(
    {
        ConnectFailed: Verdict(reason="connect"),
        ConnectionReset: Verdict(reason="reset", same_tier=True),
        StreamCut: Verdict(reason="stream_cut", continuable=True),
        MalformedAnswerHead: Verdict(reason="upstream"),
        ProviderError: Verdict(reason="upstream"),
        AnswerTimeout: Verdict(reason="timeout", timeout=True, continuable=True),
        FirstTokenTimeout: Verdict(reason="timeout_ttft", timeout=True),
        Stall: Verdict(reason="stall", timeout=True, continuable=True),
        ClientSlow: Verdict(reason="client_slow", timeout=True, tier_fault=False),
        QueueTimeout: Verdict(reason="queue_timeout", timeout=True, tier_fault=False),
        DeadlineSpent: Verdict(reason="deadline", timeout=True, tier_fault=False),
        TooSlow: Verdict(reason="too_slow", continuable=True),
        UpstreamStatus: Verdict(reason=_STATUS),  # 408, other 5xx, a hosted tier's 401/403/404
        UpstreamRateLimited: Verdict(reason=_STATUS, same_tier=True),
        ClientRejected: Verdict(reason=_STATUS, next_tier=False, tier_fault=False),
        # another tier's window may be larger (the loop skips those no larger than this one's)
        ContextExceeded: Verdict(reason="context_length", tier_fault=False),
        BadBody: Verdict(reason="bad_body"),
        BadStream: Verdict(reason="bad_stream"),
        AnswerTooLarge: Verdict(reason="too_large"),
        StreamErrorEvent: Verdict(reason="stream_error"),
        EmptyStream: Verdict(reason="stream_empty"),
        CheckFailed: Verdict(reason="check_{0.check}", tier_fault=False),
        Shed: Verdict(reason="shed", tier_fault=False),  # the gateway's own queue
        TierMisconfigured: Verdict(reason="config"),
        TierUnavailable: Verdict(reason="unavailable", tier_fault=False),  # not even tried
        NoContinuation: Verdict(reason="no_continuation", tier_fault=False),
    }
)
# the 5xx answers retried on their own tier: an engine (or a proxy in front of it) that
# failed for a moment; a 501, 504 ... would answer the same again
SAME_TIER_STATUSES = frozenset((500, 502, 503))
_SERVER_FAULT = Verdict(reason=_STATUS, same_tier=True)


def verdict(e: AttemptFailed) -> Verdict:
    """The row of ``e``'s type, or of its nearest ancestor that has one."""
    if isinstance(e, ServerError) and e.status in SAME_TIER_STATUSES:
        return _SERVER_FAULT
    for cls in type(e).__mro__:
        row = VERDICTS.get(cls)
        if row is not None:
            return row
    raise TypeError(f"no verdict for {type(e).__name__}")  # every type has a row (tested)


def reason(e: AttemptFailed) -> str:
    """``e``'s reason: ``http_503``, ``check_repetition``, ``stall`` ..."""
    return verdict(e).reason_of(e)
