"""Hostile engine answers: size limits (one event, the whole answer) and linear framing.

An engine that sends one enormous SSE event, or an endless answer, is an upstream failure
(``too_large``: the next tier answers), never memory without end; the SSE framer joins an
unfinished event once, when its end arrives, so one huge event costs linear time.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from gateway.upstream.failures import AnswerTooLarge
from gateway.upstream.framing import SSEFramer
from tests.conftest import Proc, rules_for_tests, start_gateway

pytestmark = pytest.mark.processes


def test_framer_is_linear_on_one_huge_event() -> None:
    f = SSEFramer(max_event=64 << 20, max_total=128 << 20)
    chunk = b"x" * 4096
    t0 = time.process_time()  # CPU time: what a busy machine does not stretch
    assert f.feed(b'data: {"a": "') == (b"", [])
    for _ in range(8192):  # 32 MiB in 4 KiB reads: quadratic joining would copy ~128 GB
        assert f.feed(chunk) == (b"", [])
    complete, payloads = f.feed(b'"}\n\ndata: [DO')
    assert time.process_time() - t0 < 2
    assert len(complete) == 13 + 8192 * 4096 + 4 and len(payloads) == 1
    assert f.pending == b"data: [DO"


def test_framer_finds_an_end_split_across_reads() -> None:
    f = SSEFramer()
    assert f.feed(b"data: 1\n") == (b"", [])
    assert f.feed(b"\ndata: 2\n\n") == (b"data: 1\n\ndata: 2\n\n", [b"1", b"2"])
    assert f.feed(b"data: 3\r\n\r\n") == (b"data: 3\n\n", [b"3"])
    assert f.pending == b""


def test_framer_refuses_an_event_or_answer_over_its_limit() -> None:
    f = SSEFramer(max_event=1024, max_total=1 << 20)
    f.feed(b"data: " + b"x" * 1000)
    with pytest.raises(AnswerTooLarge, match="an event is over 1024 bytes"):
        f.feed(b"x" * 100)
    with pytest.raises(AnswerTooLarge, match="an event is over 1024 bytes"):
        SSEFramer(max_event=1024).feed(b"data: 1\n\ndata: " + b"x" * 2000 + b"\n\n")  # one read
    g = SSEFramer(max_event=1024, max_total=4096)
    with pytest.raises(AnswerTooLarge, match="the answer is over 4096 bytes"):
        for _ in range(100):
            g.feed(b"data: 1\n\n" * 10)


@pytest.fixture(scope="module")
def small_fast_tier(
    engines: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    rules = rules_for_tests()
    rules["tiers"]["highspeed"]["max_event_bytes"] = 64 * 1024
    rules["tiers"]["highspeed"]["max_answer_bytes"] = 256 * 1024
    proc: Proc
    proc, url = start_gateway(tmp_path_factory.mktemp("gw"), rules, engines)
    yield url
    proc.stop()


@pytest.mark.parametrize("stream", [False, True])
def test_an_oversized_event_falls_back(small_fast_tier: str, stream: bool) -> None:
    client = openai.OpenAI(base_url=f"{small_fast_tier}/v1", api_key="x", max_retries=0)
    messages: list[ChatCompletionMessageParam] = [
        {"role": "user", "content": "[[highspeed: big=200000]] hi"}
    ]
    if stream:
        streamed = client.chat.completions.with_raw_response.create(
            model="auto", messages=messages, stream=True
        )
        headers = streamed.headers
        text = "".join(c.choices[0].delta.content or "" for c in streamed.parse() if c.choices)
    else:
        raw = client.chat.completions.with_raw_response.create(model="auto", messages=messages)
        headers, text = raw.headers, raw.parse().choices[0].message.content or ""
    client.close()
    assert headers["x-gateway-tier"] == "standard"
    assert headers["x-gateway-fallback"] == "highspeed:too_large -> standard"
    assert text.startswith("Echo (standard)")


def test_an_oversized_answer_falls_back(small_fast_tier: str) -> None:
    client = openai.OpenAI(base_url=f"{small_fast_tier}/v1", api_key="x", max_retries=0)
    words = " ".join(f"w{i}" for i in range(45000))  # ~300 KB of text, no loop in it
    content = f"[[highspeed: text={words}; chunks=600]]"
    raw = client.chat.completions.with_raw_response.create(
        model="auto", messages=[{"role": "user", "content": content}]
    )
    client.close()
    assert raw.headers["x-gateway-fallback"] == "highspeed:too_large -> standard"
