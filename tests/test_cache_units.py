"""The response cache's pure parts, table-driven: the key, the gate, the replay, the
guard, the in-process store, a recorded stream."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from gateway.cache.entry import Entry, refusal
from gateway.cache.guard import same_question, signature, slip
from gateway.cache.key import Route, deterministic, exact_key, normalised, scope_key
from gateway.cache.lookup import cache_control
from gateway.cache.memory import MemoryBackend
from gateway.cache.replay import json_body, sse_body
from gateway.cache.tee import Tee
from gateway.checks.base import RequestFacts
from gateway.checks.config import CheckSettings
from gateway.checks.registry import build_checks
from gateway.dispatch.assemble import assemble
from gateway.routing.classify import Classification
from gateway.routing.router import RouteDecision
from gateway.tenancy.tenants import Policy
from gateway.upstream.framing import data_payloads


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"temperature": 0}, True),
        ({"temperature": 0.0}, True),
        ({"seed": 7}, True),
        ({"temperature": 0.7, "seed": 1}, True),
        ({}, False),
        ({"temperature": 0.2}, False),
        ({"temperature": False}, False),
        ({"seed": True}, False),
        ({"seed": "7"}, False),
    ],
)
def test_deterministic(body: dict[str, Any], expected: bool) -> None:
    assert deterministic(body) is expected


def _route(**d: Any) -> Route:
    cls = Classification(
        task="chat",
        task_source="default",
        sla="interactive",
        sla_source="task",
        tier_hint=None,
        hint_source=None,
        model="auto",
        has_tools=False,
        stream=False,
        prompt_tokens=3,
    )
    fields: dict[str, Any] = {
        "rule": "default",
        "tiers": ("highspeed", "standard"),
        "checks": ("non_empty",),
        "deadline": 30.0,
        "ttft_budget": 5.0,
        "reason": "",
        "cls": cls,
    }
    fields.update(d)
    return Route("rules-v1", RouteDecision(**fields), Policy(), {"highspeed": "m1"})


BASE = {"model": "auto", "messages": [{"role": "user", "content": "hi"}], "temperature": 0}


@pytest.mark.parametrize(
    ("other", "same"),
    [
        ({**BASE, "stream": True, "stream_options": {"include_usage": True}}, True),
        ({**BASE, "user": "someone"}, True),
        ({**BASE, "n": 1}, True),
        ({**BASE, "temperature": 0.0}, True),
        ({"temperature": 0, "messages": BASE["messages"], "model": "auto"}, True),  # key order
        ({**BASE, "n": 2}, False),
        ({**BASE, "model": "fast"}, False),
        ({**BASE, "max_tokens": 10}, False),
        ({**BASE, "seed": 1}, False),
        ({**BASE, "tools": [{"type": "function", "function": {"name": "f"}}]}, False),
        ({**BASE, "response_format": {"type": "json_object"}}, False),
        ({**BASE, "messages": [{"role": "user", "content": "hi!"}]}, False),
        ({**BASE, "some_engine_field": 1}, False),
    ],
)
def test_exact_key_normalises_delivery_not_content(other: dict[str, Any], same: bool) -> None:
    r = _route()
    assert (exact_key("t1", "chat", BASE, r) == exact_key("t1", "chat", other, r)) is same


@pytest.mark.parametrize(
    ("tenant", "kind", "route"),
    [
        ("t2", "chat", _route()),
        ("t1", "responses", _route()),
        ("t1", "chat", _route(rule="code")),
        ("t1", "chat", _route(checks=("non_empty", "repetition"))),
        ("t1", "chat", _route(on_last_failure="error")),
        ("t1", "chat", _route(arm="canary")),
        ("t1", "chat", Route("rules-v2", _route().decision, Policy(), {"highspeed": "m1"})),
        ("t1", "chat", Route("rules-v1", _route().decision, Policy(), {"highspeed": "m2"})),
        (
            "t1",
            "chat",
            Route(
                "rules-v1", _route().decision, Policy(forced_tier="standard"), {"highspeed": "m1"}
            ),
        ),
    ],
)
def test_exact_key_changes_with_who_and_what_decides(tenant: str, kind: str, route: Route) -> None:
    assert exact_key(tenant, kind, BASE, route) != exact_key("t1", "chat", BASE, _route())


def test_the_tiers_health_is_not_part_of_the_key() -> None:
    """A fast tier that is down changes the chain, not what a kept answer is worth."""
    assert exact_key("t", "chat", BASE, _route(tiers=("standard",))) == exact_key(
        "t", "chat", BASE, _route()
    )


def test_scope_ignores_the_last_user_turn_only() -> None:
    r = _route()
    a = {**BASE, "messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "a"}]}
    b = {**BASE, "messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "b"}]}
    c = {**BASE, "messages": [{"role": "system", "content": "T"}, {"role": "user", "content": "a"}]}
    assert scope_key("t", "chat", a, r, "chat", 1) == scope_key("t", "chat", b, r, "chat", 1)
    assert scope_key("t", "chat", a, r, "chat", 1) != scope_key("t", "chat", c, r, "chat", 1)
    assert scope_key("t", "chat", a, r, "chat", 1) != scope_key("t", "chat", a, r, "code", 1)
    assert normalised(a) == a | {"temperature": 0.0}  # the body itself is left alone


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (None, {}),
        ("no-cache", {"no-cache": ""}),
        ("No-Store, max-age=60", {"no-store": "", "max-age": "60"}),
        ('max-age="0"', {"max-age": "0"}),
    ],
)
def test_cache_control(header: str | None, expected: dict[str, str]) -> None:
    assert cache_control(header) == expected


CHECKS = build_checks(CheckSettings())
FACTS = RequestFacts(False, False, None, {})


def _answer(content: str | None, finish: str = "stop", calls: Any = None) -> dict[str, Any]:
    msg: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        msg["tool_calls"] = calls
    return {
        "object": "chat.completion",
        "choices": [{"index": 0, "message": msg, "finish_reason": finish}],
    }


@pytest.mark.parametrize(
    ("answer", "checks", "why"),
    [
        (_answer("Paris."), ("non_empty", "repetition"), None),
        (_answer("Paris.", "length"), ("non_empty",), "finish_reason length"),
        (_answer("Paris.", "content_filter"), (), "finish_reason content_filter"),
        (_answer(""), ("non_empty",), "check non_empty"),
        (_answer("I will repeat this sentence again. " * 60), ("repetition",), "check repetition"),
        (_answer("ok<|im_end|>"), ("template_leak",), "check template_leak"),
        ({"choices": []}, (), "no choices"),
        ({"error": "x"}, (), "not a completion"),
        (
            _answer(
                "a",
                calls=[
                    {"id": "1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ],
                finish="tool_calls",
            ),
            (),
            None,
        ),
    ],
)
def test_only_complete_answers_that_pass_every_check_are_kept(
    answer: Any, checks: tuple[str, ...], why: str | None
) -> None:
    assert refusal("chat", answer, [CHECKS[c] for c in checks], FACTS) == why


def _entry(answer: dict[str, Any], kind: str = "chat") -> Entry:
    return Entry(orjson.dumps(answer), kind, "standard", 10, 4, 1000.0, 2000.0)


def test_entry_round_trip_and_damaged_values() -> None:
    e = _entry({**_answer("x"), "usage": {"prompt_tokens": 10}})
    assert Entry.decode(e.encode()) == e
    head = Entry.head(e.encode())
    assert head is not None and head["tier"] == "standard"
    for raw in (b"", b"no newline", b"{not json}\n{}", b'{"kind": "chat"}\n{}'):
        assert Entry.decode(raw) is None


CALL = {"id": "call_1", "type": "function", "function": {"name": "get", "arguments": '{"a": 1}'}}


@pytest.mark.parametrize(
    "answer",
    [
        _answer("Hello there."),
        _answer(None, "tool_calls", [CALL]),
        {
            "object": "chat.completion",
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "A"},
                    "finish_reason": "stop",
                },
                {
                    "index": 1,
                    "message": {"role": "assistant", "content": "B"},
                    "finish_reason": "stop",
                },
            ],
        },
    ],
)
def test_a_hit_replays_as_sse_that_assembles_to_the_same_answer(answer: dict[str, Any]) -> None:
    answer = {**answer, "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}
    raw = sse_body(_entry(answer), include_usage=True)
    assert raw.endswith(b"data: [DONE]\n\n")
    events = [orjson.loads(p) for p in data_payloads(raw) if p != b"[DONE]"]
    assert events[0]["choices"][0]["delta"]["role"] == "assistant"
    assert len({e["id"] for e in events}) == 1
    back = assemble("chat", events)
    assert [c["message"] for c in back["choices"]] == [
        {k: v for k, v in c["message"].items() if v is not None or k == "content"}
        for c in answer["choices"]
    ]
    assert [c["finish_reason"] for c in back["choices"]] == [
        c["finish_reason"] for c in answer["choices"]
    ]
    assert back["usage"] == answer["usage"]
    without = sse_body(_entry(answer), include_usage=False)
    assert b'"usage"' not in without


def test_text_completion_replay_and_fresh_ids() -> None:
    answer = {
        "object": "text_completion",
        "id": "cmpl-old",
        "choices": [{"index": 0, "text": "42", "finish_reason": "stop"}],
    }
    e = _entry(answer, "completions")
    events = [orjson.loads(p) for p in data_payloads(sse_body(e, False)) if p != b"[DONE]"]
    assert "".join(ev["choices"][0]["text"] for ev in events) == "42"
    assert events[-1]["choices"][0]["finish_reason"] == "stop"
    a, b = orjson.loads(json_body(e)), orjson.loads(json_body(e))
    assert a["id"] != b["id"] != "cmpl-old" and a["choices"] == answer["choices"]


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        ("How do I reset my password?", "how do i reset my password", True),
        (
            "How do I reset my password?",
            "Hi! Could you tell me how do I reset my password? Thanks",
            True,
        ),
        ("How do I reset my password?", "How do I reset my pasword?", True),
        ("Explain recursion.", "Explain recursoin.", True),
        ("What's 2+2?", "what is 2 + 2", True),
        ("Convert 100 Celsius to Fahrenheit.", "Convert 100 Fahrenheit to Celsius.", False),
        ("Which plants are safe for cats?", "Which plants are not safe for cats?", False),
        ("Can I freeze rice?", "Can't I freeze rice?", False),
        ("What is 15% of 80?", "What is 15% of 90?", False),
        ("How do I enable dark mode?", "How do I disable dark mode?", False),
        ("How do I mute a channel?", "How do I unmute a channel?", False),
        ("How do I zoom in?", "How do I zoom out?", False),
        ("Who invented the telephone?", "When was the telephone invented?", False),
        ("What is a cat?", "What is a cot?", False),  # short words: no slips
    ],
)
def test_guard(a: str, b: str, same: bool) -> None:
    assert same_question(signature(a), signature(b)) is same


@pytest.mark.parametrize(
    ("x", "y", "ok"),
    [
        ("password", "pasword", True),
        ("recursion", "recursoin", True),
        ("dictionaries", "dictionairse", True),
        ("enable", "disable", False),
        ("bear", "bears", True),
        ("cat", "car", False),
        ("401", "403", False),
        ("weather", "wether", True),
        ("light", "night", False),
    ],
)
def test_slip(x: str, y: str, ok: bool) -> None:
    assert slip(x, y) is ok


def test_memory_backend_evicts_lru_per_tenant_and_in_total() -> None:
    async def run() -> None:
        b = MemoryBackend(max_bytes=2500, tenant_max_bytes=2000)
        v = b"x" * 900
        for k in "abc":
            await b.put("t1", k, v, 1e12)
        assert await b.get("t1", "a", 0) is None  # evicted: the tenant's bound
        assert await b.get("t1", "b", 0) == v
        put = await b.put("t2", "z", v, 1e12)
        assert put.size == 900 and b.size <= 2500
        assert await b.get("t1", "c", 0) is None  # the least recently used, in total
        assert await b.get("t1", "b", 0) == v
        assert (await b.put("t1", "big", b"x" * 2001, 1e12)).size == -1
        await b.put("t1", "old", b"x" * 100, 5.0)
        assert await b.get("t1", "old", 6.0) is None  # expired
        assert [k for k, _ in await b.entries("t2", 10)] == ["z"]
        assert await b.purge("t1") >= 1
        assert (await b.usage("t1")).entries == 0 and (await b.usage("t2")).entries == 1

    asyncio.run(run())


class _Sink:
    def __init__(self) -> None:
        self.got = b""

    async def write(self, data: bytes) -> None:
        self.got += data

    async def write_eof(self, data: bytes = b"") -> None:
        pass


@pytest.mark.parametrize(
    ("chunks", "kept"),
    [
        (
            [
                b'data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n',
                b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n',
                b"data: [DONE]\n\n",
                b": x-gateway-cost-usd 0.1\n\n",
            ],
            "hi",
        ),
        ([b'data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n'], None),  # cut short
        (
            [
                b'data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n',
                b'data: {"error": {"message": "broke"}}\n\ndata: [DONE]\n\n',
            ],
            None,
        ),
    ],
)
def test_tee_forwards_everything_and_keeps_only_finished_streams(
    chunks: list[bytes], kept: str | None
) -> None:
    inner = _Sink()
    tee = Tee(inner, 10_000)

    async def run() -> None:
        for c in chunks:
            await tee.write(c)

    asyncio.run(run())
    assert inner.got == b"".join(chunks)
    answer = tee.answer("chat")
    assert (answer["choices"][0]["message"]["content"] if answer else None) == kept


def test_tee_stops_recording_past_its_limit() -> None:
    inner = _Sink()
    tee = Tee(inner, 10)
    asyncio.run(tee.write(b'data: {"choices":[]}\n\ndata: [DONE]\n\n'))
    assert tee.overflow and tee.answer("chat") is None and inner.got
