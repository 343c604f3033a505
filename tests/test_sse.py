"""The SSE framer and the stream state: table-driven, every payload through both paths."""

from __future__ import annotations

import time
from typing import Any

import orjson
import pytest

from gateway.upstream.failures import AnswerTooLarge, AttemptFailed, BadStream, StreamErrorEvent
from gateway.upstream.framing import SSEFramer, data_payloads
from gateway.upstream.sse import StreamState


def ev(obj: object) -> bytes:
    return orjson.dumps(obj)


def chunk(delta: dict[str, Any], finish: str | None = None, **extra: object) -> bytes:
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
    return ev({"id": "c1", "model": "m", "created": 1, "choices": [choice], **extra})


PLAIN_STREAM = [
    chunk({"role": "assistant", "content": ""}),
    chunk({"content": "Hello"}),
    chunk({"content": " world", "reasoning_content": None, "tool_calls": None}),
    chunk({"tool_calls": [{"index": 0, "id": "t1", "function": {"name": "f"}}]}),
    chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"a":1}'}}]}),
    chunk({}, "stop"),
    ev({"id": "c1", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}),
]


def fed(payloads: list[bytes], general: bool = False, chat: bool = True) -> StreamState:
    s = StreamState(chat)
    s.events = []
    for p in payloads:
        s._feed_general(p) if general else s.feed(p)
    return s


def summary(s: StreamState) -> tuple[object, ...]:
    return (
        s.id,
        s.model,
        s.created,
        s.text(),
        s.tokens,
        s.chars,
        s.finish_reason,
        s.usage,
        s.tool_calls,
        s.multi,
        s.plain,
        s.first.get("id"),
    )


def test_fast_and_general_paths_agree_on_a_plain_stream() -> None:
    fast, general = fed(PLAIN_STREAM), fed(PLAIN_STREAM, general=True)
    assert summary(fast) == summary(general)
    assert fast.text() == "Hello world" and fast.plain and fast.finish_reason == "stop"
    assert fast.tool_calls[0] == {
        "id": "t1",
        "type": "function",
        "function": {"name": "f", "arguments": '{"a":1}'},
    }
    assert [orjson.loads(p) for p in PLAIN_STREAM] == fast.parsed_events()


def block(payloads: list[bytes]) -> bytes:
    return b"".join(b"data: " + p + b"\n\n" for p in payloads)


def by_block(data: bytes, chat: bool = True) -> StreamState:
    s = StreamState(chat)
    s.events = []
    s.feed_block(data)
    return s


def state_of(s: StreamState) -> tuple[object, ...]:
    return (*summary(s)[:11], s.first.get("id"), s.done, s.parsed_events())


@pytest.mark.parametrize(
    "data",
    [
        block(PLAIN_STREAM),
        block([*PLAIN_STREAM, b"[DONE]"]),
        block(PLAIN_STREAM[:1]),
        b": keep-alive\n\n" + block(PLAIN_STREAM),  # a comment
        block(PLAIN_STREAM).replace(b"data: ", b"data:"),  # no space after the colon
        block(PLAIN_STREAM[:2]) + b"event: x\n" + block(PLAIN_STREAM[2:]),
        block([*PLAIN_STREAM[:3], chunk({"content": "!", "refusal": "no"})]),  # not plain
        block([*PLAIN_STREAM, ev({"choices": [{"index": 1, "delta": {"content": "z"}}]})]),
        block([b"[DONE]", *PLAIN_STREAM]),  # events after [DONE]
    ],
)
def test_a_block_reads_as_its_events_one_by_one(data: bytes) -> None:
    one_by_one = fed(data_payloads(data))
    assert state_of(by_block(data)) == state_of(one_by_one)


def test_a_block_is_kept_once_as_it_came() -> None:
    data = b": c\n\n" + block([*PLAIN_STREAM, b"[DONE]"])
    s = by_block(data)
    assert s.events == [data] and s.done and s.text() == "Hello world"


@pytest.mark.parametrize(
    ("payloads", "kind"),
    [
        ([b'{"choices": [{"index": 0', b'"delta": {"content": "x"}}]}'], BadStream),  # halves
        ([PLAIN_STREAM[0], b"{not json"], BadStream),
        ([PLAIN_STREAM[0], ev({"error": {"message": "overloaded"}})], StreamErrorEvent),
        ([PLAIN_STREAM[0], ev({"choices": [{"delta": {"content": 5}}]})], BadStream),
    ],
)
def test_a_block_with_a_bad_event_fails_like_the_event(
    payloads: list[bytes], kind: type[AttemptFailed]
) -> None:
    with pytest.raises(kind):
        by_block(block(payloads))


@pytest.mark.parametrize(
    ("payload", "plain"),
    [
        (chunk({"content": "x", "reasoning_content": "think"}), False),
        (chunk({"content": "x", "audio": {"id": "a"}}), False),
        (ev({"choices": [{"index": 0, "delta": {"content": "x"}, "logprobs": {"c": []}}]}), False),
        (ev({"choices": [{"index": 1, "delta": {"content": "x"}}]}), False),
        (chunk({"tool_calls": [{"index": 0, "type": "custom", "function": {}}]}), False),
        (ev({"choices": [{"index": 0, "delta": {"content": "x"}, "matched_stop": None}]}), True),
        (ev({"choices": [{"index": 0, "text": "x", "stop_reason": None}]}), True),
    ],
)
def test_what_is_not_plain(payload: bytes, plain: bool) -> None:
    for general in (False, True):
        assert fed([payload], general).plain is plain


@pytest.mark.parametrize(
    ("payload", "kind", "detail"),
    [
        (b"{not json", BadStream, "not JSON"),
        (b"[1, 2]", BadStream, "not a JSON object"),
        (ev({"choices": "x"}), BadStream, "choices is not a list"),
        (ev({"choices": ["x"]}), BadStream, "choice is not an object"),
        (ev({"choices": [{"delta": "x"}]}), BadStream, "delta is not an object"),
        (ev({"choices": [{"delta": {"content": 5}}]}), BadStream, "text is not a string"),
        (ev({"choices": [], "usage": [1]}), BadStream, "usage is not an object"),
        (ev({"choices": [{"delta": {"tool_calls": "x"}}]}), BadStream, "tool_calls"),
        (ev({"choices": [{"delta": {"tool_calls": ["x"]}}]}), BadStream, "malformed"),
        (
            ev({"choices": [{"delta": {"tool_calls": [{"function": {"name": 3}}]}}]}),
            BadStream,
            "name is not a string",
        ),
        (ev({"error": {"message": "overloaded"}}), StreamErrorEvent, "overloaded"),
        (ev({"error": "boom"}), StreamErrorEvent, "boom"),
    ],
)
def test_malformed_events_are_upstream_failures(
    payload: bytes, kind: type[AttemptFailed], detail: str
) -> None:
    with pytest.raises(kind) as e:
        fed([payload])
    assert type(e.value) is kind and detail in e.value.detail


def test_text_completions_read_text() -> None:
    s = fed([ev({"choices": [{"index": 0, "text": "ab", "finish_reason": "length"}]})], chat=False)
    assert (s.text(), s.finish_reason, s.tokens) == ("ab", "length", 1)


def test_done_and_usage_only_events() -> None:
    s = StreamState(True)
    assert s.feed(ev({"choices": [], "usage": {"prompt_tokens": 1}})) is True
    assert s.feed(b"[DONE]") is False and s.done


@pytest.mark.parametrize(
    ("chunks", "payloads"),
    [
        ([b"data: a\n\ndata: b\n\n"], [b"a", b"b"]),
        ([b"data: a\n", b"\ndata: b\n\n"], [b"a", b"b"]),  # the blank line straddles
        ([b"data: a", b"bc\n\n"], [b"abc"]),
        ([b"data: a\r\n\r\n"], [b"a"]),
        ([b": keep-alive\n\nevent: x\ndata: a\n\n"], [b"a"]),
        ([b"da", b"ta: a\n\n", b"data: b"], [b"a"]),
    ],
)
def test_framer_cuts_complete_events(chunks: list[bytes], payloads: list[bytes]) -> None:
    f, got = SSEFramer(), []
    for c in chunks:
        got += f.feed(c)[1]
    assert got == payloads


def test_framer_refuses_an_event_over_its_limit() -> None:
    f = SSEFramer(max_event=1000)
    f.feed(b"data: " + b"x" * 600)
    with pytest.raises(AnswerTooLarge) as e:
        f.feed(b"x" * 600)
    assert "1000 bytes" in e.value.detail


def test_framer_is_linear_in_a_long_event() -> None:
    """10,000 small reads of one event: a quadratic join would copy ~50 GB' worth."""
    f = SSEFramer()
    t0 = time.process_time()
    for _ in range(10_000):
        f.feed(b"x" * 500)
    complete, payloads = f.feed(b"\n\n")
    assert len(complete) == 5_000_002 and payloads == [] and f.pending == b""
    assert time.process_time() - t0 < 2.0


def test_data_payloads_of_multi_line_events() -> None:
    assert data_payloads(b"data: a\ndata: b\n\ndata: c\n\n") == [b"a", b"b", b"c"]


@pytest.mark.parametrize(
    ("pieces", "chars", "events", "tokens"),
    [
        (["One ", "two ", "three "], 14, None, 3),  # an event a word: both counts agree
        (["One two three four ", "five six seven "], 34, None, 7),  # several words an event
        (["One two three four ", "five six seven "], 19, None, 4),  # the first event's text
        (["a", "b", "c", "d"], 4, None, 4),  # more events than words: the events
        (["a", "b", "c", "d"], 2, None, 2),  # their share, for part of the text
        (["One two three four ", "five six "], 19, 2, 4),  # events known: more words still
        (["x"], 0, None, 0),
    ],
)
def test_tokens_for(pieces: list[str], chars: int, events: int | None, tokens: int) -> None:
    state = StreamState(True)
    state.parts, state.chars, state.tokens = list(pieces), sum(map(len, pieces)), len(pieces)
    assert state.tokens_for(chars, events) == tokens


FINISH = {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"}


@pytest.mark.parametrize(
    ("last", "plain", "top", "choice"),
    [
        # SGLang's matched_stop (an EOS id) and vLLM's stop_reason, on the finish chunk
        ({"choices": [{**FINISH, "matched_stop": 128009}]}, True, {}, {"matched_stop": 128009}),
        ({"choices": [{**FINISH, "stop_reason": "###"}]}, True, {}, {"stop_reason": "###"}),
        # an engine's own top-level field (the simulator's "sim", llama.cpp's "timings")
        (
            {"choices": [FINISH], "timings": {"predicted_n": 2}},
            True,
            {"timings": {"predicted_n": 2}},
            {},
        ),
        ({"choices": [FINISH], "metadata": None}, True, {}, {}),  # null: left out
        ({"choices": [FINISH], "obfuscation": "x8Kq"}, True, {}, {}),  # OpenAI's padding
        # a choice's own field beyond the plain ones: the general assembly keeps it
        ({"choices": [{**FINISH, "token_ids": [7, 8]}]}, False, {}, {"token_ids": [7, 8]}),
    ],
)
def test_an_assembled_answer_keeps_the_engines_own_fields(
    last: dict[str, Any], plain: bool, top: dict[str, Any], choice: dict[str, Any]
) -> None:
    from gateway.dispatch.assemble import assembled

    stream = [chunk({"role": "assistant", "content": "Hi"}), ev({"id": "c1", **last})]
    for general in (False, True):
        s = fed(stream, general)
        s.events = [block([p]) for p in stream]  # as feed() keeps them
        assert s.plain is plain
        answer = assembled("chat", s)
        assert answer["choices"][0]["message"]["content"] == "Hi"
        assert {
            k: v
            for k, v in answer.items()
            if k not in ("object", "id", "model", "created", "choices")
        } == top
        own = {
            k: v
            for k, v in answer["choices"][0].items()
            if k not in ("index", "message", "logprobs", "finish_reason")
        }
        assert own == choice
