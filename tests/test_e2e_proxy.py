"""End to end: the openai SDK -> the gateway process -> fake engine processes, real sockets."""

from __future__ import annotations

import json
import socket
import sys
import time
import urllib.request
from typing import Any

import openai
import pytest

from tests.conftest import free_port, rules_for_tests, start_gateway
from tests.waiting import wait_for_log, wait_until

pytestmark = [pytest.mark.processes, pytest.mark.slow]


def engine_requests(url: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"{url}/_requests") as r:
        data: list[dict[str, Any]] = json.loads(r.read())
        return data


def reset(engines: dict[str, str]) -> None:
    for url in engines.values():
        urllib.request.urlopen(urllib.request.Request(f"{url}/_reset", method="POST")).close()


def chat(client: Any, content: str, **kw: Any) -> Any:
    raw = client.chat.completions.with_raw_response.create(
        model=kw.pop("model", "auto"), messages=[{"role": "user", "content": content}], **kw
    )
    return raw.headers, raw.parse()


# --- the happy path ---------------------------------------------------------------------


def test_plain_chat_goes_to_highspeed_with_explaining_headers(client: Any) -> None:
    headers, resp = chat(client, "Hello there")
    assert resp.choices[0].message.content == "Echo (highspeed): Hello there"
    assert headers["x-gateway-tier"] == "highspeed"
    assert headers["x-gateway-route"].startswith("default; task=chat(default) sla=interactive")
    assert "x-gateway-fallback" not in headers
    assert float(headers["x-gateway-overhead-ms"]) >= 0
    assert headers["x-request-id"].startswith("req_")
    assert resp.usage.total_tokens > 0
    assert resp.system_fingerprint == "fp_highspeed"  # upstream fields kept


def test_unknown_fields_pass_through_and_model_is_the_tiers(
    client: Any, engines: dict[str, str]
) -> None:
    reset(engines)
    chat(
        client,
        "hi",
        extra_body={"top_k": 7, "regex": "a+", "custom": {"x": [1, 2]}},
        temperature=0.1,
    )
    body = engine_requests(engines["highspeed"])[-1]
    assert body["top_k"] == 7 and body["regex"] == "a+" and body["custom"] == {"x": [1, 2]}
    assert body["temperature"] == 0.1
    assert body["model"] == "fake-highspeed"


def test_request_id_is_echoed(client: Any) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model="auto",
        messages=[{"role": "user", "content": "x"}],
        extra_headers={"x-request-id": "abc-123"},
    )
    assert raw.headers["x-request-id"] == "abc-123"


@pytest.mark.parametrize(
    ("model", "header", "tier", "route_part"),
    [
        ("standard", None, "standard", "tier=standard pinned by model"),
        ("fast", None, "highspeed", "tier=highspeed pinned by model"),
        ("fake-standard", None, "standard", "tier=standard pinned by model"),
        ("auto", "standard", "standard", "tier=standard pinned by header"),
    ],
    ids=["alias-standard", "alias-fast", "tier-model-name", "tier-header"],
)
def test_tier_pinning(
    client: Any, model: str, header: str | None, tier: str, route_part: str
) -> None:
    extra = {"x-gateway-tier": header} if header else {}
    headers, resp = chat(client, "pin me", model=model, extra_headers=extra)
    assert headers["x-gateway-tier"] == tier
    assert route_part in headers["x-gateway-route"]
    assert resp.choices[0].message.content == f"Echo ({tier}): pin me"


def test_reasoning_goes_to_standard(client: Any) -> None:
    headers, _ = chat(client, "Prove step by step that the square root of 2 is irrational.")
    assert headers["x-gateway-tier"] == "standard"
    route = headers["x-gateway-route"]
    assert 'reasoning-to-standard; task=reasoning(cue "step by step")' in route


def test_task_and_sla_headers(client: Any) -> None:
    headers, _ = chat(
        client, "hello", extra_headers={"x-gateway-task": "code", "x-gateway-sla": "batch"}
    )
    assert "task=code(header) sla=batch(header)" in headers["x-gateway-route"]
    assert headers["x-gateway-tier"] == "standard"  # rules run in order:
    # batch-to-standard comes before the code rule, so the batch SLA wins


def test_text_completions(client: Any) -> None:
    raw = client.completions.with_raw_response.create(model="auto", prompt="Say hi")
    resp = raw.parse()
    assert resp.choices[0].text == "Echo (highspeed): Say hi"
    assert raw.headers["x-gateway-tier"] == "highspeed"


def test_models_list(client: Any) -> None:
    ids = [m.id for m in client.models.list()]
    assert ids[:4] == ["auto", "fast", "highspeed", "standard"]
    assert "fake-highspeed" in ids and "fake-standard" in ids


def test_tools_and_json_mode_work(client: Any) -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"],
                },
            },
        }
    ]
    headers, resp = chat(
        client, 'weather? [[*: tool=get_weather; args={"city": "Oslo"}]]', tools=tools
    )
    call = resp.choices[0].message.tool_calls[0]
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {
        "city": "Oslo"
    }
    assert headers["x-gateway-route"].startswith("agent-step; task=agent(tools)")
    headers, resp = chat(
        client, 'give json [[*: json={"a": 1}]]', response_format={"type": "json_object"}
    )
    assert json.loads(resp.choices[0].message.content) == {"a": 1}
    assert headers["x-gateway-route"].startswith("extraction; task=extraction(json)")


# --- fallbacks ----------------------------------------------------------------------------


FALLBACKS = [
    ("[[highspeed: loop]]", "highspeed:check_repetition"),
    ("[[highspeed: leak]]", "highspeed:check_template_leak"),
    ("[[highspeed: empty]]", "highspeed:check_non_empty"),
    ("[[highspeed: length]]", "highspeed:check_not_truncated"),
    ("[[highspeed: status=500]]", "highspeed:http_500"),
    ("[[highspeed: status=503]]", "highspeed:http_503"),
    ("[[highspeed: status=429]]", "highspeed:http_429"),
    ("[[highspeed: malformed]]", "highspeed:bad_body"),
    ("[[highspeed: delay=5]]", "highspeed:timeout"),
]


@pytest.mark.parametrize(
    ("directive", "reason"), FALLBACKS, ids=[r.split(":", 1)[1] for _, r in FALLBACKS]
)
def test_fallback_to_standard(client: Any, directive: str, reason: str) -> None:
    headers, resp = chat(client, f"question {directive}")
    if reason == "highspeed:check_template_leak":  # the good text before the token, continued
        assert resp.choices[0].message.content == "Here is the answer you wanted. [continued]"
        assert headers["x-gateway-continued"] == "highspeed:30"
    else:
        assert resp.choices[0].message.content == "Echo (standard): question"
    assert headers["x-gateway-tier"] == "standard"
    assert headers["x-gateway-fallback"].startswith(reason)
    assert headers["x-gateway-fallback"].endswith("-> standard")


def test_invalid_tool_call_falls_back(client: Any) -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"],
                },
            },
        }
    ]
    headers, resp = chat(
        client,
        "w [[highspeed: tool=get_weather; args={}]] [[standard: tool=get_weather; "
        'args={"city": "Rome"}]]',
        tools=tools,
    )
    assert headers["x-gateway-fallback"].startswith("highspeed:check_tool_call_valid")
    assert json.loads(resp.choices[0].message.tool_calls[0].function.arguments) == {"city": "Rome"}


def test_json_schema_failure_falls_back(client: Any) -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    rf = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    headers, resp = chat(
        client, 'n [[highspeed: json={"n": "one"}]] [[standard: json={"n": 1}]]', response_format=rf
    )
    assert headers["x-gateway-fallback"].startswith("highspeed:check_json_schema")
    assert json.loads(resp.choices[0].message.content) == {"n": 1}


def test_last_tier_failing_a_check_is_delivered_and_named(client: Any) -> None:
    headers, resp = chat(client, "[[highspeed: status=500]] [[standard: loop]]")
    assert headers["x-gateway-tier"] == "standard"
    assert headers["x-gateway-checks-failed"] == "repetition"
    assert "I will repeat" in resp.choices[0].message.content


def test_every_tier_fails_502_names_each_attempt(
    engines: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> None:
    rules = rules_for_tests()
    rules["default"]["on_last_failure"] = "error"
    proc, url = start_gateway(tmp_path_factory.mktemp("gw"), rules, engines)
    try:
        c = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=2)
        reset(engines)
        with pytest.raises(openai.APIStatusError) as ei:
            chat(c, "[[highspeed: status=500]] [[standard: loop]]")
        e = ei.value
        assert e.status_code == 502
        assert e.response.headers["x-should-retry"] == "false"
        body = e.body
        assert isinstance(body, dict)  # the error envelope's object, as the SDK parsed it
        assert body["code"] == "all_tiers_failed"
        assert "highspeed: http_500" in body["message"]
        assert "standard: check_repetition" in body["message"]
        # the SDK obeyed x-should-retry: one client request, no retries of it
        assert len(engine_requests(engines["standard"])) == 1
    finally:
        proc.stop()


def test_every_tier_times_out_504(client: Any) -> None:
    with pytest.raises(openai.APIStatusError) as ei:
        chat(client, "[[*: hang]]")
    assert ei.value.status_code == 504
    body = ei.value.body
    assert isinstance(body, dict)
    assert body["code"] == "upstream_timeout"


def test_engine_client_error_is_relayed_not_retried(client: Any, engines: dict[str, str]) -> None:
    reset(engines)
    with pytest.raises(openai.BadRequestError) as ei:
        chat(client, "[[highspeed: status=400]]")
    body = ei.value.body
    assert isinstance(body, dict)
    assert body["message"] == "highspeed says 400"
    assert engine_requests(engines["standard"]) == []


def test_connection_refused_falls_back(
    engines: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    rules = rules_for_tests()
    rules["tiers"]["highspeed"]["health"] = {"enabled": False}  # else a probe finds it first
    proc, url = start_gateway(
        tmp_path_factory.mktemp("gw"),
        rules,
        {"highspeed": dead, "standard": engines["standard"]},
    )
    try:
        c = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
        headers, resp = chat(c, "anyone?")
        assert headers["x-gateway-fallback"].startswith("highspeed:connect")
        assert resp.choices[0].message.content == "Echo (standard): anyone?"
    finally:
        proc.stop()


def test_several_urls_spread_load(
    engines: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> None:
    reset(engines)
    both = f"{engines['highspeed']},{engines['standard']}"
    proc, url = start_gateway(
        tmp_path_factory.mktemp("gw"),
        rules_for_tests(),
        {"highspeed": both, "standard": engines["standard"]},
    )
    try:
        c = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
        for i in range(20):
            chat(c, f"prompt number {i} with its own prefix")
        seen = {len(engine_requests(engines[n])) for n in ("highspeed", "standard")}
        assert 0 not in seen  # both replicas of the pool got some of the 20
        # prefix affinity: the same prompt head goes to the same replica
        reset(engines)
        for _ in range(5):
            chat(c, "the very same prompt")
        counts = sorted(len(engine_requests(engines[n])) for n in ("highspeed", "standard"))
        assert counts == [0, 5]
    finally:
        proc.stop()


# --- streams -------------------------------------------------------------------------------


def stream(client: Any, content: str, **kw: Any) -> tuple[Any, list[Any]]:
    with client.chat.completions.with_streaming_response.create(
        model=kw.pop("model", "auto"),
        messages=[{"role": "user", "content": content}],
        stream=True,
        **kw,
    ) as r:
        return r.headers, list(r.parse())


def text_of(chunks: list[Any]) -> str:
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def test_stream_passthrough_with_headers_and_usage(client: Any) -> None:
    headers, chunks = stream(client, "stream me please", stream_options={"include_usage": True})
    assert text_of(chunks) == "Echo (highspeed): stream me please"
    assert headers["x-gateway-tier"] == "highspeed"
    assert headers["content-type"].startswith("text/event-stream")
    assert "x-gateway-route" in headers and "x-request-id" in headers
    assert chunks[-1].usage.total_tokens > 0
    assert {c.id for c in chunks} == {chunks[0].id}


STREAM_FALLBACKS = [
    ("[[highspeed: status=500]]", "highspeed:http_500"),
    ("[[highspeed: first_error]]", "highspeed:stream_error"),
    ("[[highspeed: delay=3]]", "highspeed:timeout_ttft"),
    ("[[highspeed: cut_after=0]]", "highspeed:stream_cut"),
]


@pytest.mark.parametrize(
    ("directive", "reason"), STREAM_FALLBACKS, ids=[r.split(":", 1)[1] for _, r in STREAM_FALLBACKS]
)
def test_stream_falls_back_before_first_byte(client: Any, directive: str, reason: str) -> None:
    headers, chunks = stream(client, f"s {directive}")
    assert text_of(chunks) == "Echo (standard): s"
    assert headers["x-gateway-tier"] == "standard"
    assert headers["x-gateway-fallback"].startswith(reason)


def raw_sse(gateway: str, content: str, model: str = "auto") -> bytes:
    body = json.dumps(
        {"model": model, "stream": True, "messages": [{"role": "user", "content": content}]}
    ).encode()
    req = urllib.request.Request(
        f"{gateway}/v1/chat/completions", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        data: bytes = r.read()
        return data


@pytest.mark.parametrize(
    "directive",
    ["[[*: cut_after=2; chunks=6]]", "[[*: stall_after=2; chunks=6]]"],
    ids=["cut", "stall"],
)
def test_stream_broken_after_first_byte_ends_with_error_and_done(
    gateway: str, directive: str
) -> None:
    # pinned to the last tier: nothing left to continue on (tests/test_streams.py has more)
    data = raw_sse(gateway, f"one two three four five six seven {directive}", "standard")
    events = [e for e in data.split(b"\n\n") if e.startswith(b"data: ")]
    assert events[-1] == b"data: [DONE]"
    err = json.loads(events[-2][6:])
    assert err["error"]["code"] == "stream_broken"
    assert b'"content": "Echo' in data  # what was sent before the break stayed


def test_stream_client_disconnect_cancels_upstream(gateway: str, engines: dict[str, str]) -> None:
    reset(engines)
    body = json.dumps(
        {
            "model": "auto",
            "stream": True,
            "messages": [
                {"role": "user", "content": "long [[highspeed: gap=0.2; chunks=40]] " + "w " * 40}
            ],
        }
    )
    host, port = gateway.removeprefix("http://").split(":")
    s = socket.create_connection((host, int(port)))
    s.sendall(
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
        f"\r\nContent-Length: {len(body)}\r\n\r\n{body}".encode()
    )
    assert b"200 OK" in s.recv(4096)
    s.close()
    # its 40 chunks take 8 s: a stream the gateway left running would end long after
    wait_until(lambda: _cancelled(engines["highspeed"]), "the engine's stream cancelled")
    assert _cancelled(engines["highspeed"]) == 1


def test_open_circuit_sends_traffic_straight_to_standard(
    engines: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> None:
    rules = rules_for_tests()
    rules["tiers"]["highspeed"]["circuit"] = {"failures": 2, "cooldown": 60.0}
    proc, url = start_gateway(tmp_path_factory.mktemp("gw"), rules, engines)
    try:
        c = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
        # a 500 is transient: tried twice on the fast tier (two failures open the circuit)
        headers, _ = chat(c, "[[highspeed: status=500]]")
        assert headers["x-gateway-fallback"].startswith("highspeed:http_500; highspeed:http_500")
        reset(engines)
        headers, _ = chat(c, "fine now")
        assert headers["x-gateway-tier"] == "standard"
        assert "x-gateway-fallback" not in headers
        assert "unavailable: highspeed" in headers["x-gateway-route"]
        assert engine_requests(engines["highspeed"]) == []
    finally:
        proc.stop()


def test_check_failures_do_not_open_the_circuit(
    engines: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> None:
    rules = rules_for_tests()
    rules["tiers"]["highspeed"]["circuit"] = {"failures": 2, "cooldown": 60.0}
    proc, url = start_gateway(tmp_path_factory.mktemp("gw"), rules, engines)
    try:
        c = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
        for _ in range(3):
            chat(c, "[[highspeed: loop]]")
        headers, _ = chat(c, "fine now")
        assert headers["x-gateway-tier"] == "highspeed"
    finally:
        proc.stop()


def test_dead_replica_leaves_rotation_after_a_probe_and_comes_back(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    from tests.conftest import start_engine

    a, a_url = start_engine("highspeed")
    b, b_url = start_engine("replica-b")
    st, st_url = start_engine("standard")
    rules = rules_for_tests()
    rules["tiers"]["highspeed"]["health"] = {"interval": 0.2, "timeout": 0.5}
    proc, url = start_gateway(
        tmp_path_factory.mktemp("gw"),
        rules,
        {"highspeed": f"{a_url},{b_url}", "standard": st_url},
    )
    try:
        c = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
        b.stop()
        wait_for_log(proc, f"replica {b_url} of highspeed is down")  # a probe found it
        for i in range(10):
            headers, resp = chat(c, f"distinct prefix {i}")
            assert "x-gateway-fallback" not in headers  # never even tried the dead one
            assert resp.choices[0].message.content.startswith("Echo (highspeed)")
        port = b_url.rsplit(":", 1)[1]
        from tests.conftest import ROOT, Proc

        mark = len(proc.log())
        b = Proc(
            [
                sys.executable,
                str(ROOT / "tests" / "fake_engine.py"),
                "--name",
                "replica-b",
                "--port",
                port,
            ],
            f"{b_url}/health",
        )
        wait_for_log(proc, f"replica {b_url} of highspeed is up", since=mark)
        seen = {
            chat(c, f"other prefix {i}")[1].choices[0].message.content.split(")")[0]
            for i in range(12)
        }
        assert seen == {"Echo (highspeed", "Echo (replica-b"}
    finally:
        for p in (proc, a, b, st):
            p.stop()


# --- time is the budget (through the real gateway and fake engines) ---------------------------


def test_time_budgets_end_to_end(
    engines: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A hung fast tier, a 3 s loop and a slow first token, non-streamed: the standard tier
    answers without waiting for the fast tier, and the fast tier's generation is stopped.

    The headers say how each was answered (a hedge fires at 0.3 s; waiting out the fast
    tier's first token would end in its 1 s TTFT timeout, a fallback instead), and the
    engine's count of streams cut short says the loop was dropped while generated."""
    rules = rules_for_tests(ttft=1.0, total=10.0, stall=2.0)
    rules["default"]["hedge_after"] = 0.3
    proc, url = start_gateway(tmp_path_factory.mktemp("gw"), rules, engines)
    try:
        c = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=20)
        cases = [
            # the fast tier never answers: hedged at 0.3 s, answered by standard
            ("[[highspeed: hang]]", "x-gateway-hedge", 0),
            # the fast tier's first token comes after 3 s: hedged, its request cancelled
            ("[[highspeed: delay=3]]", "x-gateway-hedge", 0),
            # the fast tier loops for 3 s: seen while generated, dropped, standard answers
            ("[[highspeed: loop; chunks=60; gap=0.05]]", "x-gateway-fallback", 1),
        ]
        for directive, header, cut_short in cases:
            reset(engines)
            headers, resp = chat(c, f"q {directive}")
            assert headers["x-gateway-tier"] == "standard", directive
            assert header in headers, (directive, headers)
            assert resp.choices[0].message.content == "Echo (standard): q"
            if cut_short:  # the loop's stream was dropped before its end
                wait_until(lambda: _cancelled(engines["highspeed"]), "the loop's stream cut")
    finally:
        proc.stop()


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "plain"])
def test_a_hedge_the_standard_tier_won_is_handed_back_end_to_end(
    engines: dict[str, str], tmp_path_factory: pytest.TempPathFactory, stream: bool
) -> None:
    """The fast tier's first request is slow to a token; the standard tier's first token
    goes out, the fast tier continues it (an SGLang-style continuation), the standard
    tier's stream is closed. The openai SDK sees one ordinary answer."""
    rules = rules_for_tests(ttft=8.0, total=10.0, stall=2.0)
    rules["default"]["hedge_after"] = 0.2
    rules["tiers"]["highspeed"]["continuation"] = "continue_final_message"
    proc, url = start_gateway(tmp_path_factory.mktemp("gw"), rules, engines)
    text = "Tea is a fine drink for the cold days of the year"
    prompt = f"q [[*: text={text}; per=1; gap=0.05]] [[highspeed: fresh_delay=9]]"
    try:
        reset(engines)
        c = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=20)
        t0 = time.monotonic()
        if stream:
            with c.chat.completions.with_streaming_response.create(
                model="auto", messages=[{"role": "user", "content": prompt}], stream=True
            ) as r:
                headers, chunks = r.headers, list(r.parse())
            got = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
            assert len({ch.id for ch in chunks}) == 1
        else:
            headers, resp = chat(c, prompt)
            got = resp.choices[0].message.content
            assert headers["x-gateway-tier"] == "highspeed"
            assert headers["x-gateway-continued"] == "standard:4"
        # waiting for the fast tier's first request would take its 8 s TTFT timeout; the
        # answer itself needs ~0.7 s (0.2 s, then 12 words 0.05 s apart): 4 s separates the
        # two with room for a busy machine
        assert time.monotonic() - t0 < 4.0
        assert got == text and headers["x-gateway-hedge"].startswith("standard after 0.2s")
        fast = engine_requests(engines["highspeed"])
        assert len(fast) == 2 and fast[1]["continue_final_message"] is True
        assert fast[1]["messages"][-1] == {"role": "assistant", "content": "Tea "}
        # its generation was stopped
        wait_until(lambda: _cancelled(engines["standard"]), "the standard tier's stream cut")
    finally:
        proc.stop()


def _cancelled(base: str) -> int:
    with urllib.request.urlopen(f"{base}/_cancelled", timeout=5) as r:
        return int(json.loads(r.read())["cancelled"])
