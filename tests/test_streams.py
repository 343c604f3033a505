"""Streams that never fail silently: hold-back, live checks, continuation on the next tier.

Each test scripts the fake engines with directives and reads the gateway's SSE as the
client sees it, through a real socket (raw, and with the openai SDK).
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.conftest import rules_for_tests, start_gateway
from tests.test_e2e_proxy import engine_requests, reset

pytestmark = [pytest.mark.processes, pytest.mark.slow]

# 40 words; the standard tier knows the same answer, so a continuation can be checked exactly
ANSWER = " ".join(f"word{i}" for i in range(40))


def sse(
    gateway: str,
    content: str,
    key: str | None = None,
    extra_headers: dict[str, str] | None = None,
    **extra: Any,
) -> tuple[dict[str, str], list[Any], list[str]]:
    """POST a streaming chat request (with an API ``key``, where tenancy is on); return
    headers, the data events, the comment lines."""
    body = json.dumps(
        {
            "model": "auto",
            "stream": True,
            **extra,
            "messages": [{"role": "user", "content": content}],
        }
    ).encode()
    head = {"Content-Type": "application/json", **(extra_headers or {})}
    if key is not None:
        head["Authorization"] = f"Bearer {key}"
    req = urllib.request.Request(f"{gateway}/v1/chat/completions", data=body, headers=head)
    with urllib.request.urlopen(req, timeout=20) as r:
        headers = {k.lower(): v for k, v in r.headers.items()}
        raw = r.read().decode()
    events: list[Any] = []
    comments: list[str] = []
    for block in raw.split("\n\n"):
        for line in block.split("\n"):
            if line.startswith("data: "):
                data = line[6:]
                events.append(data if data == "[DONE]" else json.loads(data))
            elif line.startswith(":"):
                comments.append(line)
    return headers, events, comments


def content(events: list[Any]) -> str:
    out = []
    for e in events:
        if isinstance(e, dict):
            for c in e.get("choices") or []:
                out.append(c.get("delta", {}).get("content") or "")
    return "".join(out)


def chunks(events: list[Any]) -> list[dict[str, Any]]:
    return [e for e in events if isinstance(e, dict) and "error" not in e]


def assert_one_stream(events: list[Any]) -> None:
    """Every chunk carries the same id/model/created; it ends with [DONE], once."""
    cs = chunks(events)
    assert len({(c["id"], c["model"], c["created"]) for c in cs}) == 1
    assert events[-1] == "[DONE]" and events.count("[DONE]") == 1


# --- hold-back window: failures inside it are invisible ---------------------------------------


@pytest.fixture(scope="module")
def held(engines: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A gateway whose default rule holds back the first tokens of every stream."""
    rules = rules_for_tests()
    rules["default"]["hold_back"] = True
    rules["default"]["hedge_after"] = None
    proc, url = start_gateway(tmp_path_factory.mktemp("gw"), rules, engines)
    yield url
    proc.stop()


@pytest.mark.parametrize(
    ("fault", "reason"),
    [
        ("loop_after=1", "highspeed:check_repetition"),
        ("leak_after=3", "highspeed:check_template_leak"),
        ("error_after=3", "highspeed:stream_error"),
        ("cut_after=3", "highspeed:stream_cut"),
    ],
    ids=["loop", "leak", "error", "cut"],
)
def test_failure_inside_hold_back_falls_back_cleanly(held: str, fault: str, reason: str) -> None:
    headers, events, comments = sse(held, f"q [[*: text={ANSWER}; per=1]] [[highspeed: {fault}]]")
    assert content(events) == ANSWER  # one clean stream, from the standard tier only
    assert headers["x-gateway-tier"] == "standard"
    assert headers["x-gateway-fallback"].startswith(reason)
    assert_one_stream(events)
    assert chunks(events)[0]["model"] == "fake-standard"
    assert comments[-1].startswith(": x-gateway-fallback " + reason)


def test_short_answer_inside_hold_back_gets_the_full_checks(held: str) -> None:
    # the whole answer fits in the window: the final checks (not_truncated) apply too
    headers, events, _ = sse(held, "q [[highspeed: length]]")
    assert headers["x-gateway-fallback"].startswith("highspeed:check_not_truncated")
    assert content(events) == "Echo (standard): q"


def test_no_hold_back_when_the_rule_turns_it_off(
    engines: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> None:
    rules = rules_for_tests()
    rules["default"]["hold_back"] = False
    proc, url = start_gateway(tmp_path_factory.mktemp("gw"), rules, engines)
    try:
        headers, events, _ = sse(
            url, f"q [[*: text={ANSWER}; per=1]] [[highspeed: leak_after=3; gap=0.01]]"
        )
        # without the window the leak is caught live: continuation instead of a clean switch
        assert headers["x-gateway-tier"] == "highspeed"
        assert content(events) == ANSWER
    finally:
        proc.stop()


# --- live phase: continuation on the standard tier --------------------------------------------


@pytest.mark.parametrize(
    ("fault", "reason"),
    [
        ("leak_after=25", "highspeed:check_template_leak"),
        ("error_after=25", "highspeed:stream_error"),
        ("cut_after=25", "highspeed:stream_cut"),
        ("stall_after=25", "highspeed:stall"),
    ],
    ids=["leak", "error", "cut", "stall"],
)
def test_live_failure_is_continued_exactly(
    gateway: str, engines: dict[str, str], fault: str, reason: str
) -> None:
    reset(engines)
    headers, events, comments = sse(
        gateway, f"q [[*: text={ANSWER}; per=1]] [[highspeed: {fault}; gap=0.01]]"
    )
    assert content(events) == ANSWER  # no gap, no duplicate, no leaked token
    assert headers["x-gateway-tier"] == "highspeed"  # the headers were sent before the fault
    assert_one_stream(events)
    assert chunks(events)[0]["model"] == "fake-highspeed"
    assert chunks(events)[-1]["choices"][0]["finish_reason"] == "stop"
    assert comments[-1].startswith(": x-gateway-fallback " + reason)
    assert comments[-1].endswith("-> standard")
    cont = engine_requests(engines["standard"])[-1]
    assert "continue_final_message" not in cont  # the repository's tiers: `prefill`
    assert cont["messages"][-1] == {
        "role": "assistant",
        "content": " ".join(ANSWER.split()[:25]) + " ",
    }


def test_loop_is_continued_from_before_the_loop(gateway: str, engines: dict[str, str]) -> None:
    reset(engines)
    _, events, comments = sse(
        gateway, f"q [[*: text={ANSWER}; per=1]] [[highspeed: loop_after=20; gap=0.005]]"
    )
    text = content(events)
    clean = " ".join(ANSWER.split()[:20]) + " "
    assert text.startswith(clean)
    assert text.endswith(" ".join(ANSWER.split()[20:]))
    looped = text[len(clean) : len(text) - len(" ".join(ANSWER.split()[20:]))]
    # what the client could not get back: some copies of the looping sentence, nothing else
    # (the loop may be found to start one char early, at the space it shares with the text)
    assert looped.replace("I will repeat this sentence again. ", "").strip() == ""
    assert 0 < looped.count("I will repeat") <= 4  # held back from the second copy on
    assert comments[-1].startswith(": x-gateway-fallback highspeed:check_repetition")
    prefix = engine_requests(engines["standard"])[-1]["messages"][-1]["content"]
    assert prefix in (clean, clean.rstrip())
    assert_one_stream(events)


def test_usage_adds_both_tiers(client: Any) -> None:
    with client.chat.completions.with_streaming_response.create(
        model="auto",
        stream=True,
        stream_options={"include_usage": True},
        messages=[
            {
                "role": "user",
                "content": f"q [[*: text={ANSWER}; per=1]] [[highspeed: cut_after=25; gap=0.01]]",
            }
        ],
    ) as r:
        got = list(r.parse())
    assert "".join(c.choices[0].delta.content or "" for c in got if c.choices) == ANSWER
    usage = got[-1].usage
    # the fake engine counts 10 prompt tokens and one completion token per word
    assert usage.completion_tokens == 25 + 15
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    assert len({c.id for c in got}) == 1


def test_max_tokens_of_the_continuation_is_what_is_left(
    gateway: str, engines: dict[str, str]
) -> None:
    reset(engines)
    sse(
        gateway,
        f"q [[*: text={ANSWER}; per=1]] [[highspeed: cut_after=25; gap=0.01]]",
        max_tokens=100,
    )
    assert engine_requests(engines["standard"])[-1]["max_tokens"] == 75


# --- never silent --------------------------------------------------------------------------


def test_both_tiers_break_ends_with_error_event_and_done(gateway: str) -> None:
    _, events, comments = sse(
        gateway,
        f"q [[*: text={ANSWER}; per=1; gap=0.01]] "
        "[[highspeed: cut_after=25]] [[standard: cut_after=3]]",
    )
    assert events[-1] == "[DONE]"
    err = events[-2]["error"]
    assert err["code"] == "stream_broken" and err["type"] == "upstream_error"
    assert "highspeed" in err["message"] and "standard" in err["message"]
    assert content(events) == " ".join(ANSWER.split()[:28]) + " "  # all that was sent stays
    assert "highspeed:stream_cut" in comments[-1] and "standard:stream_cut" in comments[-1]


def test_tool_call_stream_cannot_be_continued(gateway: str) -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    _, events, _ = sse(gateway, "[[*: tool=f; args={}]] [[highspeed: stall_after=0]]", tools=tools)
    assert events[-1] == "[DONE]"
    assert events[-2]["error"]["code"] == "stream_broken"
    assert "cannot be continued" in events[-2]["error"]["message"]


def test_pinned_standard_has_nothing_to_continue_on(gateway: str) -> None:
    _, events, _ = sse(
        gateway, f"q [[*: text={ANSWER}; per=1; cut_after=25; gap=0.01]]", model="standard"
    )
    assert events[-1] == "[DONE]" and events[-2]["error"]["code"] == "stream_broken"


def test_openai_sdk_sees_the_error_event(client: Any) -> None:
    content = (
        f"[[*: text={ANSWER}; per=1; gap=0.01]] [[highspeed: cut_after=25]] "
        "[[standard: cut_after=3]]"
    )
    stream = client.chat.completions.with_streaming_response.create(
        model="auto", stream=True, messages=[{"role": "user", "content": content}]
    )
    with pytest.raises(openai.APIError, match="The stream broke off"), stream as r:
        list(r.parse())


@pytest.mark.parametrize(
    ("style", "flags"),
    [
        ("continue_final_message", {"continue_final_message": True}),
        (
            "continue_final_message_no_gen",
            {"continue_final_message": True, "add_generation_prompt": False},
        ),
        ("prefill", {}),
    ],
)
@pytest.mark.parametrize("echo", [False, True], ids=["no-echo", "echo"])
def test_continuation_styles_and_echoed_prefix(
    engines: dict[str, str],
    tmp_path_factory: pytest.TempPathFactory,
    style: str,
    flags: dict[str, Any],
    echo: bool,
) -> None:
    from tests.conftest import rules_for_tests, start_gateway

    rules = rules_for_tests()
    rules["tiers"]["standard"]["continuation"] = style
    proc, url = start_gateway(tmp_path_factory.mktemp("gw"), rules, engines)
    try:
        reset(engines)
        extra = "; echo_prefix" if echo else ""
        _, events, _ = sse(
            url,
            f"q [[*: text={ANSWER}; per=1; gap=0.01]] "
            f"[[highspeed: cut_after=25]] [[standard: x=1{extra}]]",
        )
        assert content(events) == ANSWER  # an echoed prefix is stripped, not repeated
        cont = engine_requests(engines["standard"])[-1]
        sent = {
            k: cont[k] for k in ("continue_final_message", "add_generation_prompt") if k in cont
        }
        assert sent == flags
    finally:
        proc.stop()


def test_text_that_only_starts_like_the_prefix_is_not_lost(
    gateway: str, engines: dict[str, str]
) -> None:
    # past the hold-back window, the stream breaks after w0..w24; the continuation starts
    # "w0 w1 other": "w0 w1 " is held as a possible echo of the prefix, then given back
    words = [f"w{i}" for i in range(25)] + ["w0", "w1", "other", "words", "here"]
    text = " ".join(words)
    reset(engines)
    _, events, comments = sse(
        gateway, f"q [[*: text={text}; per=1; gap=0.01]] [[highspeed: cut_after=25]]"
    )
    assert comments[-1].startswith(": x-gateway-fallback highspeed:stream_cut")
    assert content(events) == text


@pytest.mark.parametrize(
    ("fault", "reason", "prefix"),
    [
        ("cut_after=25", "highspeed:stream_cut", " ".join(ANSWER.split()[:25]) + " "),
        ("stall_after=25", "highspeed:stall", " ".join(ANSWER.split()[:25]) + " "),
        # the loop's unit ends in a space, like the text before it: the run starts there
        ("loop_after=20", "highspeed:check_repetition", " ".join(ANSWER.split()[:20])),
        ("leak_after=20", "highspeed:check_template_leak", " ".join(ANSWER.split()[:20]) + " "),
    ],
    ids=["cut", "stall", "loop", "leak"],
)
def test_a_non_streamed_answer_continues_the_good_text(
    gateway: str, engines: dict[str, str], fault: str, reason: str, prefix: str
) -> None:
    reset(engines)
    client = openai.OpenAI(base_url=gateway + "/v1", api_key="k", max_retries=0)
    raw = client.chat.completions.with_raw_response.create(
        model="auto",
        messages=[
            {"role": "user", "content": f"q [[*: text={ANSWER}; per=1]] [[highspeed: {fault}]]"}
        ],
    )
    resp = raw.parse()
    assert resp.choices[0].message.content == ANSWER  # no gap, no duplicate, no loop
    assert raw.headers["x-gateway-tier"] == "standard"
    assert raw.headers["x-gateway-fallback"].startswith(reason)
    assert raw.headers.get("x-gateway-continued") == f"highspeed:{len(prefix)}", raw.headers
    cont = engine_requests(engines["standard"])[-1]
    assert cont["messages"][-1] == {"role": "assistant", "content": prefix} and cont["stream"]
    rest = len(ANSWER.split()) - len(prefix.split())  # the continuation's own tokens
    assert resp.usage is not None and resp.usage.completion_tokens > rest  # both tiers
