"""The SGLang-shaped simulator (engines/sim/) as a real process on a real socket.

Servers run with a small ``--time-scale`` so answers take milliseconds. Timing assertions
use the model's own figures (``x-sim-*`` headers, the ``sim`` object), never wall-clock
ratios.
"""

from __future__ import annotations

import contextlib
import json
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import openai
import pytest

from engines.sim_model import PrefixCache, make_profile
from tests.conftest import Proc, free_port
from tests.waiting import wait_until

pytestmark = pytest.mark.processes

LONG = " ".join(f"context{i} about the shared system prompt" for i in range(40))


def start_sim(*args: str) -> tuple[Proc, str]:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    argv = [sys.executable, "-m", "engines.sim", "--port", str(port), *args]
    return Proc(argv, f"{base}/health"), base


@contextlib.contextmanager
def sim(*args: str) -> Iterator[str]:
    proc, base = start_sim(*args)
    try:
        yield base
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def hs() -> Iterator[str]:
    with sim("--profile", "highspeed", "--seed", "7", "--time-scale", "0.01") as base:
        yield base


@pytest.fixture(scope="module")
def st() -> Iterator[str]:
    with sim("--profile", "standard", "--seed", "7", "--time-scale", "0.01") as base:
        yield base


@pytest.fixture(scope="module")
def small() -> Iterator[str]:
    """Two batch slots, slower clock: queueing is visible."""
    args = ("--profile", "standard", "--max-running-requests", "2", "--time-scale", "0.1")
    with sim(*args) as base:
        yield base


@pytest.fixture()
def client(hs: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{hs}/v1", api_key="unused", max_retries=0, timeout=20) as c:
        yield c


# --- raw HTTP helpers -----------------------------------------------------------------


def post(
    base: str, path: str, body: dict[str, Any], fault: str = "", timeout: float = 20
) -> tuple[int, dict[str, str], bytes]:
    headers = {"Content-Type": "application/json"}
    if fault:
        headers["x-sim-fault"] = fault
    req = urllib.request.Request(f"{base}{path}", data=json.dumps(body).encode(), headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, {k.lower(): v for k, v in r.headers.items()}, r.read()
    except urllib.error.HTTPError as e:
        with contextlib.closing(e):
            return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()


def get(base: str, path: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(f"{base}{path}", timeout=10) as r:
        return r.status, r.read()


def chat_body(content: str = "Tell me about rivers.", **extra: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": content}], **extra}


def chat(base: str, fault: str = "", **extra: Any) -> tuple[dict[str, str], dict[str, Any]]:
    status, headers, raw = post(base, "/v1/chat/completions", chat_body(**extra), fault)
    assert status == 200, raw
    return headers, json.loads(raw)


def parse_sse(raw: bytes) -> list[Any]:
    events: list[Any] = []
    for line in raw.decode().split("\n"):
        if line.startswith("data: "):
            data = line[6:]
            events.append(data if data == "[DONE]" else json.loads(data))
    return events


def stream(
    base: str, body: dict[str, Any], fault: str = "", timeout: float = 20, path: str = ""
) -> tuple[list[Any], str]:
    """Read an SSE answer line by line; return the events and how reading ended."""
    path = path or "/v1/chat/completions"
    headers = {"Content-Type": "application/json", "x-sim-fault": fault}
    data = json.dumps({**body, "stream": True}).encode()
    req = urllib.request.Request(f"{base}{path}", data=data, headers=headers)
    lines: list[bytes] = []
    end = "eof"
    with urllib.request.urlopen(req, timeout=timeout) as r:
        try:
            while line := r.read1():
                lines.append(line)
        except TimeoutError:
            end = "timeout"
        except Exception as e:  # an incomplete chunked body
            end = type(e).__name__
    return parse_sse(b"".join(lines)), end


def text_of(events: list[Any]) -> str:
    out = []
    for e in events:
        if isinstance(e, dict):
            for c in e.get("choices") or []:
                out.append((c.get("delta") or {}).get("content") or c.get("text") or "")
    return "".join(out)


def metrics(base: str) -> dict[str, float]:
    """Samples of /metrics keyed by name + labels."""
    _, raw = get(base, "/metrics")
    out: dict[str, float] = {}
    for line in raw.decode().splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def sample(m: dict[str, float], name: str) -> float:
    return next(v for k, v in m.items() if k.startswith(name + "{"))


# --- OpenAI shapes --------------------------------------------------------------------


def test_chat_non_stream_shape_and_model_figures(client: openai.OpenAI) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model="m", messages=[{"role": "user", "content": "Hello there"}]
    )
    resp = raw.parse()
    assert resp.object == "chat.completion" and resp.id.startswith("chatcmpl-")
    assert resp.model == "m"
    choice = resp.choices[0]
    assert choice.message.role == "assistant" and choice.message.content
    assert choice.finish_reason == "stop" and choice.message.content.endswith(".")
    u = resp.usage
    assert u is not None and u.prompt_tokens > 0
    assert u.completion_tokens == len(choice.message.content.split())
    assert u.total_tokens == u.prompt_tokens + u.completion_tokens
    assert raw.headers["x-sim-profile"] == "highspeed"
    assert float(raw.headers["x-sim-tpot-ms"]) > 0 and float(raw.headers["x-sim-ttft-ms"]) > 0
    sim_figures = (resp.model_extra or {})["sim"]
    assert sim_figures["steps"] > 0 and sim_figures["e2e_ms"] > sim_figures["ttft_ms"]


def test_chat_stream_shape_matches_the_non_stream_answer(hs: str) -> None:
    body = chat_body("Stream me something", stream_options={"include_usage": True})
    events, end = stream(hs, body)
    assert end == "eof" and events[-1] == "[DONE]" and events.count("[DONE]") == 1
    chunks = [e for e in events if isinstance(e, dict)]
    assert len({(c["id"], c["created"], c["model"]) for c in chunks}) == 1
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    finish = chunks[-2]
    assert finish["choices"][0]["finish_reason"] == "stop" and "sim" in finish
    usage = chunks[-1]
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] > 0
    _, full = chat(hs, content="Stream me something")
    assert text_of(events) == full["choices"][0]["message"]["content"]


def test_stream_without_usage_has_no_usage_chunk(client: openai.OpenAI) -> None:
    chunks = list(
        client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True, max_tokens=7
        )
    )
    assert all(c.usage is None for c in chunks)
    assert chunks[-1].choices[0].finish_reason == "length"
    assert len("".join(c.choices[0].delta.content or "" for c in chunks).split()) == 7


def test_completions(client: openai.OpenAI, hs: str) -> None:
    resp = client.completions.create(model="m", prompt="Once upon a time", max_tokens=5)
    assert resp.object == "text_completion" and resp.choices[0].finish_reason == "length"
    assert resp.choices[0].text.startswith(" ") and resp.usage is not None
    assert resp.usage.completion_tokens == 5 and resp.usage.prompt_tokens == 4
    events, end = stream(
        hs, {"prompt": "Once upon a time", "max_tokens": 5}, path="/v1/completions"
    )
    assert end == "eof" and events[-1] == "[DONE]"
    assert text_of(events) == resp.choices[0].text


def test_models_health_and_server_info(hs: str, st: str) -> None:
    _, raw = get(hs, "/v1/models")
    assert json.loads(raw)["data"][0]["id"] == "sim-highspeed"
    assert get(hs, "/health")[0] == 200
    info = json.loads(get(hs, "/get_server_info")[1])
    assert info["speculative_algorithm"] == "EAGLE3" and info["quantization"] == "fp8"
    assert info["kv_cache_dtype"] == "fp8_e4m3" and info["max_running_requests"] == 48
    info = json.loads(get(st, "/get_server_info")[1])
    assert info["speculative_algorithm"] is None and info["quantization"] is None
    assert info["max_running_requests"] == 256


def test_sglang_extras_are_ignored_and_bad_input_is_400(hs: str) -> None:
    extras: dict[str, Any] = {"top_k": 5, "min_p": 0.1, "regex": "a+", "separate_reasoning": True,
              "chat_template_kwargs": {"enable_thinking": False}, "rid": "r1"}  # fmt: skip
    _, body = chat(hs, **extras)
    assert body["choices"][0]["message"]["content"]
    bad = urllib.request.Request(f"{hs}/v1/chat/completions", data=b"{not json")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(bad, timeout=5)
    with contextlib.closing(e.value):
        assert e.value.code == 400
    assert post(hs, "/v1/chat/completions", {"messages": []})[0] == 400
    assert post(hs, "/v1/chat/completions", chat_body(max_tokens=0))[0] == 400
    assert post(hs, "/v1/chat/completions", chat_body(), fault="nonsense")[0] == 400


def test_stop_strings_and_ignore_eos(hs: str) -> None:
    _, body = chat(hs, stop=["."])
    choice = body["choices"][0]
    assert "." not in choice["message"]["content"] and choice["finish_reason"] == "stop"
    first_word = choice["message"]["content"].split()[0]
    events, _ = stream(hs, chat_body(stop=[first_word]))  # stops before the first token
    assert text_of(events) == "" and events[-1] == "[DONE]"
    chunks = [e for e in events if isinstance(e, dict)]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    _, body = chat(hs, ignore_eos=True, max_tokens=333)
    assert body["usage"]["completion_tokens"] == 333
    assert body["choices"][0]["finish_reason"] == "length"


def test_continue_final_message_continues_the_text(hs: str) -> None:
    prefix = "The three things to remember are"
    messages = [
        {"role": "user", "content": "What should I remember?"},
        {"role": "assistant", "content": prefix},
    ]
    _, cont = chat(hs, messages=messages, continue_final_message=True, max_tokens=10)
    text = cont["choices"][0]["message"]["content"]
    assert not text.startswith(prefix)
    assert text.startswith(" ") and text[1].islower()  # the same sentence goes on
    _, fresh = chat(hs, messages=messages, max_tokens=10)  # a new assistant turn instead
    assert fresh["choices"][0]["message"]["content"][0].isupper()


DELTAS = [{"role": "user", "content": "Tell me about deltas."}]


def _continue(base: str, prefix: str, **extra: Any) -> dict[str, Any]:
    messages = [*extra.pop("ask", DELTAS), {"role": "assistant", "content": prefix}]
    _, cont = chat(base, messages=messages, continue_final_message=True, **extra)
    return dict(cont["choices"][0])


@pytest.mark.parametrize(
    "cut",
    [
        lambda t: t[: t.index(" ", 30)],  # at a word boundary
        lambda t: t[: t.index(" ", 30) + 3],  # inside a word
        lambda t: t[: len(t) // 2],
        lambda t: t,  # all of it: nothing is left to say
        lambda t: "",
    ],
)
def test_a_continuation_of_its_own_answer_is_the_rest_of_it(hs: str, st: str, cut: Any) -> None:
    # the fast replica's answer, continued on the standard one (same seed): the headline's
    # loop fallback, which continues the text before the loop
    _, whole = chat(hs, messages=DELTAS)
    text = whole["choices"][0]["message"]["content"]
    prefix = cut(text)
    cont = _continue(st, prefix)
    assert prefix + cont["message"]["content"] == text and cont["finish_reason"] == "stop"


def test_a_continuation_of_a_foreign_prefix_has_as_many_words_as_were_left(st: str) -> None:
    _, whole = chat(st, messages=DELTAS)
    words = len(whole["choices"][0]["message"]["content"].split())
    prefix = "Deltas form where rivers slow down and drop what they carry,"
    rest = _continue(st, prefix)["message"]["content"]
    assert rest.startswith(" ") and rest[1].islower()  # the same sentence goes on
    left = max(8, words - len(prefix.split()))
    assert left <= len(rest.split()) < left + 30  # it ends on the first sentence end past it


def test_a_continuation_honours_its_own_min_tokens(st: str) -> None:
    _, whole = chat(st, messages=DELTAS)
    text = whole["choices"][0]["message"]["content"]
    prefix = text[: text.rindex(" ", 0, len(text) - 10)]  # all but the last word or two
    rest = _continue(st, prefix, min_tokens=30)["message"]["content"]
    assert (prefix + rest).startswith(text) and len(rest.split()) >= 30


def test_json_and_tool_answers_are_continued_as_what_they_are(st: str) -> None:
    fmt = {"type": "json_object"}
    _, whole = chat(st, messages=DELTAS, response_format=fmt)
    text = whole["choices"][0]["message"]["content"]
    rest = _continue(st, text[:12], response_format=fmt)["message"]["content"]
    assert json.loads(text[:12] + rest) == json.loads(text)
    # after a tool's result the answer is text, and so is its continuation
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    ask = [
        {"role": "user", "content": "Call f."},
        {"role": "assistant", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        ]},
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
    ]  # fmt: skip
    _, after = chat(st, messages=ask, tools=tools)
    text = after["choices"][0]["message"]["content"]
    cont = _continue(st, text[:20], ask=ask, tools=tools)
    assert not cont["message"].get("tool_calls") and text[:20] + cont["message"]["content"] == text


# --- metrics, load and the latency model ----------------------------------------------


def test_metrics_have_sglang_names_and_counters_move(hs: str) -> None:
    before = metrics(hs)
    for name in (
        "sglang:num_running_reqs",
        "sglang:num_queue_reqs",
        "sglang:cache_hit_rate",
        "sglang:gen_throughput",
        "sglang:prompt_tokens_total",
        "sglang:generation_tokens_total",
        "sglang:time_to_first_token_seconds_count",
        "sglang:inter_token_latency_seconds_count",
        "sglang:e2e_request_latency_seconds_count",
        'sglang:time_to_first_token_seconds_bucket{model_name="sim-highspeed",le="+Inf"}',
    ):
        assert any(k.startswith(name) for k in before), name
    assert all('model_name="sim-highspeed"' in k for k in before)
    _, body = chat(hs, content="count me please")
    after = metrics(hs)
    for name in ("sglang:prompt_tokens_total", "sglang:e2e_request_latency_seconds_count"):
        assert sample(after, name) > sample(before, name)
    grown = sample(after, "sglang:generation_tokens_total")
    assert (
        grown - sample(before, "sglang:generation_tokens_total")
        >= body["usage"]["completion_tokens"]
    )


def test_queueing_beyond_max_running_requests(small: str) -> None:
    body = chat_body("a long answer", ignore_eos=True, max_tokens=300)
    seen = {"queue": 0.0, "running": 0.0}

    def look() -> bool:
        m = metrics(small)
        seen["queue"] = max(seen["queue"], sample(m, "sglang:num_queue_reqs"))
        seen["running"] = max(seen["running"], sample(m, "sglang:num_running_reqs"))
        return seen["queue"] > 0

    def watch() -> None:
        wait_until(look, "a request queued", interval=0.01)

    with ThreadPoolExecutor(6) as pool:
        calls = [pool.submit(post, small, "/v1/chat/completions", body) for _ in range(5)]
        watcher = pool.submit(watch)
        results = [c.result() for c in calls]
        watcher.result()
    assert seen["queue"] >= 1 and seen["running"] == 2
    assert all(status == 200 for status, _, _ in results)
    queued = [float(h["x-sim-queue-ms"]) for _, h, _ in results]
    assert sum(q > 0 for q in queued) >= 3  # three of five had to wait for a slot
    assert max(float(h["x-sim-batch"]) for _, h, _ in results) == 2


def test_a_dropped_stream_frees_its_slot(small: str) -> None:
    before = sample(metrics(small), "sglang:num_aborted_requests_total")
    data = json.dumps(chat_body(ignore_eos=True, max_tokens=2000, stream=True)).encode()
    req = urllib.request.Request(f"{small}/v1/chat/completions", data=data)
    with urllib.request.urlopen(req, timeout=10) as r:
        r.readline()

    def aborted() -> dict[str, float] | None:
        m = metrics(small)
        return m if sample(m, "sglang:num_aborted_requests_total") > before else None

    m = wait_until(aborted, "the dropped stream counted as aborted")
    assert sample(m, "sglang:num_aborted_requests_total") == before + 1
    assert sample(m, "sglang:num_running_reqs") == 0


def test_prefix_cache_hits_for_repeated_prompts(hs: str) -> None:
    rate0 = sample(metrics(hs), "sglang:cache_hit_rate")
    h1, first = chat(hs, content=LONG + " first question?", max_tokens=5)
    h2, again = chat(hs, content=LONG + " second question?", max_tokens=5)
    assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    cached = again["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached >= 0.8 * again["usage"]["prompt_tokens"]
    assert int(h2["x-sim-cached-tokens"]) == cached
    assert float(h2["x-sim-prefill-ms"]) < float(h1["x-sim-prefill-ms"])
    assert sample(metrics(hs), "sglang:cache_hit_rate") > rate0
    # the next turn of a conversation hits its whole history, the answer included
    answer = first["choices"][0]["message"]["content"]
    turns = [
        {"role": "user", "content": LONG + " first question?"},
        {"role": "assistant", "content": answer},
        {"role": "user", "content": "and then?"},
    ]
    _, follow = chat(hs, messages=turns, max_tokens=5)
    history = first["usage"]["prompt_tokens"] + len(answer.split())
    assert follow["usage"]["prompt_tokens_details"]["cached_tokens"] >= history - 16


def test_highspeed_is_faster_per_output_token(hs: str, st: str) -> None:
    h_fast, fast = chat(hs, content="Same request for both", max_tokens=50)
    h_slow, slow = chat(st, content="Same request for both", max_tokens=50)
    assert float(h_fast["x-sim-tpot-ms"]) * 2 < float(h_slow["x-sim-tpot-ms"])
    assert float(h_fast["x-sim-accept-len"]) > 2 and float(h_slow["x-sim-accept-len"]) == 1
    assert fast["sim"]["tpot_ms"] < slow["sim"]["tpot_ms"]
    assert fast["sim"]["steps"] < slow["sim"]["steps"]  # bursts of accepted tokens


def test_latency_model_shape() -> None:
    hs, st = make_profile("highspeed"), make_profile("standard")
    assert round(1000 / st.tpot_ms(1), 2) == 158.34  # SGLang, no speculation, 1x H100
    assert round(hs.spec_speedup(1), 2) == 2.36 and round(hs.spec_speedup(64), 2) == 1.38
    for p in (hs, st):
        assert p.tpot_ms(1) < p.tpot_ms(8) < p.tpot_ms(64) < p.tpot_ms(256)
    assert hs.accept_len(1) > hs.accept_len(16) > hs.accept_len(128) > 1
    assert hs.tpot_ms(64) < st.tpot_ms(64)
    assert hs.prefill_ms(2000) < st.prefill_ms(2000) < st.prefill_ms(4000)


def test_prefix_cache_evicts_leaves_first() -> None:
    cache = PrefixCache(capacity_tokens=64, block=16)
    shared = [f"s{i}" for i in range(32)]
    cache.insert([*shared, *(f"a{i}" for i in range(32))])
    assert cache.match([*shared, "x"]) == 32
    cache.insert([*shared, *(f"b{i}" for i in range(32))])  # over capacity: a-leaves go
    assert cache.match([*shared, *(f"b{i}" for i in range(32))]) == 64
    assert cache.match([*shared, *(f"a{i}" for i in range(32))]) == 32


# --- faults ---------------------------------------------------------------------------


def test_fault_500_and_429(client: openai.OpenAI, hs: str) -> None:
    with pytest.raises(openai.InternalServerError) as e:
        client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "x"}],
            extra_headers={"x-sim-fault": "500"},
        )
    assert e.value.status_code == 500
    status, headers, raw = post(hs, "/v1/chat/completions", chat_body(), fault="429")
    assert status == 429 and float(headers["retry-after"]) > 0
    assert json.loads(raw)["error"]["code"] == 429


@pytest.mark.parametrize("draw", ["order", "content"])
def test_rate_faults_drawn_by_order_or_by_content(draw: str) -> None:
    from engines.sim import SimConfig
    from engines.sim.faults import FaultDraw

    faults = FaultDraw(SimConfig(port=0, seed=3, faults={"loop": 0.5}, fault_draw=draw))
    digests = [f"{i:064x}" for i in range(40)]
    first = [faults.draw("", d) for d in digests]
    again = [faults.draw("", d) for d in digests]  # the same requests, sent again
    assert 5 < sum(1 for f in first if f) < 35  # about half, either way
    assert (first == again) is (draw == "content")  # by content: the same ones each time
    assert faults.draw("none", digests[0]) == set() and faults.draw("cut", digests[0]) >= {"cut"}


def test_fault_rates_are_replaced_while_it_runs() -> None:
    """``POST /sim/faults``: every answer loops from now on (a bad deploy), then none does."""
    with sim("--seed", "5") as base:
        assert chat(base)[0]["x-sim-faults"] == "none"
        status, _, raw = post(base, "/sim/faults", {"faults": {"loop": 1.0}})
        assert status == 200 and json.loads(raw) == {"faults": {"loop": 1.0}}
        assert all(chat(base)[0]["x-sim-faults"] == "loop" for _ in range(5))
        assert json.loads(get(base, "/get_server_info")[1])["sim"]["faults"] == {"loop": 1.0}
        assert post(base, "/sim/faults", {"faults": {}})[0] == 200
        assert chat(base)[0]["x-sim-faults"] == "none"
        assert json.loads(get(base, "/sim/faults")[1]) == {"faults": {}}
        refused: list[dict[str, Any]] = [
            {"faults": {"nope": 1}},
            {"faults": {"loop": 2}},
            {"faults": []},
            {},
        ]
        for bad in refused:
            assert post(base, "/sim/faults", bad)[0] == 400, bad


def test_fault_hang_never_answers(hs: str) -> None:
    with pytest.raises(TimeoutError):
        post(hs, "/v1/chat/completions", chat_body(), fault="hang", timeout=0.5)


def test_fault_slow_ttft(hs: str) -> None:
    headers, body = chat(hs, fault="slow_ttft", max_tokens=3)
    assert float(headers["x-sim-ttft-ms"]) >= 5000 and body["sim"]["ttft_ms"] >= 5000


def test_fault_stall_keeps_the_connection_open(hs: str) -> None:
    events, end = stream(hs, chat_body(), fault="stall", timeout=0.5)
    assert end == "timeout" and "[DONE]" not in events
    assert 3 <= len(text_of(events).split()) <= 8


def test_fault_cut_closes_mid_stream(hs: str) -> None:
    events, end = stream(hs, chat_body(), fault="cut", timeout=5)
    assert end not in ("eof", "timeout") and "[DONE]" not in events
    assert text_of(events)


def test_fault_error_event(hs: str) -> None:
    events, end = stream(hs, chat_body(), fault="error_event")
    assert end == "eof" and events[-1] == "[DONE]"
    errors = [e for e in events if isinstance(e, dict) and "error" in e]
    assert len(errors) == 1 and errors[0]["error"]["code"] == 500
    assert text_of(events)


def test_fault_loop_and_leak(hs: str) -> None:
    _, body = chat(hs, fault="loop", max_tokens=120)
    text = body["choices"][0]["message"]["content"]
    assert body["choices"][0]["finish_reason"] == "length"
    last = text.rstrip(".").split(".")[-2].strip()  # a whole repeated sentence
    assert text.count(last) >= 3
    _, body = chat(hs, fault="leak")
    assert "<|im_end|>" in body["choices"][0]["message"]["content"]


SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
        "warm": {"type": "boolean"},
        "temps": {"type": "array", "items": {"type": "number"}},
        "unit": {"enum": ["C", "F"]},
    },
    "required": ["city", "days", "warm"],
}


def test_json_mode_and_bad_json(hs: str) -> None:
    _, body = chat(hs, response_format={"type": "json_object"})
    assert isinstance(json.loads(body["choices"][0]["message"]["content"]), dict)
    fmt = {"type": "json_schema", "json_schema": {"name": "w", "schema": SCHEMA}}
    _, body = chat(hs, response_format=fmt)
    value = json.loads(body["choices"][0]["message"]["content"])
    assert isinstance(value["city"], str) and 1 <= value["days"] <= 7
    assert isinstance(value["warm"], bool) and value["unit"] in ("C", "F")
    assert all(isinstance(t, float) for t in value["temps"])
    for i in range(3):  # every corruption variant is invalid
        _, body = chat(hs, fault="bad_json", response_format=fmt, content=f"v{i}")
        with pytest.raises(json.JSONDecodeError):
            json.loads(body["choices"][0]["message"]["content"])
    _, body = chat(hs, fault="bad_json")  # no JSON mode: nothing to break
    assert body["choices"][0]["message"]["content"]


TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                "required": ["city"],
            },
        },
    },
    {"type": "function", "function": {"name": "other", "parameters": {"type": "object"}}},
]


def test_tools_and_bad_tool(client: openai.OpenAI, hs: str) -> None:
    resp = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "weather?"}], tools=TOOLS
    )
    assert resp.choices[0].finish_reason == "tool_calls"
    calls = resp.choices[0].message.tool_calls
    assert calls and calls[0].type == "function"
    assert calls[0].function.name == "get_weather"
    assert isinstance(json.loads(calls[0].function.arguments)["city"], str)
    for i in range(4):
        _, body = chat(hs, fault="bad_tool", tools=TOOLS, content=f"weather {i}?")
        fn = body["choices"][0]["message"]["tool_calls"][0]["function"]
        unknown = fn["name"] not in ("get_weather", "other")
        assert unknown or not parses(fn["arguments"])


def parses(text: str) -> bool:
    try:
        json.loads(text)
    except json.JSONDecodeError:
        return False
    return True


NAMED: Any = {"type": "function", "function": {"name": "other"}}


def test_tool_call_streams_in_openai_shape(client: openai.OpenAI) -> None:
    chunks = list(
        client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "weather?"}],
            tools=TOOLS,
            tool_choice=NAMED,
            stream=True,
        )
    )
    deltas = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or []]
    assert deltas[0].id and deltas[0].function and deltas[0].function.name == "other"
    args = "".join(d.function.arguments or "" for d in deltas if d.function)
    assert json.loads(args) == {}
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


# --- determinism ----------------------------------------------------------------------


def run_sequence(base: str) -> list[tuple[int, str]]:
    out = []
    for i in range(8):
        status, _, raw = post(base, "/v1/chat/completions", chat_body(f"question {i % 3}"))
        body = json.loads(raw)
        text = body["choices"][0]["message"]["content"] if status == 200 else body["error"]["type"]
        out.append((status, text))
    return out


def test_same_seed_same_outputs_and_fault_draws() -> None:
    args = ("--time-scale", "0.01", "--fault", "500=0.3", "--fault", "loop=0.3")
    with sim("--seed", "11", *args) as a:
        first = run_sequence(a)
    with sim("--seed", "11", *args) as b:
        second = run_sequence(b)
    with sim("--seed", "12", *args) as c:
        other = run_sequence(c)
    assert first == second
    assert first != other
    statuses = {s for s, _ in first + other}
    assert statuses == {200, 500}  # rates are drawn: some failures, not all
