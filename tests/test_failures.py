"""The attempt-failure tree and its one table: each type's reason (the header and metric
label), whether another or the same tier may be tried, whether it is a timeout, whether it
counts against the tier, and the OpenAI error when it was the last failure."""

from __future__ import annotations

import inspect

import orjson
import pytest

from gateway.checks.base import CheckResult
from gateway.dispatch.fallback import reason, verdict
from gateway.dispatch.outcome import Failure, all_failed, describe_fallback
from gateway.errors import GatewayError, RateLimited, UpstreamFailed, UpstreamTimeout, error_body
from gateway.upstream import failures as f

# one instance of every type, with what the table says of it:
# (failure, reason, next tier, same tier, timeout, counts against the tier, continuable)
ROWS: list[tuple[f.AttemptFailed, str, bool, bool, bool, bool, bool]] = [
    (f.ConnectFailed("refused"), "connect", True, False, False, True, False),
    (f.ConnectionReset("reset"), "reset", True, True, False, True, False),
    (f.StreamCut("cut"), "stream_cut", True, False, False, True, True),
    (f.MalformedAnswerHead("SMTP"), "upstream", True, False, False, True, False),
    (f.ProviderError("APIConnectionError"), "upstream", True, False, False, True, False),
    (f.AnswerTimeout("3.0s"), "timeout", True, False, True, True, True),
    (f.FirstTokenTimeout("0.5s"), "timeout_ttft", True, False, True, True, False),
    (f.Stall("0.5s"), "stall", True, False, True, True, True),
    (f.ClientSlow("slow reader"), "client_slow", True, False, True, False, False),
    (f.QueueTimeout("no slot"), "queue_timeout", True, False, True, False, False),
    (f.DeadlineSpent("none left"), "deadline", True, False, True, False, False),
    (f.TooSlow("0.2 tokens/s"), "too_slow", True, False, False, True, True),
    (f.ServerError(500, "boom"), "http_500", True, True, False, True, False),
    (f.ServerError(502, "bad gateway"), "http_502", True, True, False, True, False),
    (f.ServerError(503, "busy"), "http_503", True, True, False, True, False),
    (f.ServerError(504, "gateway timeout"), "http_504", True, False, False, True, False),
    (f.ServerError(501, "not implemented"), "http_501", True, False, False, True, False),
    (f.UpstreamRateLimited(429, "busy"), "http_429", True, True, False, True, False),
    (f.UpstreamRequestTimeout(408, "slow"), "http_408", True, False, False, True, False),
    (f.TierRefused(401, "bad key"), "http_401", True, False, False, True, False),
    (f.ClientRejected(400, "client error", b"{}"), "http_400", False, False, False, False, False),
    (
        f.ContextExceeded(400, "too long", b"{}", 4096),
        "context_length",
        True,
        False,
        False,
        False,
        False,
    ),
    (f.BadBody("not JSON"), "bad_body", True, False, False, True, False),
    (f.BadStream("not JSON"), "bad_stream", True, False, False, True, False),
    (f.AnswerTooLarge("over"), "too_large", True, False, False, True, False),
    (f.StreamErrorEvent("overloaded"), "stream_error", True, False, False, True, False),
    (f.EmptyStream("no token"), "stream_empty", True, False, False, True, False),
    (f.CheckFailed("empty", "non_empty"), "check_non_empty", True, False, False, False, False),
    (
        f.CheckFailed("loops", "repetition", 12),
        "check_repetition",
        True,
        False,
        False,
        False,
        False,
    ),
    (f.Shed("saturated", 3.0), "shed", True, False, False, False, False),
    (f.TierMisconfigured("no key"), "config", True, False, False, True, False),
    (f.TierUnavailable("circuit open"), "unavailable", True, False, False, False, False),
    (f.NoContinuation("no tier left"), "no_continuation", True, False, False, False, False),
]


@pytest.mark.parametrize(
    ("e", "why", "next_tier", "same_tier", "timeout", "tier_fault", "continuable"),
    ROWS,
    ids=[type(r[0]).__name__ + "-" + r[1] for r in ROWS],
)
def test_each_type_maps_once(
    e: f.AttemptFailed,
    why: str,
    next_tier: bool,
    same_tier: bool,
    timeout: bool,
    tier_fault: bool,
    continuable: bool,
) -> None:
    v = verdict(e)
    assert reason(e) == why
    assert (v.next_tier, v.same_tier, v.timeout, v.tier_fault, v.continuable) == (
        next_tier,
        same_tier,
        timeout,
        tier_fault,
        continuable,
    )
    assert isinstance(e, f.AttemptTimeout) == timeout  # the category and the table agree


def test_every_type_of_the_tree_is_in_the_table() -> None:
    types = {
        c
        for _, c in inspect.getmembers(f, inspect.isclass)
        if issubclass(c, f.AttemptFailed) and c.__module__ == f.__name__
    }
    categories = {f.AttemptFailed, f.TransportFailure, f.AttemptTimeout, f.UpstreamStatus}
    categories.add(f.BadAnswer)
    assert types - categories == {type(r[0]) for r in ROWS}


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (500, f.ServerError),
        (529, f.ServerError),
        (429, f.UpstreamRateLimited),
        (408, f.UpstreamRequestTimeout),
        (400, f.ClientRejected),
        (404, f.ClientRejected),  # an engine's 404: the request named what is not there
        (422, f.ClientRejected),
    ],
)
def test_an_engine_status_becomes_its_type(status: int, kind: type[f.UpstreamStatus]) -> None:
    e = f.status_error(status, b'{"error": "x"}\n')
    assert type(e) is kind and e.status == status and reason(e) == f"http_{status}"
    if isinstance(e, f.ClientRejected):  # relayed as the engine wrote it
        assert e.body == b'{"error": "x"}\n' and e.detail == "client error"
    else:  # logged, never relayed: one line
        assert e.detail == '{"error": "x"} '


@pytest.mark.parametrize(
    ("check", "kind"),
    [
        ("repetition", f.CheckFailed),
        ("template_leak", f.CheckFailed),
        ("json_valid", f.CheckFailed),
        ("non_empty", f.CheckFailed),
    ],
)
def test_a_failed_check_becomes_its_type(check: str, kind: type[f.CheckFailed]) -> None:
    e = f.check_failed(CheckResult(False, check, "why"))
    assert type(e) is kind and e.check == check and e.detail == "why"
    assert reason(e) == f"check_{check}"


def _failures(*pairs: tuple[str, f.AttemptFailed]) -> list[Failure]:
    return [Failure.of(tier, e) for tier, e in pairs]


@pytest.mark.parametrize(
    ("last", "failures", "kind", "status", "message"),
    [
        (
            f.ServerError(500, "boom"),
            (("highspeed", f.Stall("")), ("standard", f.ServerError(500, "boom"))),
            UpstreamFailed,
            502,
            "Every tier failed: highspeed: stall; standard: http_500.",
        ),
        (
            f.FirstTokenTimeout(""),
            (("highspeed", f.CheckFailed("", "repetition")), ("standard", f.FirstTokenTimeout(""))),
            UpstreamTimeout,
            504,
            "Every tier failed: highspeed: check_repetition; standard: timeout_ttft.",
        ),
        (f.DeadlineSpent(""), (), UpstreamFailed, 502, "Every tier failed: deadline."),
        (
            f.Shed("the queue is 3 s long", 3.0),
            (("highspeed", f.Shed("", 3.0)),),
            RateLimited,
            429,
            "The gateway is saturated: the queue is 3 s long.",
        ),
    ],
)
def test_the_error_when_every_tier_failed(
    last: f.AttemptFailed,
    failures: tuple[tuple[str, f.AttemptFailed], ...],
    kind: type[GatewayError],
    status: int,
    message: str,
) -> None:
    err = all_failed(last, _failures(*failures))
    assert type(err) is kind and isinstance(err, GatewayError)
    assert err.status == status and err.message == message
    body = orjson.loads(error_body(err))["error"]
    if isinstance(err, RateLimited):
        assert body["code"] == "overloaded" and err.headers == {"Retry-After": "3"}


def test_a_client_error_is_relayed_as_it_is() -> None:
    e = f.ClientRejected(400, "client error", b'{"error": {"message": "no"}}')
    assert all_failed(e, _failures(("highspeed", e))) is e


def test_the_fallback_header_names_reasons_and_tiers() -> None:
    failures = _failures(
        ("highspeed", f.CheckFailed("loops", "repetition")), ("standard", f.ServerError(503, ""))
    )
    assert describe_fallback(failures, "standard") == (
        "highspeed:check_repetition; standard:http_503 -> standard"
    )
    assert [x.check for x in failures] == ["repetition", None]


# each engine's own words for "the prompt does not fit my context window", and the window
@pytest.mark.parametrize(
    ("status", "body", "window"),
    [
        (  # vLLM
            400,
            b'{"object": "error", "message": "This model\'s maximum context length is 4096 tokens. '
            b'However, you requested 5000 tokens (4000 in the messages, 1000 in the completion).", '
            b'"type": "BadRequestError", "param": null, "code": 400}',
            4096,
        ),
        (  # vLLM, later wording
            400,
            b'{"error": {"message": "The decoder prompt (length 9000) is longer than the maximum '
            b"model length of 8192. Make sure that `max_model_len` is no smaller than the number "
            b'of text tokens.", "type": "BadRequestError", "code": 400}}',
            8192,
        ),
        (  # SGLang
            400,
            b'{"object": "error", "message": "The input (5000 tokens) is longer than the model\'s '
            b'context length (4096 tokens).", "type": "BadRequestError", "code": 400}',
            4096,
        ),
        (  # llama.cpp's server
            400,
            b'{"error": {"code": 400, "message": "the request exceeds the available context size, '
            b'try increasing it", "type": "exceed_context_size_error", "n_prompt_tokens": 5000, '
            b'"n_ctx": 4096}}',
            4096,
        ),
        (  # OpenAI
            400,
            b'{"error": {"message": "Please reduce the length of the messages.", "type": '
            b'"invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}',
            None,
        ),
        (  # the simulator (engines/sim)
            400,
            b'{"object": "error", "message": "Requested token count exceeds the model\'s maximum '
            b'context length of 2048 tokens (3000 requested).", "type": "BadRequestError"}',
            2048,
        ),
        (  # Anthropic, through LiteLLM
            400,
            b'{"error": {"message": "litellm.ContextWindowExceededError: prompt is too long: '
            b'210000 tokens > 200000 maximum", "type": "invalid_request_error"}}',
            None,
        ),
    ],
)
def test_a_context_overflow_moves_on_and_names_its_window(
    status: int, body: bytes, window: int | None
) -> None:
    e = f.status_error(status, body)
    assert type(e) is f.ContextExceeded and e.window == window
    assert reason(e) == "context_length" and verdict(e).next_tier and not verdict(e).tier_fault
    assert e.detail and not e.detail.startswith("{")  # the engine's message, not its JSON


def test_other_client_errors_stay_the_requests_own() -> None:
    for body in (b'{"error": {"message": "temperature must be <= 2"}}', b"nope"):
        assert type(f.status_error(400, body)) is f.ClientRejected
    # a 500 that mentions the context is the engine's fault, not a window
    assert type(f.status_error(500, b"context length exceeded")) is f.ServerError


def test_no_window_large_enough_is_a_400_quoting_each_engine() -> None:
    hs = f.ContextExceeded(400, "context length is 4096", b"{}", 4096)
    st = f.ContextExceeded(400, "context length is 8192", b"{}", 8192)
    err = all_failed(st, _failures(("highspeed", hs), ("standard", st)))
    assert err.status == 400 and isinstance(err, GatewayError)
    body = orjson.loads(error_body(err))["error"]
    assert body["code"] == "context_length_exceeded" and body["param"] == "messages"
    assert "highspeed: context length is 4096; standard: context length is 8192" in body["message"]
