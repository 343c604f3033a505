"""The Messages API translation, both ways, without a server: requests to chat, chat answers
and streams to Messages, errors to Anthropic's shape."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import orjson
import pytest

from gateway.errors import InvalidField
from gateway.server.messages_api import _MessagesWire
from gateway.server.messages_format import error_from, stop_reason, to_chat, to_message
from gateway.server.messages_stream import MessagesSink


def test_system_blocks_turns_and_tools_become_chat() -> None:
    chat = to_chat(
        {
            "model": "claude-x",
            "max_tokens": 50,
            "system": [{"type": "text", "text": "A"}, {"type": "text", "text": "B"}],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "hi"}]},
                {"role": "system", "content": [{"type": "text", "text": "env"}]},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "thinking", "thinking": "hmm", "signature": "s"},
                        {"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}},
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "t1",
                            "content": [{"type": "text", "text": "out"}],
                            "is_error": True,
                        },
                        {
                            "type": "image",
                            "source": {"type": "base64", "media_type": "image/png", "data": "AA"},
                        },
                    ],
                },
            ],
            "tools": [{"name": "f", "input_schema": {"type": "object"}, "cache_control": {}}],
            "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
            "metadata": {"user_id": "u1"},
            "stop_sequences": ["X"],
            "thinking": {"type": "enabled", "budget_tokens": 100},
            "stream": True,
        }
    )
    assert chat["messages"] == [
        {"role": "system", "content": "A\nB"},
        {"role": "user", "content": "hi"},
        {"role": "system", "content": "env"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "t1", "type": "function", "function": {"name": "f", "arguments": '{"a":1}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "t1", "content": "Error: out"},
        {
            "role": "user",
            "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}}],
        },
    ]
    assert chat["tools"] == [
        {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    ]
    assert chat["tool_choice"] == "required" and chat["parallel_tool_calls"] is False
    assert chat["user"] == "u1" and chat["stop"] == ["X"] and "thinking" not in chat
    assert chat["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize(
    ("choice", "chat"),
    [
        ({"type": "auto"}, "auto"),
        ({"type": "none"}, "none"),
        ({"type": "tool", "name": "f"}, {"type": "function", "function": {"name": "f"}}),
    ],
)
def test_tool_choice(choice: dict[str, Any], chat: object) -> None:
    body = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}
    tools = [{"name": "f", "input_schema": {"type": "object"}}]
    assert to_chat({**body, "tools": tools, "tool_choice": choice})["tool_choice"] == chat
    if chat in ("auto", "none"):  # no tools (an empty list too): no choice for the engine
        no_tools: tuple[dict[str, Any], ...] = ({}, {"tools": []})
        for none in no_tools:
            assert "tool_choice" not in to_chat({**body, **none, "tool_choice": choice})


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "m", "messages": [{"role": "user", "content": "x"}]}, "max_tokens"),
        ({"model": "m", "max_tokens": 5}, "messages"),
        (
            {"model": "m", "max_tokens": 5, "messages": [{"role": "bot", "content": "x"}]},
            "messages[0].role",
        ),
        (
            {
                "model": "m",
                "max_tokens": 5,
                "messages": [{"role": "user", "content": [{"type": "video"}]}],
            },
            "messages[0].content[0]",
        ),
        (
            {
                "model": "m",
                "max_tokens": 5,
                "messages": [{"role": "user", "content": "x"}],
                "stop_sequences": "X",
            },
            "stop_sequences",
        ),
    ],
)
def test_bad_requests_name_the_field(body: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidField) as e:
        _MessagesWire().parse(orjson.dumps(body))
    assert e.value.param == param and e.value.status == 400


def test_chat_errors_name_the_field_the_client_sent() -> None:
    body = {
        "model": "m",
        "max_tokens": 5,
        "messages": [{"role": "user", "content": "x"}],
        "stop_sequences": ["a", "b", "c", "d", "e"],  # over OpenAI's 4
    }
    with pytest.raises(InvalidField) as e:
        _MessagesWire().parse(orjson.dumps(body))
    assert e.value.param == "stop_sequences" and "'stop_sequences'" in e.value.message


@pytest.mark.parametrize(
    ("finish", "matched", "tools", "want"),
    [
        ("stop", None, False, ("end_turn", None)),
        ("stop", "END", False, ("stop_sequence", "END")),
        ("stop", "other", False, ("end_turn", None)),
        ("length", None, False, ("max_tokens", None)),
        ("tool_calls", None, True, ("tool_use", None)),
        ("stop", None, True, ("tool_use", None)),
        ("content_filter", None, False, ("refusal", None)),
        (None, None, False, ("end_turn", None)),
    ],
)
def test_stop_reasons(finish: object, matched: object, tools: bool, want: tuple[str, Any]) -> None:
    assert stop_reason(finish, matched, ["END"], tools) == want


def test_an_answer_becomes_a_message() -> None:
    chat = {
        "id": "c1",
        "model": "eng",
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": "Let me check.",
                    "tool_calls": [
                        {
                            "id": "call_9",
                            "type": "function",
                            "function": {"name": "f", "arguments": '{"x": 2}'},
                        }
                    ],
                },
            }
        ],
        "usage": {
            "prompt_tokens": 12,
            "completion_tokens": 7,
            "prompt_tokens_details": {"cached_tokens": 4},
        },
    }
    msg = orjson.loads(to_message(orjson.dumps(chat), {"model": "claude-x"}))
    assert msg["type"] == "message" and msg["role"] == "assistant" and msg["model"] == "eng"
    assert msg["content"] == [
        {"type": "text", "text": "Let me check."},
        {"type": "tool_use", "id": "call_9", "name": "f", "input": {"x": 2}},
    ]
    assert msg["stop_reason"] == "tool_use" and msg["stop_sequence"] is None
    assert msg["usage"] == {
        "input_tokens": 12,
        "output_tokens": 7,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 4,
    }


class _Out:
    def __init__(self) -> None:
        self.data = b""
        self.ended = False

    async def write(self, data: bytes) -> None:
        self.data += data

    async def write_eof(self, data: bytes = b"") -> None:
        self.ended = True


def _chunk(delta: dict[str, Any], finish: str | None = None, **top: Any) -> bytes:
    doc = {
        "id": "c",
        "model": "eng",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        **top,
    }
    return b"data: " + orjson.dumps(doc) + b"\n\n"


def _events(raw: bytes) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for block in raw.decode().split("\n\n"):
        lines = block.split("\n")
        if lines[0].startswith("event: "):
            out.append((lines[0][7:], json.loads(lines[1][6:])))
        elif lines[0].startswith(":"):
            out.append((":", lines[0]))
    return out


def _run(
    parts: list[bytes], req: dict[str, Any] | None = None
) -> tuple[list[tuple[str, Any]], _Out]:
    out = _Out()

    async def go() -> None:
        sink = MessagesSink(out, req or {"model": "claude-x"}, 33)
        for p in parts:  # split across writes: the sink buffers partial events
            for i in range(0, len(p), 7):
                await sink.write(p[i : i + 7])
        await sink.write_eof()

    asyncio.run(go())
    return _events(out.data), out


def test_a_stream_of_text_then_a_tool_call() -> None:
    usage = {"prompt_tokens": 20, "completion_tokens": 9}
    events, out = _run(
        [
            _chunk({"role": "assistant", "content": ""}),
            _chunk({"content": "Hello"}),
            _chunk({"content": " world"}),
            _chunk(
                {
                    "tool_calls": [
                        {"index": 0, "id": "call_1", "function": {"name": "f", "arguments": ""}}
                    ]
                }
            ),
            _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"a":'}}]}),
            _chunk({"tool_calls": [{"index": 0, "function": {"arguments": " 1}"}}]}),
            _chunk({}, "tool_calls"),
            b'data: {"id": "c", "model": "eng", "choices": [], "usage": '
            + orjson.dumps(usage)
            + b"}\n\n",
            b"data: [DONE]\n\n",
            b": x-gateway-cost-usd 0.000001000\n\n",
        ]
    )
    names = [n for n, _ in events]
    assert names == [
        "message_start",
        "ping",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
        ":",
    ]
    start = events[0][1]["message"]
    assert start["usage"]["input_tokens"] == 33 and start["model"] == "eng"
    assert events[2][1] == {
        "type": "content_block_start",
        "index": 0,
        "content_block": {"type": "text", "text": ""},
    }
    assert events[6][1]["content_block"] == {
        "type": "tool_use",
        "id": "call_1",
        "name": "f",
        "input": {},
    }
    assert events[7][1]["delta"] == {"type": "input_json_delta", "partial_json": '{"a":'}
    delta = events[10][1]
    assert delta["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
    assert delta["usage"]["output_tokens"] == 9 and delta["usage"]["input_tokens"] == 20
    assert out.ended


def test_a_broken_stream_ends_with_an_error_event_and_no_stop() -> None:
    err = {
        "error": {"message": "every tier failed", "type": "upstream_error", "code": "stream_broken"}
    }
    events, _ = _run(
        [_chunk({"content": "Hel"}), b"data: " + orjson.dumps(err) + b"\n\ndata: [DONE]\n\n"]
    )
    names = [n for n, _ in events]
    assert names == [
        "message_start",
        "ping",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "error",
    ]
    assert events[-1][1] == {
        "type": "error",
        "error": {"type": "api_error", "message": "every tier failed"},
    }


def test_a_stop_sequence_and_no_usage_chunk() -> None:
    events, _ = _run(
        [
            _chunk({"content": "abc"}),
            b'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop", '
            b'"matched_stop": "END"}]}\n\n',
            b"data: [DONE]\n\n",
        ],
        {"model": "m", "stop_sequences": ["END"]},
    )
    delta = next(d for n, d in events if n == "message_delta")
    assert delta["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": "END"}
    assert delta["usage"]["input_tokens"] == 33  # the estimate, when the engine said nothing


@pytest.mark.parametrize(
    ("status", "code", "want_status", "want_type"),
    [
        (400, "invalid_value", 400, "invalid_request_error"),
        (401, "invalid_api_key", 401, "authentication_error"),
        (403, "tier_not_allowed", 403, "permission_error"),
        (404, "model_not_found", 404, "not_found_error"),
        (405, "method_not_allowed", 405, "invalid_request_error"),
        (413, "request_too_large", 413, "request_too_large"),
        (429, "rate_limit_exceeded", 429, "rate_limit_error"),
        (429, "overloaded", 529, "overloaded_error"),  # the gateway saturated: Anthropic's 529
        (500, "internal_error", 500, "api_error"),
        (502, "all_tiers_failed", 502, "api_error"),
        (504, "upstream_timeout", 504, "timeout_error"),
    ],
)
def test_errors_in_anthropics_shape(
    status: int, code: str, want_status: int, want_type: str
) -> None:
    openai_body = orjson.dumps(
        {"error": {"message": "why", "type": "x", "param": None, "code": code}}
    )
    got_status, body = error_from(status, openai_body, "req_1")
    assert got_status == want_status
    assert orjson.loads(body) == {
        "type": "error",
        "error": {"type": want_type, "message": "why"},
        "request_id": "req_1",
    }
