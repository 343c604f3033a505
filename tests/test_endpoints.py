"""Own engines by URL and the endpoints clients call, through real sockets and real clients.

The engines are fake engines that, like vLLM, answer 404 to a model name they do not
serve; the tiers name no model, so the gateway must discover it from ``/v1/models``.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionToolUnionParam
from openai.types.responses import FunctionToolParam, ResponseInputItemParam
from pydantic import BaseModel

from tests.conftest import rules_for_tests, start_engine, start_gateway

pytestmark = pytest.mark.processes

ORIGIN = "https://app.example"
# The SDK's FunctionToolParam marks ``strict`` Required, but the API takes a tool without
# it, and clients send it so: the cast keeps the request as they send it.
WEATHER = cast(
    FunctionToolParam,
    {
        "type": "function",
        "name": "get_weather",
        "description": "Weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
)


@pytest.fixture(scope="module")
def strict_engines() -> Iterator[dict[str, str]]:
    hs, hs_url = start_engine("highspeed", "--model", "org/fast-7b", "--strict")
    st, st_url = start_engine("standard", "--model", "org/std-7b", "--strict")
    yield {"highspeed": hs_url, "standard": st_url}
    hs.stop()
    st.stop()


@pytest.fixture(scope="module")
def gw(strict_engines: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    rules = rules_for_tests()
    rules["tiers"]["standard"]["embeddings"] = True
    for tier in rules["tiers"].values():
        assert "model" not in tier and "request_defaults" not in tier  # all discovered
    env = {"GATEWAY_CORS_ORIGINS": ORIGIN, "GATEWAY_METRICS_TOKEN": METRICS_TOKEN}
    proc, url = start_gateway(tmp_path_factory.mktemp("gw"), rules, strict_engines, env)
    yield url
    proc.stop()


@pytest.fixture()
def oa(gw: str) -> Iterator[openai.OpenAI]:
    c = openai.OpenAI(base_url=f"{gw}/v1", api_key="unused", max_retries=0, timeout=20)
    yield c
    c.close()


METRICS_TOKEN = "metrics-token-0123456789"
OPERATOR = {"Authorization": f"Bearer {METRICS_TOKEN}"}  # /readyz's detail


def get(
    url: str, method: str = "GET", headers: dict[str, str] | None = None
) -> tuple[int, Any, bytes]:
    req = urllib.request.Request(url, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def received(engine: str) -> list[dict[str, Any]]:
    requests: list[dict[str, Any]] = json.loads(get(f"{engine}/_requests")[2])
    return requests


# -- part 1: own engines by URL -------------------------------------------------------------------
def test_engines_that_check_model_names_answer(
    oa: openai.OpenAI, strict_engines: dict[str, str]
) -> None:
    r = oa.chat.completions.with_raw_response.create(
        model="auto", messages=[{"role": "user", "content": "hello"}]
    )
    assert r.http_response.status_code == 200
    assert r.headers["x-gateway-tier"] == "highspeed"
    assert r.parse().choices[0].message.content == "Echo (highspeed): hello"
    sent = received(strict_engines["highspeed"])[-1]
    assert sent["model"] == "org/fast-7b" and "frequency_penalty" not in sent
    # the discovered name pins its tier; the standard engine gets its own name
    r2 = oa.chat.completions.with_raw_response.create(
        model="org/std-7b", messages=[{"role": "user", "content": "hi"}]
    )
    assert r2.headers["x-gateway-tier"] == "standard"
    assert received(strict_engines["standard"])[-1]["model"] == "org/std-7b"


def test_models_list_what_the_tiers_serve(oa: openai.OpenAI, gw: str) -> None:
    ids = [m.id for m in oa.models.list()]
    assert "org/fast-7b" in ids and "org/std-7b" in ids and "auto" in ids
    assert not any("smollm2" in i for i in ids)
    assert oa.models.retrieve("org/fast-7b").id == "org/fast-7b"
    assert oa.models.retrieve("auto").id == "auto"
    with pytest.raises(openai.NotFoundError) as e:
        oa.models.retrieve("no-such-model")
    assert e.value.code == "model_not_found"
    status, _, body = get(f"{gw}/readyz", headers=OPERATOR)
    assert status == 200
    models = json.loads(body)["models"]
    assert models["highspeed"]["model"] == "org/fast-7b"
    assert models["highspeed"]["source"] == "discovered"
    assert models["highspeed"]["replicas_disagree"] is False


def test_configured_model_and_replicas_that_disagree(
    strict_engines: dict[str, str], tmp_path: Path
) -> None:
    other, other_url = start_engine("highspeed", "--model", "org/other")
    urls = {
        "highspeed": f"{strict_engines['highspeed']},{other_url}",
        **{"standard": strict_engines["standard"]},
    }
    env = {"GATEWAY_POOL_STANDARD_MODEL": "org/std-7b", "GATEWAY_METRICS_TOKEN": METRICS_TOKEN}
    proc, url = start_gateway(tmp_path, rules_for_tests(), urls, env)
    try:
        models = json.loads(get(f"{url}/readyz", headers=OPERATOR)[2])["models"]
        assert models["standard"] == {"model": "org/std-7b", "source": "configured"}
        assert models["highspeed"]["replicas_disagree"] is True
        assert set(models["highspeed"]["replicas"].values()) == {"org/fast-7b", "org/other"}
        assert "serve different models" in proc.log()
        # no tier serves embeddings here: a clear 404
        c = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=10)
        with pytest.raises(openai.NotFoundError) as e:
            c.embeddings.create(model="auto", input="hi")
        assert "embeddings" in e.value.message
        # CORS is off by default: a preflight is not answered
        status, _, _ = get(f"{url}/v1/models", "OPTIONS", _preflight_headers())
        assert status == 405
    finally:
        proc.stop()
        other.stop()


# -- part 2: the endpoints clients call ----------------------------------------------------------
def test_embeddings(oa: openai.OpenAI, strict_engines: dict[str, str]) -> None:
    r = oa.embeddings.with_raw_response.create(model="auto", input=["one", "three"])
    assert r.headers["x-gateway-tier"] == "standard"
    data = r.parse().data
    assert [round(x) for x in data[1].embedding] == [5, 1, 0] and len(data) == 2
    assert received(strict_engines["standard"])[-1]["model"] == "org/std-7b"
    floats = oa.embeddings.create(
        model="text-embedding-3-small", input="abc", encoding_format="float"
    )
    assert floats.data[0].embedding[0] == 3.0
    with pytest.raises(openai.BadRequestError) as e:
        # a missing input on purpose: the SDK's types refuse it, the gateway must too
        oa.embeddings.create(model="auto", input=None)  # type: ignore[arg-type]
    assert e.value.param == "input"


def test_responses_create(oa: openai.OpenAI, strict_engines: dict[str, str]) -> None:
    r = oa.responses.with_raw_response.create(
        model="auto", instructions="Be brief.", input="hello", max_output_tokens=50
    )
    assert r.headers["x-gateway-tier"] == "highspeed"
    resp = r.parse()
    assert resp.status == "completed" and resp.output_text == "Echo (highspeed): hello"
    assert resp.usage is not None and resp.usage.input_tokens == 10
    sent = received(strict_engines["highspeed"])[-1]
    assert sent["messages"][0] == {"role": "system", "content": "Be brief."}
    assert sent["max_tokens"] == 50 and sent["model"] == "org/fast-7b"


def test_responses_fallback_and_checks(oa: openai.OpenAI) -> None:
    r = oa.responses.with_raw_response.create(model="auto", input="[[highspeed: loop]] x")
    assert r.headers["x-gateway-tier"] == "standard"
    assert "repetition" in r.headers["x-gateway-fallback"]
    assert r.parse().output_text.startswith("Echo (standard)")


def test_responses_stream(oa: openai.OpenAI) -> None:
    events = list(
        oa.responses.create(model="auto", input="[[highspeed: status=500]] stream me", stream=True)
    )
    types = [e.type for e in events]
    assert types[:2] == ["response.created", "response.in_progress"]
    assert "response.output_text.delta" in types and types[-1] == "response.completed"
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == "Echo (standard): stream me"
    completed = events[-1]
    assert completed.type == "response.completed"  # as asserted above; narrows the type
    assert completed.response.output_text == text
    assert [e.sequence_number for e in events] == list(range(1, len(events) + 1))
    with oa.responses.stream(model="auto", input="helper") as s:
        final = s.get_final_response()
    assert final.output_text == "Echo (highspeed): helper"


def test_responses_tools(oa: openai.OpenAI, strict_engines: dict[str, str]) -> None:
    prompt = '[[*: tool=get_weather; args={"city": "Paris"}]] weather?'
    r = oa.responses.create(model="auto", input=prompt, tools=[WEATHER])
    call = r.output[0]
    assert call.type == "function_call" and call.name == "get_weather"
    assert json.loads(call.arguments) == {"city": "Paris"}
    sent = received(strict_engines["highspeed"])[-1]
    assert sent["tools"][0]["function"]["name"] == "get_weather"
    follow: list[ResponseInputItemParam] = [
        {"role": "user", "content": "weather?"},
        {
            "type": "function_call",
            "call_id": call.call_id,
            "name": "get_weather",
            "arguments": call.arguments,
        },
        {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"},
    ]
    r2 = oa.responses.create(model="auto", input=follow, tools=[WEATHER])
    assert r2.status == "completed"
    msgs = received(strict_engines["highspeed"])[-1]["messages"]
    assert msgs[1]["tool_calls"][0]["id"] == call.call_id
    assert msgs[2] == {"role": "tool", "tool_call_id": call.call_id, "content": "sunny"}
    events = list(oa.responses.create(model="auto", input=prompt, tools=[WEATHER], stream=True))
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert json.loads(done[0].arguments) == {"city": "Paris"}


def test_responses_bad_input(oa: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as e:
        oa.responses.create(model="auto", input="x", previous_response_id="resp_1")
    assert e.value.param == "previous_response_id"
    with pytest.raises(openai.BadRequestError) as e:
        oa.responses.create(model="auto", input=[{"type": "item_reference", "id": "x"}])
    assert e.value.param == "input[0].type"
    assert oa.responses.create(model="nope", input="x").status == "completed"  # any name: "*"


@pytest.fixture(scope="module")
def native(
    strict_engines: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[openai.OpenAI]:
    """A gateway whose fast tier's engines serve the Responses API themselves."""
    rules = rules_for_tests()
    rules["tiers"]["highspeed"]["responses_api"] = True
    for tier in rules["tiers"].values():
        tier["embeddings"] = True
    proc, url = start_gateway(tmp_path_factory.mktemp("gw"), rules, strict_engines)
    c = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=20)
    yield c
    c.close()
    proc.stop()


def test_responses_passed_through(native: openai.OpenAI, strict_engines: dict[str, str]) -> None:
    r = native.responses.with_raw_response.create(
        model="auto", instructions="Be brief.", input="hello"
    )
    assert r.headers["x-gateway-tier"] == "highspeed"
    assert r.parse().output_text == "Echo (highspeed): hello"
    sent = received(strict_engines["highspeed"])[-1]
    assert (
        sent["input"] == "hello" and sent["instructions"] == "Be brief." and "messages" not in sent
    )
    assert sent["model"] == "org/fast-7b" and sent["stream"] is True  # streamed for the checks
    events = list(native.responses.create(model="auto", input="stream me", stream=True))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == "Echo (highspeed): stream me" and events[-1].type == "response.completed"
    prompt = '[[*: tool=get_weather; args={"city": "Paris"}]] weather?'
    call = native.responses.create(model="auto", input=prompt, tools=[WEATHER]).output[0]
    assert call.type == "function_call" and json.loads(call.arguments) == {"city": "Paris"}
    # chat requests to the same tier still use its chat endpoint
    native.chat.completions.create(model="auto", messages=[{"role": "user", "content": "c"}])
    assert "messages" in received(strict_engines["highspeed"])[-1]


def test_passed_through_answers_are_checked(
    native: openai.OpenAI, strict_engines: dict[str, str]
) -> None:
    r = native.responses.with_raw_response.create(model="auto", input="[[highspeed: loop]] x")
    assert r.headers["x-gateway-tier"] == "standard"
    assert "repetition" in r.headers["x-gateway-fallback"]
    assert r.parse().output_text == "Echo (standard): x"
    assert "messages" in received(strict_engines["standard"])[-1]  # translated there
    events = list(
        native.responses.create(model="auto", input="[[highspeed: status=503]] y", stream=True)
    )
    assert (
        "".join(e.delta for e in events if e.type == "response.output_text.delta")
        == "Echo (standard): y"
    )


def test_embeddings_fall_back(native: openai.OpenAI) -> None:
    r = native.embeddings.with_raw_response.create(
        model="auto", input="[[highspeed: status=503]] x"
    )
    assert r.headers["x-gateway-tier"] == "standard"
    assert r.headers["x-gateway-fallback"] == "highspeed:http_503 -> standard"
    assert (
        native.embeddings.with_raw_response.create(model="auto", input="y").headers[
            "x-gateway-tier"
        ]
        == "highspeed"
    )
    with pytest.raises(openai.InternalServerError) as e:  # pinned: that tier alone
        native.embeddings.create(model="org/fast-7b", input="[[highspeed: status=503]] x")
    assert e.value.status_code == 502
    with pytest.raises(openai.BadRequestError):  # the engine's own 4xx, relayed
        native.embeddings.create(model="auto", input="[[*: status=400]] x")


class Person(BaseModel):
    name: str
    age: int


def test_chat_completions_parse(oa: openai.OpenAI) -> None:
    r = oa.chat.completions.parse(
        model="auto",
        messages=[{"role": "user", "content": '[[*: json={"name": "Ada", "age": 36}]] who?'}],
        response_format=Person,
    )
    assert r.choices[0].message.parsed == Person(name="Ada", age=36)


def test_custom_tools_pass_through(oa: openai.OpenAI, strict_engines: dict[str, str]) -> None:
    tools: list[ChatCompletionToolUnionParam] = [
        {"type": "custom", "custom": {"name": "run_sql", "description": "SQL"}}
    ]
    r = oa.chat.completions.create(
        model="auto", messages=[{"role": "user", "content": "go"}], tools=tools
    )
    assert r.choices[0].message.content == "Echo (highspeed): go"
    assert received(strict_engines["highspeed"])[-1]["tools"] == tools


def _preflight_headers(origin: str = ORIGIN) -> dict[str, str]:
    return {
        "Origin": origin,
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type",
    }


def test_cors_and_head(gw: str, oa: openai.OpenAI) -> None:
    status, headers, _ = get(f"{gw}/v1/chat/completions", "OPTIONS", _preflight_headers())
    assert status == 204 and headers["Access-Control-Allow-Origin"] == ORIGIN
    assert "POST" in headers["Access-Control-Allow-Methods"]
    assert headers["Access-Control-Allow-Headers"] == "authorization, content-type"
    status, headers, body = get(
        f"{gw}/v1/models", "OPTIONS", _preflight_headers("https://evil.example")
    )
    assert status == 403 and json.loads(body)["error"]["code"] == "cors_origin_not_allowed"
    status, headers, _ = get(f"{gw}/v1/models", headers={"Origin": ORIGIN})
    assert headers["Access-Control-Allow-Origin"] == ORIGIN
    assert "x-gateway-tier" in headers["Access-Control-Expose-Headers"]
    assert (
        "Access-Control-Allow-Origin"
        not in get(f"{gw}/v1/models", headers={"Origin": "https://x.example"})[1]
    )
    stream = oa.chat.completions.with_raw_response.create(
        model="auto",
        messages=[{"role": "user", "content": "s"}],
        stream=True,
        extra_headers={"Origin": ORIGIN},
    )
    assert stream.headers["access-control-allow-origin"] == ORIGIN
    for path in ("/v1/models", "/healthz", "/readyz", "/metrics", "/v1/models/auto"):
        status, headers, body = get(f"{gw}{path}", "HEAD", OPERATOR)  # (/metrics: its token)
        assert status == 200 and body == b"", path
    status, headers, _ = get(f"{gw}/v1/models", "DELETE")
    assert status == 405 and headers["Allow"] == "GET, HEAD"


# -- LangChain ------------------------------------------------------------------------------------
def test_langchain_embeddings_and_responses_api(gw: str) -> None:
    lc = pytest.importorskip("langchain_openai")
    with httpx.Client(timeout=20) as http:  # ours, so its sockets are closed at the end
        common = {"base_url": f"{gw}/v1", "api_key": "unused", "http_client": http}
        emb = lc.OpenAIEmbeddings(model="auto", check_embedding_ctx_length=False, **common)
        assert [round(v[0]) for v in emb.embed_documents(["one", "three"])] == [3, 5]
        assert round(emb.embed_query("four")[0]) == 4
        chat = lc.ChatOpenAI(model="auto", use_responses_api=True, max_retries=0, **common)
        assert chat.invoke("hello").text == "Echo (highspeed): hello"
        streamed = "".join(c.text for c in chat.stream("stream"))
        assert streamed == "Echo (highspeed): stream"
        prompt = '[[*: tool=get_weather; args={"city": "Paris"}]] weather?'
        msg = chat.bind_tools([WEATHER]).invoke(prompt)
        assert msg.tool_calls[0]["name"] == "get_weather"
        assert msg.tool_calls[0]["args"] == {"city": "Paris"}
