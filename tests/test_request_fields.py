"""OpenAI's 400s for fields of the wrong type or out of range, answered before any engine.

Table-driven: the parser alone for each field, then the same table through a real socket
with the fake engines' request counts unchanged, the real ``openai`` client for a couple,
a body a browser sends without a preflight (``text/plain``), CORS's exposed headers and
``/v1/models`` behind the key when keys are required.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletionUserMessageParam

from gateway import headers as gh
from gateway.errors import InvalidField
from gateway.request.model import parse_chat, parse_completion
from tests.conftest import rules_for_tests, start_gateway
from tests.test_tenancy import tenancy_env

ORIGIN = "https://app.example"
USER: ChatCompletionUserMessageParam = {"role": "user", "content": "hi"}


def chat(**kw: Any) -> dict[str, Any]:
    return {"model": "auto", "messages": [USER], **kw}


def tool(name: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}


NAMED = {"type": "function", "function": {"name": "f"}}
IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}


# (id, body, param, code)
CHAT_CASES = [
    ("temperature-string", chat(temperature="hot"), "temperature", "invalid_type"),
    ("temperature-bool", chat(temperature=True), "temperature", "invalid_type"),
    ("temperature-high", chat(temperature=2.5), "temperature", "decimal_above_max_value"),
    ("temperature-low", chat(temperature=-0.1), "temperature", "decimal_below_min_value"),
    ("top-p-high", chat(top_p=1.5), "top_p", "decimal_above_max_value"),
    ("top-p-string", chat(top_p="1"), "top_p", "invalid_type"),
    ("presence-high", chat(presence_penalty=3), "presence_penalty", "decimal_above_max_value"),
    ("frequency-low", chat(frequency_penalty=-3), "frequency_penalty", "decimal_below_min_value"),
    ("n-1000", chat(n=1000), "n", "integer_above_max_value"),
    ("n-0", chat(n=0), "n", "integer_below_min_value"),
    ("n-string", chat(n="2"), "n", "invalid_type"),
    ("n-float", chat(n=1.5), "n", "invalid_type"),
    ("seed-string", chat(seed="x"), "seed", "invalid_type"),
    ("max-tokens-float", chat(max_tokens=1.5), "max_tokens", "invalid_value"),
    ("max-completion-0", chat(max_completion_tokens=0), "max_completion_tokens", "invalid_value"),
    ("stop-number", chat(stop=5), "stop", "invalid_type"),
    ("stop-too-many", chat(stop=list("abcde")), "stop", "array_above_max_length"),
    ("stop-item", chat(stop=["a", 1]), "stop[1]", "invalid_type"),
    ("logprobs-int", chat(logprobs=1), "logprobs", "invalid_type"),
    ("top-logprobs-high", chat(top_logprobs=21), "top_logprobs", "integer_above_max_value"),
    ("top-logprobs-string", chat(top_logprobs="3"), "top_logprobs", "invalid_type"),
    ("tool-choice-number", chat(tool_choice=5), "tool_choice", "invalid_type"),
    ("tool-choice-word", chat(tool_choice="always"), "tool_choice", "invalid_value"),
    ("tool-choice-no-type", chat(tool_choice={}), "tool_choice.type", "missing_required_parameter"),
    ("stream-options-list", chat(stream_options=[]), "stream_options", "invalid_type"),
    (
        "include-usage-string",
        chat(stream_options={"include_usage": "yes"}),
        "stream_options.include_usage",
        "invalid_type",
    ),
    ("response-format-string", chat(response_format="json"), "response_format", "invalid_type"),
    (
        "parallel-tools-string",
        chat(parallel_tool_calls="no"),
        "parallel_tool_calls",
        "invalid_type",
    ),
    (
        "user-without-content",
        chat(messages=[{"role": "user"}]),
        "messages[0].content",
        "missing_required_parameter",
    ),
    (
        "system-without-content",
        chat(messages=[{"role": "system"}, USER]),
        "messages[0].content",
        "missing_required_parameter",
    ),
    (
        "assistant-without-content-or-tools",
        chat(messages=[USER, {"role": "assistant"}, USER]),
        "messages[1].content",
        "missing_required_parameter",
    ),
    (
        "part-text-number",
        chat(messages=[{"role": "user", "content": [{"type": "text", "text": 5}]}]),
        "messages[0].content[0].text",
        "invalid_type",
    ),
    (
        "part-text-missing",
        chat(messages=[{"role": "user", "content": [{"type": "text"}]}]),
        "messages[0].content[0].text",
        "invalid_type",
    ),
    # contradictions and parts no engine takes (issue 43): each used to reach the engine
    ("tool-choice-named-no-tools", chat(tool_choice=NAMED), "tool_choice", "invalid_value"),
    ("tool-choice-required-no-tools", chat(tool_choice="required"), "tool_choice", "invalid_value"),
    (
        "tool-choice-named-not-a-tool",
        chat(tool_choice=NAMED, tools=[tool("g")]),
        "tool_choice",
        "invalid_value",
    ),
    (
        "tool-choice-function-unnamed",
        chat(tool_choice={"type": "function", "function": {}}, tools=[tool("f")]),
        "tool_choice.function.name",
        "missing_required_parameter",
    ),
    (
        "part-type-unknown",
        chat(messages=[{"role": "user", "content": [{"type": "hologram", "text": "hi"}]}]),
        "messages[0].content[0].type",
        "invalid_value",
    ),
    (
        "part-type-missing",
        chat(messages=[{"role": "user", "content": [{"image_url": {"url": "x"}}]}]),
        "messages[0].content[0].type",
        "missing_required_parameter",
    ),
    (
        "content-empty-array",
        chat(messages=[{"role": "user", "content": []}]),
        "messages[0].content",
        "empty_array",
    ),
    (
        "image-url-without-url",
        chat(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]),
        "messages[0].content[0].image_url.url",
        "missing_required_parameter",
    ),
    (
        "image-url-missing",
        chat(messages=[{"role": "user", "content": [{"type": "image_url"}]}]),
        "messages[0].content[0].image_url",
        "missing_required_parameter",
    ),
    (
        "stream-options-without-stream",
        chat(stream_options={"include_usage": True}),
        "stream_options",
        "invalid_value",
    ),
    (
        "stream-options-stream-false",
        chat(stream=False, stream_options={"include_usage": True}),
        "stream_options",
        "invalid_value",
    ),
]

TEXT_CASES = [
    ("text-logprobs-bool", {"logprobs": True}, "logprobs", "invalid_type"),
    ("text-logprobs-high", {"logprobs": 6}, "logprobs", "integer_above_max_value"),
    ("text-temperature", {"temperature": "hot"}, "temperature", "invalid_type"),
    ("text-n", {"n": 0}, "n", "integer_below_min_value"),
    ("text-stream-options", {"stream_options": {}}, "stream_options", "invalid_value"),
]


def _text(extra: dict[str, Any]) -> dict[str, Any]:
    return {"model": "auto", "prompt": "hi", **extra}


@pytest.mark.parametrize(
    ("body", "param", "code"), [c[1:] for c in CHAT_CASES], ids=[c[0] for c in CHAT_CASES]
)
def test_parser_refuses_chat_field(body: dict[str, Any], param: str, code: str) -> None:
    with pytest.raises(InvalidField) as e:
        parse_chat(json.dumps(body).encode())
    assert (e.value.param, e.value.code, e.value.status) == (param, code, 400)
    assert param in str(e.value)


@pytest.mark.parametrize(
    ("extra", "param", "code"), [c[1:] for c in TEXT_CASES], ids=[c[0] for c in TEXT_CASES]
)
def test_parser_refuses_text_field(extra: dict[str, Any], param: str, code: str) -> None:
    with pytest.raises(InvalidField) as e:
        parse_completion(json.dumps(_text(extra)).encode())
    assert (e.value.param, e.value.code) == (param, code)


VALID = [
    chat(temperature=0, top_p=1, n=2, seed=-3, stop=["a", "b"], logprobs=True, top_logprobs=5),
    chat(temperature=2, presence_penalty=-2.0, frequency_penalty=2, tool_choice="auto"),
    chat(tool_choice=NAMED, tools=[tool("f")], stream=True, stream_options={}),
    chat(tool_choice="required", tools=[tool("f")]),
    chat(tool_choice="none"),  # "none" and "auto" ask for nothing the tools must have
    chat(messages=[USER, {"role": "assistant", "tool_calls": [{"id": "1"}]}, USER]),
    chat(messages=[{"role": "user", "content": [IMAGE, {"type": "text", "text": "what?"}]}]),
    chat(messages=[{"role": "user", "content": [{"type": "video_url", "video_url": {}}]}]),
    chat(stop="x", stream=True, stream_options={"include_usage": True}, parallel_tool_calls=False),
]


@pytest.mark.parametrize("body", VALID, ids=[str(i) for i in range(len(VALID))])
def test_parser_keeps_valid_fields(body: dict[str, Any]) -> None:
    assert parse_chat(json.dumps(body).encode()).body == body  # passed on unchanged
    parse_completion(json.dumps(_text({"logprobs": 5, "n": 3})).encode())


# -- through a real socket --------------------------------------------------------------------
def _http(
    url: str, body: bytes | None = None, headers: dict[str, str] | None = None, method: str = "POST"
) -> tuple[int, Any, Any]:
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            raw, status, h = r.read(), r.status, r.headers
    except urllib.error.HTTPError as e:
        raw, status, h = e.read(), e.code, e.headers
    return status, json.loads(raw) if raw else None, h


def _engine_counts(engines: dict[str, str]) -> dict[str, int]:
    return {n: len(_http(f"{u}/_requests", method="GET")[1]) for n, u in engines.items()}


JSON = {"Content-Type": "application/json"}


@pytest.mark.processes
@pytest.mark.parametrize(
    ("body", "param", "code"), [c[1:] for c in CHAT_CASES], ids=[c[0] for c in CHAT_CASES]
)
def test_gateway_answers_400_before_the_engine(
    gateway: str, engines: dict[str, str], body: dict[str, Any], param: str, code: str
) -> None:
    before = _engine_counts(engines)
    url = f"{gateway}/v1/chat/completions"
    status, payload, _ = _http(url, json.dumps(body).encode(), JSON)
    assert status == 400
    err = payload["error"]
    assert (err["type"], err["param"], err["code"]) == ("invalid_request_error", param, code)
    assert _engine_counts(engines) == before  # nothing reached an engine


@pytest.mark.processes
def test_openai_client_sees_the_param(client: openai.OpenAI, engines: dict[str, str]) -> None:
    before = _engine_counts(engines)
    with pytest.raises(openai.BadRequestError) as e:
        # a string temperature on purpose: the gateway must name the param (the SDK's types
        # refuse it, so no overload matches)
        client.chat.completions.create(model="auto", messages=[USER], temperature="hot")  # type: ignore[call-overload]
    assert e.value.param == "temperature" and e.value.code == "invalid_type"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="auto", messages=[USER], n=1000)
    assert e.value.param == "n" and e.value.code == "integer_above_max_value"
    with pytest.raises(openai.BadRequestError) as e:
        # a string seed on purpose, as above
        client.completions.create(model="auto", prompt="hi", seed="x")  # type: ignore[call-overload]
    assert e.value.param == "seed"
    assert _engine_counts(engines) == before
    ok = client.chat.completions.create(model="auto", messages=[USER], temperature=0.2, n=1)
    assert ok.choices[0].message.content is not None


@pytest.mark.processes
@pytest.mark.parametrize(
    ("ctype", "origin", "status"),
    [
        ("text/plain", None, 415),
        ("text/plain;charset=UTF-8", ORIGIN, 415),
        ("multipart/form-data; boundary=x", None, 415),
        ("application/x-www-form-urlencoded", ORIGIN, 415),
        ("application/x-www-form-urlencoded", None, 200),  # curl -d, urllib: no Origin
        ("application/json", ORIGIN, 200),
    ],
)
def test_browser_simple_bodies_are_refused(
    gateway: str, engines: dict[str, str], ctype: str, origin: str | None, status: int
) -> None:
    before = sum(_engine_counts(engines).values())
    h = {"Content-Type": ctype, **({"Origin": origin} if origin else {})}
    got, payload, _ = _http(f"{gateway}/v1/chat/completions", json.dumps(chat()).encode(), h)
    assert got == status
    if status == 415:
        assert payload["error"]["code"] == "unsupported_content_type"
        assert sum(_engine_counts(engines).values()) == before
    else:
        assert sum(_engine_counts(engines).values()) == before + 1


# -- CORS and /v1/models with keys required ----------------------------------------------------
@pytest.fixture(scope="module")
def keyed(
    engines: dict[str, str], prefix: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    env = {**tenancy_env(prefix), "GATEWAY_CORS_ORIGINS": ORIGIN}
    proc, url = start_gateway(tmp_path_factory.mktemp("gw"), rules_for_tests(), engines, env)
    yield url
    proc.stop()


@pytest.mark.processes
def test_every_gateway_header_is_exposed(keyed: str) -> None:
    pre = {
        "Origin": ORIGIN,
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type",
    }
    status, _, h = _http(f"{keyed}/v1/chat/completions", method="OPTIONS", headers=pre)
    assert status == 204 and h["Access-Control-Allow-Origin"] == ORIGIN
    status, _, h = _http(f"{keyed}/v1/models", method="GET", headers={"Origin": ORIGIN})
    exposed = {v.strip() for v in h["Access-Control-Expose-Headers"].split(",")}
    constants = {v for k, v in vars(gh).items() if k.startswith("H_")}
    assert constants <= exposed  # every header constant, so the list cannot drift
    for name in ("x-gateway-cost-usd", "x-gateway-queue-ms", "x-gateway-continued"):
        assert name in exposed
    assert {n for n in exposed if n.startswith("x-ratelimit-")} == {
        "x-ratelimit-limit-requests",
        "x-ratelimit-remaining-requests",
        "x-ratelimit-reset-requests",
        "x-ratelimit-limit-tokens",
        "x-ratelimit-remaining-tokens",
    }


@pytest.mark.processes
@pytest.mark.parametrize("path", ["/v1/models", "/v1/models/auto"])
@pytest.mark.parametrize("auth", [None, "Bearer sk-not-a-key"], ids=["no-key", "bad-key"])
def test_models_needs_a_key_when_keys_are_required(keyed: str, path: str, auth: str | None) -> None:
    h = {"Authorization": auth} if auth else {}
    status, payload, _ = _http(f"{keyed}{path}", method="GET", headers=h)
    chat_status, chat_payload, _ = _http(
        f"{keyed}/v1/chat/completions", json.dumps(chat()).encode(), {**JSON, **h}
    )
    assert status == chat_status == 401
    assert payload["error"]["code"] == chat_payload["error"]["code"]


@pytest.mark.processes
def test_openai_client_is_refused_the_model_list_without_a_valid_key(keyed: str) -> None:
    c = openai.OpenAI(base_url=f"{keyed}/v1", api_key="sk-wrong", max_retries=0)
    with c, pytest.raises(openai.AuthenticationError):
        c.models.list()


def test_admin_store_503_names_no_address(caplog: pytest.LogCaptureFixture) -> None:
    import asyncio

    from starlette.applications import Starlette
    from starlette.requests import Request

    from gateway.admin.app import _store_unavailable
    from gateway.errors import StoreUnavailable

    app = Starlette()
    req = Request({"type": "http", "app": app, "method": "GET", "path": "/", "headers": []})
    cause = StoreUnavailable("Error 111 connecting to 10.0.0.7:6391. Connection refused.")
    with caplog.at_level("WARNING", logger="gateway.admin"):
        for _ in range(3):
            resp = asyncio.run(_store_unavailable(req, cause))
    body = json.loads(bytes(resp.body))
    assert resp.status_code == 503 and "unavailable" in body["error"]["message"]
    assert "10.0.0.7" not in json.dumps(body) and "6391" not in json.dumps(body)
    assert [r.getMessage().count("10.0.0.7:6391") for r in caplog.records] == [1]  # logged once


def test_rules_history_agrees_after_the_store_comes_back_empty(tmp_path: Any) -> None:
    import asyncio

    from gateway.rules.control import RulesControl
    from gateway.store.memory_store import MemoryStore

    text = _rules_text()
    path = tmp_path / "r.yaml"
    path.write_text(text)

    async def scenario() -> tuple[int, list[Any], int, list[Any]]:
        store = MemoryStore()
        control = RulesControl(store, path, text, lambda _: None, None, 0)
        await control.start()
        before = control.version, await store.rules_versions()
        empty = MemoryStore()  # the same Redis, restarted without its data
        control.store = empty
        await control.resync()
        return (*before, control.version, await empty.rules_versions())

    v0, hist0, v1, hist1 = asyncio.run(scenario())
    assert v0 == 1 and [h["version"] for h in hist0] == [1]
    assert [h["version"] for h in hist1 if h["current"]] == [v1] == [1]


def _rules_text() -> str:
    import yaml

    return yaml.safe_dump(rules_for_tests())
