"""The Responses API translation, in memory: requests, answers, both event streams."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from gateway.errors import InvalidField
from gateway.server.responses_format import to_chat, to_response
from gateway.server.responses_stream import ResponsesSink
from gateway.settings import load_settings
from gateway.upstream.discovery import ModelBook, model_ids
from gateway.upstream.failures import AnswerTooLarge
from gateway.upstream.responses_events import ResponsesAsChat, response_as_chat


def test_request_translation() -> None:
    body = {
        "model": "auto",
        "instructions": "Be brief.",
        "input": [
            {"role": "developer", "content": "Use metric units."},
            {"role": "user", "content": [{"type": "input_text", "text": "Weather?"}]},
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "function_call", "call_id": "c1", "name": "w", "arguments": '{"c": 1}'},
            {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
        ],
        "tools": [
            {"type": "function", "name": "w", "parameters": {"type": "object"}, "strict": True},
            {"type": "custom", "name": "sql"},
        ],
        "tool_choice": {"type": "function", "name": "w"},
        "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}}},
        "max_output_tokens": 64,
        "temperature": 0.1,
        "store": True,
        "metadata": {"k": "v"},
        "stream": True,
    }
    chat = to_chat(body)
    assert chat["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "system", "content": "Use metric units."},
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "w", "arguments": '{"c": 1}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    ]
    assert chat["tools"][0] == {
        "type": "function",
        "function": {"name": "w", "parameters": {"type": "object"}, "strict": True},
    }
    assert chat["tools"][1] == {"type": "custom", "name": "sql"}  # passed through
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "w"}}
    assert chat["response_format"]["json_schema"]["name"] == "x"
    assert chat["max_tokens"] == 64 and chat["temperature"] == 0.1
    assert chat["stream_options"] == {"include_usage": True}
    assert "store" not in chat and "metadata" not in chat and "input" not in chat


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "m"}, "input"),
        ({"model": "m", "input": 3}, "input"),
        ({"model": "m", "input": ["x"]}, "input[0]"),
        ({"model": "m", "input": "x", "previous_response_id": "r"}, "previous_response_id"),
        ({"model": "m", "input": "x", "instructions": 1}, "instructions"),
        ({"model": "m", "input": [{"type": "item_reference", "id": "i"}]}, "input[0].type"),
    ],
)
def test_bad_requests_name_their_param(body: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidField) as e:
        to_chat(body)
    assert e.value.param == param


def test_answer_translation() -> None:
    chat = {
        "id": "c",
        "created": 5,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "finish_reason": "length",
                "message": {
                    "role": "assistant",
                    "content": "Hi",
                    "tool_calls": [
                        {
                            "id": "t1",
                            "type": "function",
                            "function": {"name": "f", "arguments": "{}"},
                        }
                    ],
                },
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
    }
    r = orjson.loads(to_response(orjson.dumps(chat), {"model": "auto", "input": "x"}))
    assert r["object"] == "response" and r["status"] == "incomplete"
    assert r["incomplete_details"] == {"reason": "max_output_tokens"}
    assert r["output"][0]["content"][0]["text"] == "Hi"
    assert r["output"][1]["type"] == "function_call" and r["output"][1]["call_id"] == "t1"
    assert r["usage"]["input_tokens"] == 3 and r["usage"]["total_tokens"] == 5
    # and back, as an engine's response object is read
    back = orjson.loads(response_as_chat(orjson.dumps(r)))
    assert back["choices"][0]["message"]["content"] == "Hi"
    assert back["choices"][0]["finish_reason"] == "length"
    assert back["usage"]["prompt_tokens"] == 3


class _Out:
    def __init__(self) -> None:
        self.data = b""
        self.eof = False

    async def write(self, data: bytes) -> None:
        self.data += data

    async def write_eof(self, data: bytes = b"") -> None:
        self.eof = True


def _events(raw: bytes) -> list[dict[str, Any]]:
    return [orjson.loads(line[5:]) for line in raw.split(b"\n") if line.startswith(b"data:")]


def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    c = {
        "id": "c",
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + orjson.dumps(c) + b"\n\n"


def test_chat_stream_becomes_responses_events() -> None:
    out = _Out()
    sink = ResponsesSink(out, {"model": "auto"})
    whole = (
        _chunk({"role": "assistant", "content": ""})
        + _chunk({"content": "Hel"})
        + _chunk({"content": "lo"})
        + _chunk(
            {"tool_calls": [{"index": 0, "id": "t", "function": {"name": "f", "arguments": ""}}]}
        )
        + _chunk({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]})
        + _chunk({}, "tool_calls")
        + b'data: {"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 2}}\n\n'
        + b"data: [DONE]\n\n: x-gateway-fallback highspeed:stall -> standard\n\n"
    )

    async def feed() -> None:
        for i in range(0, len(whole), 7):  # events split across writes
            await sink.write(whole[i : i + 7])
        await sink.write_eof()

    asyncio.run(feed())
    evs = _events(out.data)
    types = [e["type"] for e in evs]
    assert types[:2] == ["response.created", "response.in_progress"]
    assert [e["delta"] for e in evs if e["type"] == "response.output_text.delta"] == ["Hel", "lo"]
    assert "response.function_call_arguments.done" in types and types[-1] == "response.completed"
    final = evs[-1]["response"]
    assert final["output"][0]["content"][0]["text"] == "Hello"
    assert final["output"][1]["arguments"] == "{}" and final["usage"]["output_tokens"] == 2
    assert b": x-gateway-fallback" in out.data and out.eof
    assert [e["sequence_number"] for e in evs] == list(range(1, len(evs) + 1))


def test_error_event_fails_the_response() -> None:
    out = _Out()
    sink = ResponsesSink(out, {"model": "auto"})
    broken = b'data: {"error": {"message": "boom", "code": "stream_broken"}}\n\ndata: [DONE]\n\n'

    async def feed() -> None:
        await sink.write(_chunk({"content": "a"}) + broken)
        await sink.write_eof()

    asyncio.run(feed())
    evs = _events(out.data)
    assert [e["type"] for e in evs][-2:] == ["response.output_item.done", "response.failed"]
    assert any(e["type"] == "error" and e["code"] == "stream_broken" for e in evs)


class _Up:
    def __init__(self, parts: list[bytes]):
        self.parts = parts

    async def read(self) -> bytes:
        return self.parts.pop(0) if self.parts else b""

    def close(self) -> None: ...

    def release(self) -> None: ...


def _ev(kind: str, **fields: Any) -> bytes:
    return (
        b"event: " + kind.encode() + b"\ndata: " + orjson.dumps({"type": kind, **fields}) + b"\n\n"
    )


def test_engine_responses_events_read_as_chat() -> None:
    item = {"id": "fc", "type": "function_call", "call_id": "c9", "name": "f", "arguments": ""}
    done = {"status": "completed", "usage": {"input_tokens": 4, "output_tokens": 3}}
    up = _Up(
        [
            _ev("response.created", response={"id": "r", "model": "m", "created_at": 1})
            + _ev("response.output_text.delta", delta="Hi"),
            _ev("response.output_item.added", output_index=1, item=item)
            + _ev("response.function_call_arguments.delta", item_id="fc", delta='{"a": 1}')
            + _ev("response.completed", response=done),
        ]
    )

    async def read_all() -> bytes:
        s = ResponsesAsChat(up, stream=True)
        out = b""
        while chunk := await s.read():
            out += chunk
        return out

    raw = asyncio.run(read_all())
    assert raw.endswith(b"data: [DONE]\n\n")
    chunks = [orjson.loads(p[6:]) for p in raw.split(b"\n\n") if p.startswith(b"data: {")]
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert deltas[1] == {"content": "Hi"}
    assert deltas[2]["tool_calls"][0]["id"] == "c9"
    assert deltas[3]["tool_calls"][0]["function"]["arguments"] == '{"a": 1}'
    assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"
    assert chunks[-1]["usage"] == {"prompt_tokens": 4, "completion_tokens": 3, "total_tokens": 7}


def test_model_discovery_book() -> None:
    assert model_ids(b'{"data": [{"id": "a"}, {"id": "b"}]}') == ("a", "b")
    assert model_ids(b"<html>") == () and model_ids(b"[]") == ()
    book = ModelBook(None)
    book.record("u1", ("m1",))
    assert book.settle("t") and book.chosen == "m1" and not book.disagree
    book.record("u2", ("m2",))
    book.record("u3", ("m2",))
    assert book.settle("t") and book.chosen == "m2" and book.disagree  # the majority
    assert book.state()["replicas"] == {"u1": "m1", "u2": "m2", "u3": "m2"}
    assert ModelBook("x").state() == {"model": "x", "source": "configured"}


def test_settings_read_pool_models_and_cors() -> None:
    s = load_settings(
        {
            "GATEWAY_POOL_HIGHSPEED_MODEL": "org/fast",
            "GATEWAY_POOL_STANDARD_URLS": "http://a:1",
            "GATEWAY_CORS_ORIGINS": "https://a.example/, https://b.example",
        }
    )
    assert s.pool_models == {"highspeed": "org/fast"}
    assert s.pool_urls == {"standard": ("http://a:1",)}
    assert s.cors() == frozenset({"https://a.example", "https://b.example"})
    assert load_settings({}).cors() == frozenset()


@pytest.mark.parametrize("stream", [True, False])
def test_a_native_responses_answer_keeps_the_tiers_size_limits(stream: bool) -> None:
    big = _ev("response.output_text.delta", delta="x" * 5000)

    async def read_all() -> None:
        s = ResponsesAsChat(_Up([big, big, big]), stream, max_event=4096, max_total=8192)
        while await s.read():
            pass

    with pytest.raises(AnswerTooLarge):
        asyncio.run(read_all())
