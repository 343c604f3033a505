"""``POST /v1/messages`` end to end: Anthropic's own Python SDK -> the gateway process -> fake
engine processes, real sockets.

Create, stream (text and tool use, the raw event sequence too), tool results, the request
fields that reach the engine, a mid-stream loop finished by the standard tier in one clean
Messages stream, ``count_tokens``, and errors raising the SDK's own exception types (the
engine's 400, every tier failing, a bad request; with tenancy: a wrong key, a tier the key
may not use, a rate limit, and a strict gateway's unknown model).
"""

from __future__ import annotations

import contextlib
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

from tests.conftest import Proc, rules_for_tests, start_gateway
from tests.test_e2e_proxy import engine_requests, reset
from tests.test_tenancy import new_tenant, tenancy_env

pytestmark = [pytest.mark.processes]

WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}
CALL = '[[*: tool=get_weather; args={"city": "Paris"}]]'
ANSWER = " ".join(f"word{i}" for i in range(40))


@pytest.fixture()
def ac(gateway: str) -> Iterator[Any]:
    """Anthropic's client (typed ``Any``: the tests send dicts its TypedDicts would refuse)."""
    c = anthropic.Anthropic(base_url=gateway, api_key="unused", max_retries=0, timeout=20)
    yield c
    c.close()


def user(text: str) -> Any:
    return [{"role": "user", "content": text}]


def _body(e: anthropic.APIStatusError) -> Any:
    return e.body


def raw_events(gateway: str, body: dict[str, Any]) -> tuple[dict[str, str], list[tuple[str, Any]]]:
    """A streamed request's headers and its SSE events as sent: (event name, data), and the
    comment lines as (":", line) at the end."""
    req = urllib.request.Request(
        f"{gateway}/v1/messages",
        data=json.dumps({**body, "stream": True}).encode(),
        headers={"Content-Type": "application/json", "anthropic-version": "2023-06-01"},
    )
    with urllib.request.urlopen(req, timeout=20) as r:
        headers = {k.lower(): v for k, v in r.headers.items()}
        raw = r.read().decode()
    events: list[tuple[str, Any]] = []
    comments: list[tuple[str, Any]] = []
    for block in raw.split("\n\n"):
        lines = block.split("\n")
        if lines[0].startswith(":"):
            comments.append((":", lines[0]))
        elif lines[0].startswith("event: "):
            events.append((lines[0][7:], json.loads(lines[1][6:])))
    return headers, events + comments


def assert_one_message(events: list[tuple[str, Any]]) -> None:
    """Anthropic's sequence: message_start, ping, blocks (start, deltas, stop), message_delta,
    message_stop; once each, blocks numbered from 0 and never open two at a time."""
    names = [n for n, _ in events if n != ":"]
    assert names[:2] == ["message_start", "ping"]
    assert names[-2:] == ["message_delta", "message_stop"]
    assert names.count("message_start") == names.count("message_stop") == 1
    open_block: int | None = None
    seen = 0
    for name, data in events:
        if name == "content_block_start":
            assert open_block is None and data["index"] == seen
            open_block, seen = data["index"], seen + 1
        elif name == "content_block_delta":
            assert data["index"] == open_block
        elif name == "content_block_stop":
            assert data["index"] == open_block
            open_block = None
    assert open_block is None


# --- create and stream --------------------------------------------------------------------


def test_create_answers_a_message_with_the_gateways_headers(ac: Any) -> None:
    raw = ac.messages.with_raw_response.create(
        model="claude-sonnet-4-5", max_tokens=100, messages=user("Hello there")
    )
    msg = raw.parse()
    assert msg.type == "message" and msg.role == "assistant"
    assert msg.content[0].type == "text" and msg.content[0].text == "Echo (highspeed): Hello there"
    assert msg.stop_reason == "end_turn" and msg.stop_sequence is None
    assert msg.usage.input_tokens == 10 and msg.usage.output_tokens > 0
    assert msg.id.startswith("msg_") and msg.model == "fake-highspeed"
    assert raw.headers["x-gateway-tier"] == "highspeed"
    route = raw.headers["x-gateway-route"]
    assert route.startswith("default; task=chat")  # classified and routed as chat would be
    assert (
        'model "claude-sonnet-4-5" by alias "*"' in route and 'served by "fake-highspeed"' in route
    )
    assert raw.headers["x-request-id"].startswith("req_")


def test_the_request_fields_reach_the_engine_as_chat(ac: Any, engines: dict[str, str]) -> None:
    reset(engines)
    ac.messages.create(
        model="auto",
        max_tokens=64,
        system=[{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
        messages=[
            {"role": "user", "content": [{"type": "text", "text": "first"}]},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "second"},
        ],
        stop_sequences=["END"],
        # sampling fields: this SDK version's create() no longer names them; older ones do
        extra_body={"temperature": 0.2, "top_p": 0.9, "top_k": 5},
        metadata={"user_id": "u-42"},
        extra_headers={"anthropic-beta": "tools-2024-05-16"},
    )
    body = engine_requests(engines["highspeed"])[-1]
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "second"},
    ]
    assert body["max_tokens"] == 64 and body["stop"] == ["END"] and body["user"] == "u-42"
    assert (body["temperature"], body["top_p"], body["top_k"]) == (0.2, 0.9, 5)
    assert body["model"] == "fake-highspeed"  # the tier's own name, whatever the client sent


def test_stream_sends_anthropics_event_sequence(gateway: str) -> None:
    body = {"model": "auto", "max_tokens": 100, "messages": user(f"q [[*: text={ANSWER}]]")}
    headers, events = raw_events(gateway, body)
    assert headers["content-type"].startswith("text/event-stream")
    assert headers["x-gateway-tier"] == "highspeed"
    assert_one_message(events)
    start = events[0][1]["message"]
    assert start["role"] == "assistant" and start["content"] == [] and start["stop_reason"] is None
    assert events[2][1]["content_block"] == {"type": "text", "text": ""}
    deltas = [d["delta"] for n, d in events if n == "content_block_delta"]
    assert all(d["type"] == "text_delta" for d in deltas) and len(deltas) > 1
    assert "".join(d["text"] for d in deltas) == ANSWER
    done = next(d for n, d in events if n == "message_delta")
    assert done["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}
    assert done["usage"]["output_tokens"] > 0 and done["usage"]["input_tokens"] == 10


def test_stream_helper_text_and_final_message(ac: Any) -> None:
    with ac.messages.stream(model="auto", max_tokens=100, messages=user("stream me")) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert text == "Echo (highspeed): stream me"
    assert final.content[0].text == text and final.stop_reason == "end_turn"
    assert final.usage.input_tokens == 10


def test_tool_use_created_and_streamed(ac: Any, gateway: str) -> None:
    msg = ac.messages.create(
        model="auto", max_tokens=100, tools=[WEATHER], messages=user(f"weather? {CALL}")
    )
    assert msg.stop_reason == "tool_use"
    call_block = msg.content[-1]
    assert call_block.type == "tool_use"
    assert (call_block.name, call_block.input, call_block.id) == (
        "get_weather",
        {"city": "Paris"},
        "call_1",
    )
    with ac.messages.stream(
        model="auto", max_tokens=100, tools=[WEATHER], messages=user(f"weather? {CALL}")
    ) as s:
        final = s.get_final_message()
    assert final.stop_reason == "tool_use" and final.content[-1].input == {"city": "Paris"}
    body = {
        "model": "auto",
        "max_tokens": 100,
        "tools": [WEATHER],
        "messages": user(f"weather? {CALL}"),
    }
    _, events = raw_events(gateway, body)
    assert_one_message(events)
    starts = [d["content_block"] for n, d in events if n == "content_block_start"]
    assert starts == [{"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {}}]
    parts = [d["delta"] for n, d in events if n == "content_block_delta"]
    assert {p["type"] for p in parts} == {"input_json_delta"}
    assert json.loads("".join(p["partial_json"] for p in parts)) == {"city": "Paris"}


def test_tool_results_go_back_as_tool_messages(ac: Any, engines: dict[str, str]) -> None:
    reset(engines)
    msg = ac.messages.create(
        model="auto",
        max_tokens=100,
        tools=[WEATHER],
        messages=[
            {"role": "user", "content": "weather in Paris?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Let me look."},
                    {
                        "type": "tool_use",
                        "id": "toolu_1",
                        "name": "get_weather",
                        "input": {"city": "Paris"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny, 21C"},
                    {"type": "text", "text": "[[*: text=It is sunny.]]"},
                ],
            },
        ],
    )
    assert msg.content[0].text == "It is sunny." and msg.stop_reason == "end_turn"
    got = engine_requests(engines["highspeed"])[-1]["messages"]
    assert got[1]["role"] == "assistant" and got[1]["content"] == "Let me look."
    assert got[1]["tool_calls"] == [
        {
            "id": "toolu_1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
        }
    ]
    assert got[2] == {"role": "tool", "tool_call_id": "toolu_1", "content": "sunny, 21C"}
    assert got[3] == {"role": "user", "content": "[[*: text=It is sunny.]]"}


def test_a_loop_mid_stream_is_finished_by_the_standard_tier_in_one_stream(
    gateway: str, engines: dict[str, str]
) -> None:
    reset(engines)
    content = f"q [[*: text={ANSWER}; per=1]] [[highspeed: loop_after=20; gap=0.005]]"
    headers, events = raw_events(
        gateway, {"model": "auto", "max_tokens": 500, "messages": user(content)}
    )
    assert headers["x-gateway-tier"] == "highspeed"  # the first byte came from it
    assert_one_message(events)
    text = "".join(d["delta"]["text"] for n, d in events if n == "content_block_delta")
    clean = " ".join(ANSWER.split()[:20]) + " "
    rest = " ".join(ANSWER.split()[20:])
    assert text.startswith(clean) and text.endswith(rest)
    looped = text[len(clean) : len(text) - len(rest)]
    assert looped.replace("I will repeat this sentence again. ", "").strip() == ""
    comments = [c for n, c in events if n == ":"]
    assert any(c.startswith(": x-gateway-fallback highspeed:check_repetition") for c in comments)
    assert engine_requests(engines["standard"])  # the standard tier continued it
    done = next(d for n, d in events if n == "message_delta")
    assert done["delta"]["stop_reason"] == "end_turn"


def test_the_token_limit_is_max_tokens(ac: Any) -> None:
    msg = ac.messages.create(model="auto", max_tokens=5, messages=user("x [[*: length]]"))
    assert msg.stop_reason == "max_tokens"


def test_count_tokens_is_the_gateways_estimate(ac: Any) -> None:
    text = "count these words please, " * 20  # 520 characters
    got = ac.messages.count_tokens(model="claude-sonnet-4-5", messages=user(text))
    assert got.input_tokens == len(text) // 4
    with_tools = ac.messages.count_tokens(
        model="claude-sonnet-4-5", system="Be brief.", messages=user(text), tools=[WEATHER]
    )
    assert with_tools.input_tokens > got.input_tokens  # the system prompt and the tools count


# --- errors, as the SDK's own exceptions -----------------------------------------------------


def test_an_engines_400_is_a_bad_request_with_its_message(ac: Any, engines: dict[str, str]) -> None:
    reset(engines)
    with pytest.raises(anthropic.BadRequestError) as e:
        ac.messages.create(model="auto", max_tokens=10, messages=user("[[highspeed: status=400]]"))
    body = e.value.body
    assert isinstance(body, dict) and body["type"] == "error"
    assert body["error"] == {"type": "invalid_request_error", "message": "highspeed says 400"}
    assert engine_requests(engines["standard"]) == []  # the request's own fault: not retried


def test_every_tier_failing_is_an_api_error(ac: Any) -> None:
    with pytest.raises(anthropic.InternalServerError) as e:
        ac.messages.create(model="auto", max_tokens=10, messages=user("[[*: status=500]]"))
    assert e.value.status_code == 502
    assert isinstance(e.value.body, dict) and e.value.body["error"]["type"] == "api_error"
    assert e.value.response.headers["x-should-retry"] == "false"


def test_a_bad_request_is_the_sdks_bad_request(ac: Any, gateway: str) -> None:
    with pytest.raises(anthropic.BadRequestError) as e:
        ac.messages.create(
            model="auto",
            max_tokens=10,
            messages=[{"role": "robot", "content": "x"}],
        )
    assert "messages[0].role" in e.value.message
    # the max_tokens Anthropic requires, and an unknown path under /v1/messages
    for path, payload in (
        ("/v1/messages", {"model": "auto", "messages": user("x")}),
        ("/v1/messages/nope", {}),
    ):
        req = urllib.request.Request(
            gateway + path,
            data=json.dumps(payload).encode(),
            headers={"Content-Type": "application/json"},
        )
        with pytest.raises(urllib.error.HTTPError) as he:
            urllib.request.urlopen(req, timeout=10)
        with he.value:
            err = json.loads(he.value.read())
        assert err["type"] == "error" and err["request_id"].startswith("req_")
        assert err["error"]["type"] == (
            "invalid_request_error" if path == "/v1/messages" else "not_found_error"
        )


# --- tenancy: keys by x-api-key or Authorization, and the errors of a policy ------------------


@pytest.fixture(scope="module")
def tenanted(
    engines: dict[str, str], prefix: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Proc]:
    """A gateway with keys required, on the strict choice of model names (no ``"*"``)."""
    rules = rules_for_tests()
    del rules["aliases"]["*"]
    proc, _ = start_gateway(tmp_path_factory.mktemp("gw"), rules, engines, tenancy_env(prefix))
    yield proc
    proc.stop()


def test_keys_policies_and_their_errors(tenanted: Proc) -> None:
    url = tenanted.url.removesuffix("/healthz")
    _, _, key = new_tenant(tenanted.admin, {"allowed_tiers": ["highspeed"]})
    _, _, limited = new_tenant(tenanted.admin, {"requests_per_minute": 1})
    with contextlib.ExitStack() as stack:

        def client(**kw: Any) -> Any:
            return stack.enter_context(
                anthropic.Anthropic(base_url=url, max_retries=0, timeout=20, **kw)
            )

        def ask(c: Any, model: str = "auto") -> Any:
            return c.messages.create(model=model, max_tokens=10, messages=user("hi"))

        for c in (client(api_key=key), client(auth_token=key)):  # x-api-key, or Bearer
            assert ask(c).content
        with pytest.raises(anthropic.AuthenticationError) as auth:
            ask(client(api_key="sk-wrong"))
        assert _body(auth.value)["error"]["type"] == "authentication_error"
        with pytest.raises(anthropic.PermissionDeniedError):  # a tier the key may not use
            ask(client(api_key=key), "standard")
        with pytest.raises(anthropic.NotFoundError) as nf:  # the strict choice: unknown name
            ask(client(api_key=key), "claude-x")
        assert "claude-x" in nf.value.message
        once = client(api_key=limited)
        ask(once)
        with pytest.raises(anthropic.RateLimitError) as rl:
            ask(once)
        assert _body(rl.value)["error"]["type"] == "rate_limit_error"
        # the OpenAI side of the same strict gateway: a 404 model_not_found
        oa = stack.enter_context(openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0))
        with pytest.raises(openai.NotFoundError) as onf:
            oa.chat.completions.create(model="gpt-4o-mini", messages=user("hi"))
        assert onf.value.code == "model_not_found"


# --- the cache and hedging: a hit replayed as a Messages answer or stream; a hedge won ------


@pytest.fixture(scope="module")
def cached(engines: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The default rule keeps a cache and hedges a first token later than 0.2 s."""
    rules = rules_for_tests()
    rules["default"]["cache"] = {"ttl": 600}
    rules["default"]["hedge_after"] = 0.2
    proc, url = start_gateway(tmp_path_factory.mktemp("gw"), rules, engines)
    yield url
    proc.stop()


def test_a_slow_first_token_is_hedged_on_the_next_tier(cached: str) -> None:
    content = "hedge me [[highspeed: delay=3]]"
    with anthropic.Anthropic(base_url=cached, api_key="x", max_retries=0, timeout=20) as c:
        ac: Any = c
        raw = ac.messages.with_raw_response.create(
            model="auto", max_tokens=50, messages=user(content)
        )
    assert raw.headers["x-gateway-tier"] == "standard"
    assert raw.headers["x-gateway-hedge"].startswith("standard after 0.2s; standard won")
    assert raw.parse().content[0].text == "Echo (standard): hedge me"
    _, events = raw_events(cached, {"model": "auto", "max_tokens": 50, "messages": user(content)})
    assert_one_message(events)
    with urllib.request.urlopen(f"{cached}/metrics", timeout=10) as r:
        assert 'tier="standard"' in r.read().decode()  # counted like any request


def test_a_cache_hit_is_a_message_and_a_messages_stream(
    cached: str, engines: dict[str, str]
) -> None:
    reset(engines)
    # temperature 0: a cache keeps only answers the client asked to be repeatable
    body = {"model": "claude-x", "max_tokens": 50, "messages": user("remember me")}
    with anthropic.Anthropic(base_url=cached, api_key="x", max_retries=0) as c:
        ac: Any = c
        first = ac.messages.with_raw_response.create(**body, extra_body={"temperature": 0})
        again = ac.messages.with_raw_response.create(**body, extra_body={"temperature": 0})
    assert first.headers["x-gateway-cache"] == "miss" and again.headers["x-gateway-cache"] == "hit"
    assert again.parse().content[0].text == first.parse().content[0].text
    assert again.parse().type == "message"
    assert len(engine_requests(engines["highspeed"])) == 1
    # the stream of the same request: a hit too
    headers, events = raw_events(cached, {**body, "temperature": 0})
    assert headers["x-gateway-cache"] == "hit"
    assert_one_message(events)
    text = "".join(d["delta"]["text"] for n, d in events if n == "content_block_delta")
    assert text == first.parse().content[0].text
