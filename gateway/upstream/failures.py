"""Why one attempt on one tier failed: a tree of exception types, the kind is the type.

Every failure of an attempt is raised as one of these: on the connection, in the
engine's answer, in the gateway's own queue and checks. Code catches a category
(``except AttemptTimeout``) or tests a type, never a string. What each type means for
the request — its reason in ``x-gateway-fallback`` and the metrics (in brackets below),
whether another tier or the same one may be tried, whether it counts against the tier,
the OpenAI error when it was the last — is one table, :mod:`gateway.dispatch.fallback`::

    AttemptFailed
    ├── TransportFailure             the connection, not the answer
    │   ├── ConnectFailed            [connect]       refused or unreachable: replica marked down
    │   ├── ConnectionReset          [reset]         dropped before the answer's head
    │   ├── StreamCut                [stream_cut]    the answer ended before its end
    │   ├── MalformedAnswerHead      [upstream]      not an HTTP/1.1 answer
    │   └── ProviderError            [upstream]      a hosted provider's error without a status
    ├── AttemptTimeout
    │   ├── AnswerTimeout            [timeout]       the attempt's time ran out
    │   ├── FirstTokenTimeout        [timeout_ttft]  no first token within the TTFT budget
    │   ├── Stall                    [stall]         no data within the stall limit
    │   ├── ClientSlow               [client_slow]   a stall while the client did not read
    │   ├── QueueTimeout             [queue_timeout] no slot of the tier's queue in time
    │   └── DeadlineSpent            [deadline]      no time left for an attempt at all
    ├── TooSlow                      [too_slow]      a stream under its tier's minimum rate
    ├── UpstreamStatus               [http_<status>] a non-200 answer
    │   ├── ServerError              5xx
    │   ├── UpstreamRateLimited      429, with the engine's Retry-After
    │   ├── UpstreamRequestTimeout   408
    │   ├── TierRefused              401/403/404 of a hosted provider: the tier's key or model
    │   └── ClientRejected           any other 4xx: the request's own fault, relayed
    │       └── ContextExceeded      [context_length] the prompt does not fit its window
    ├── BadAnswer                    not what an OpenAI-compatible engine sends
    │   ├── BadBody                  [bad_body]      a JSON answer that is not a completion
    │   ├── BadStream                [bad_stream]    an event that is not what a stream carries
    │   ├── AnswerTooLarge           [too_large]     an event or the answer over the tier's limit
    │   ├── StreamErrorEvent         [stream_error]  the engine's own error event
    │   └── EmptyStream              [stream_empty]  it ended before its first token
    ├── CheckFailed                  [check_<name>]  a quality check failed on the answer
    ├── Shed                         [shed]          the tier's queue could not start it in time
    ├── TierMisconfigured            [config]        e.g. a hosted tier's key variable is unset
    ├── TierUnavailable              [unavailable]   circuit open or no replica up
    └── NoContinuation               [no_continuation]  no tier could continue a broken stream

:func:`status_error` turns an engine's status into its type and :func:`check_failed` a
failed check's result into its type: the two places where outside codes become types.

A failure's traceback holds every frame it passed through, and their locals: the
request's body, parsed and encoded. A failure kept in one of those frames (the last
failure of the attempt loop, ``err`` before a ``raise err``, a retry library's outcome)
is a reference cycle, which only a full collection frees: until then each refused
request pinned its body (a 9 MB body kept ~25 MB). So a failure is raised as it is made,
never from a local, and one kept after it was handled is kept as a value (:func:`kept`).
"""

from __future__ import annotations

from gateway.checks.base import CheckResult
from gateway.upstream.refusals import context_exceeded, refusal


class AttemptFailed(Exception):
    """One attempt on one tier failed. ``detail`` is short and ASCII-safe (it goes to logs;
    only the type's reason goes into headers)."""

    def __init__(self, detail: str):
        super().__init__(detail)
        self.detail = detail
        # a stream that failed after its first token: its StreamState (gateway.upstream.sse,
        # which imports this module), set by the opener
        self.partial: object | None = None


# -- the connection ------------------------------------------------------------------------
class TransportFailure(AttemptFailed):
    """The connection failed, not the engine's answer."""


class ConnectFailed(TransportFailure):
    """No connection: refused, unreachable, a bad URL."""


class ConnectionReset(TransportFailure):
    """The connection dropped before the answer's head arrived."""


class StreamCut(TransportFailure):
    """The answer ended (or its connection broke) before it was complete."""


class MalformedAnswerHead(TransportFailure):
    """The engine's bytes are not an HTTP/1.1 answer (or its head is over the limit)."""


class ProviderError(TransportFailure):
    """A hosted provider's (LiteLLM's) error that carries no HTTP status."""


# -- time ----------------------------------------------------------------------------------
class AttemptTimeout(AttemptFailed):
    """A time limit of the attempt passed."""


class AnswerTimeout(AttemptTimeout):
    """The attempt's whole time (its total limit, or its share of the deadline) ran out."""


class FirstTokenTimeout(AttemptTimeout):
    """No first token within the TTFT budget."""


class Stall(AttemptTimeout):
    """No data within the stall limit between two reads."""


class ClientSlow(AttemptTimeout):
    """A stall while the relay waited on a client that read too slowly: backpressure, not
    the engine's fault."""


class QueueTimeout(AttemptTimeout):
    """No slot of the tier's queue within the attempt's budget (or none left after it)."""


class DeadlineSpent(AttemptTimeout):
    """The request's deadline left no time for an attempt at all."""


class TooSlow(AttemptFailed):
    """A stream under its tier's minimum rate (``min_tokens_per_s``): it never stalls, yet
    would take minutes."""


# -- the engine's status -------------------------------------------------------------------
class UpstreamStatus(AttemptFailed):
    """A non-200 answer. ``retry_after``: the engine's ``Retry-After``, in seconds."""

    def __init__(self, status: int, detail: str):
        super().__init__(detail)
        self.status = status
        self.retry_after: float | None = None


class ServerError(UpstreamStatus):
    """A 5xx answer."""


class UpstreamRateLimited(UpstreamStatus):
    """A 429: the engine (or provider) is busy for now."""


class UpstreamRequestTimeout(UpstreamStatus):
    """A 408: the engine gave up waiting."""


class TierRefused(UpstreamStatus):
    """A hosted provider's 401, 403 or 404: the tier's key or model is wrong, not the
    request."""


class ClientRejected(UpstreamStatus):
    """Any other 4xx: the request itself is wrong, and another tier would say the same.
    ``body`` is the engine's answer: its status and message reach the client, in the
    client's error format."""

    def __init__(self, status: int, detail: str, body: bytes):
        super().__init__(status, detail)
        self.body = body


class ContextExceeded(ClientRejected):
    """The engine said the prompt and ``max_tokens`` do not fit its context window: a tier
    with a larger (or unknown) window is tried. ``window``: the one it named, if any."""

    def __init__(self, status: int, detail: str, body: bytes, window: int | None):
        super().__init__(status, detail, body)
        self.window = window


# -- the answer ----------------------------------------------------------------------------
class BadAnswer(AttemptFailed):
    """The answer is not what an OpenAI-compatible engine sends."""


class BadBody(BadAnswer):
    """A whole answer that is not JSON, or not a completion object."""


class BadStream(BadAnswer):
    """A stream event that is not JSON, or not what a completion stream carries."""


class AnswerTooLarge(BadAnswer):
    """An event, or the whole answer, over the tier's limit."""


class StreamErrorEvent(BadAnswer):
    """The engine sent an error event in its stream."""


class EmptyStream(BadAnswer):
    """The stream ended before its first token."""


class CheckFailed(AttemptFailed):
    """A quality check failed on the answer; ``check`` is its name. ``at``: where the good
    text ends, when the failure knew it (a stream guard that confirmed the text it held);
    otherwise the check itself is asked (``Check.good_prefix``)."""

    def __init__(self, detail: str, check: str, at: int | None = None, text: str | None = None):
        super().__init__(detail)
        self.check = check
        self.at = at
        self.text = None if text is None else text[:KEPT_TEXT_CHARS]
        """The answer (or the text so far) that failed, for the review queue: bounded."""


# -- the gateway's side of the tier -------------------------------------------------------
class Shed(AttemptFailed):
    """The tier's queue could not start the request in time; ``retry_after`` estimates when
    it could (seconds)."""

    def __init__(self, detail: str, retry_after: float):
        super().__init__(detail)
        self.retry_after = retry_after


class TierMisconfigured(AttemptFailed):
    """The tier cannot be used as configured (a hosted tier's key variable is unset)."""


class TierUnavailable(AttemptFailed):
    """Not tried: the tier's circuit is open or none of its replicas is up."""


class NoContinuation(AttemptFailed):
    """No tier could continue a broken stream (none can, or each refused or failed)."""


def status_error(status: int, body: bytes, retry_after: float | None = None) -> UpstreamStatus:
    """An engine's non-200 answer as its type. Engine bodies go to logs, never to tenants
    verbatim (a client error's message is relayed, in the client's error format)."""
    err: UpstreamStatus
    if status == 429 or status == 408 or status >= 500:
        snippet = body[:200].decode("utf-8", "replace").replace("\n", " ") or "no body"
        if status == 429:
            err = UpstreamRateLimited(status, snippet)
        elif status == 408:
            err = UpstreamRequestTimeout(status, snippet)
        else:
            err = ServerError(status, snippet)
    else:
        err = _client_error(status, body)
    err.retry_after = retry_after
    return err


def _client_error(status: int, body: bytes) -> ClientRejected:
    too_long, window = context_exceeded(status, body)
    if too_long:  # its detail: the engine's message, which the client's 400 quotes
        return ContextExceeded(status, refusal(status, body).message[:300], body, window)
    return ClientRejected(status, "client error", body)


def kept(e: AttemptFailed) -> AttemptFailed:
    """``e``, handled and kept as a value: without its traceback, whose frames would hold
    the request's body for as long as ``e`` is kept (and, kept in one of them, until a
    full collection)."""
    return e.with_traceback(None)


KEPT_TEXT_CHARS = 16_384  # what a failure keeps of the answer that failed its check


def check_failed(result: CheckResult, text: str | None = None) -> CheckFailed:
    """A failed check's result as its failure (``text``: the answer that failed it)."""
    return CheckFailed(result.reason, result.check, text=text)
