"""The response cache end to end: real gateway processes on real sockets, the real openai
client, fake engines that count what reaches them, the real Redis for two replicas.

Every test asks its own question (a fresh marker in the prompt), so the tests share
gateways without sharing entries.
"""

from __future__ import annotations

import json
import threading
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolUnionParam

from tests.conftest import Proc, rules_for_tests, start_engine, start_gateway
from tests.test_tenancy import ADMIN, call, new_tenant, tenancy_env
from tests.waiting import until

pytestmark = pytest.mark.processes


def cached_rules() -> dict[str, Any]:
    rules = rules_for_tests()
    rules["default"]["cache"] = {"ttl": 600}
    for r in rules["rules"]:
        if r["name"] == "agent-step":
            r["cache"] = {"ttl": 600}
    return rules


@pytest.fixture(scope="module")
def counted() -> Iterator[dict[str, str]]:
    """Engines of this module's own: what reaches them is counted per test."""
    hs, hs_url = start_engine("highspeed", "--model", "fake-highspeed")
    st, st_url = start_engine("standard", "--model", "fake-standard")
    yield {"highspeed": hs_url, "standard": st_url}
    hs.stop()
    st.stop()


@pytest.fixture(scope="module")
def open_gw(counted: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    proc, url = start_gateway(tmp_path_factory.mktemp("cache"), cached_rules(), counted)
    yield url
    proc.stop()


@pytest.fixture(scope="module")
def tenant_gw(counted: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    """Tenants in process (an admin token, no Redis): the embedded default's cache."""
    env = {"GATEWAY_ADMIN_TOKEN": ADMIN}
    proc, _ = start_gateway(tmp_path_factory.mktemp("cache-t"), cached_rules(), counted, env)
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def replicas(
    counted: dict[str, str], prefix: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[Proc]]:
    tmp = tmp_path_factory.mktemp("cache-r")
    procs = [start_gateway(tmp, cached_rules(), counted, tenancy_env(prefix))[0] for _ in "ab"]
    yield procs
    for p in procs:
        p.stop()


def base(p: Proc) -> str:
    return p.url.removesuffix("/healthz")


def client(url: str, key: str = "unused") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=20)


def reached(engine: str, marker: str) -> int:
    """How many requests with ``marker`` in their prompt reached ``engine``."""
    with urllib.request.urlopen(f"{engine}/_requests", timeout=5) as r:
        bodies = json.loads(r.read())
    return sum(marker in json.dumps(b) for b in bodies)


def ask(
    c: openai.OpenAI,
    content: str,
    stream: bool = False,
    messages_prefix: ChatCompletionMessageParam | None = None,
    **kw: Any,
) -> tuple[dict[str, str], str, Any]:
    """(headers, answer text, usage or None) of one chat request, streamed or not."""
    kw.setdefault("temperature", 0)
    msgs: list[ChatCompletionMessageParam] = [
        *([messages_prefix] if messages_prefix else []),
        {"role": "user", "content": content},
    ]
    if not stream:
        raw = c.chat.completions.with_raw_response.create(model="auto", messages=msgs, **kw)
        done = raw.parse()
        return dict(raw.headers), done.choices[0].message.content or "", done.usage
    with c.chat.completions.with_streaming_response.create(
        model="auto", messages=msgs, stream=True, **kw
    ) as resp:
        headers = dict(resp.headers)
        text, usage = "", None
        for chunk in resp.parse():
            if chunk.choices and chunk.choices[0].delta.content:
                text += chunk.choices[0].delta.content
            usage = chunk.usage or usage
    return headers, text, usage


def marker() -> str:
    return uuid.uuid4().hex[:10]


# -- the same request twice ----------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_the_same_deterministic_request_twice_is_answered_from_the_cache(
    open_gw: str, counted: dict[str, str], stream: bool
) -> None:
    m = marker()
    c = client(open_gw)
    h1, first, _ = ask(c, f"tell me about {m}", stream)
    h2, second, _ = ask(c, f"tell me about {m}", stream)
    assert h1["x-gateway-cache"] == "miss" and "age" not in h1
    assert h2["x-gateway-cache"] == "hit"
    assert h2["x-gateway-cache-match"] in ("exact", "coalesced")  # stored, or being stored
    assert int(h2["age"]) >= 0 and h2["x-gateway-tier"] == "highspeed"
    assert second == first == f"Echo (highspeed): tell me about {m}"
    assert reached(counted["highspeed"], m) == 1


def test_a_streamed_answer_is_kept_and_replayed_as_json_and_as_sse(
    open_gw: str, counted: dict[str, str]
) -> None:
    m = marker()
    c = client(open_gw)
    h1, first, u1 = ask(c, m, stream=True, stream_options={"include_usage": True})
    assert h1["x-gateway-cache"] == "miss" and u1 is not None
    assert ask(c, m)[0]["x-gateway-cache"] == "hit"  # kept after its [DONE]
    h3, third, u3 = ask(c, m, stream=True, stream_options={"include_usage": True})
    assert h3["x-gateway-cache"] == "hit" and third == first
    assert u3 is not None and u3.completion_tokens == u1.completion_tokens
    h4, _, u4 = ask(c, m, stream=True)  # no usage chunk unless asked
    assert h4["x-gateway-cache"] == "hit" and u4 is None
    assert reached(counted["highspeed"], m) == 1


def test_a_tool_call_is_replayed_with_its_call(open_gw: str) -> None:
    m = marker()
    tools: list[ChatCompletionToolUnionParam] = [
        {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}
    ]
    c = client(open_gw)
    content = f"[[*: tool=lookup; args={{}}]] find {m}"
    msgs: list[ChatCompletionMessageParam] = [{"role": "user", "content": content}]
    for want in ("miss", "hit"):
        raw = c.chat.completions.with_raw_response.create(
            model="auto", messages=msgs, tools=tools, temperature=0
        )
        assert raw.headers["x-gateway-cache"] == want
        tool_calls = raw.parse().choices[0].message.tool_calls
        assert tool_calls is not None
        call_ = tool_calls[0]
        assert call_.type == "function"
        assert (
            call_.function.name == "lookup" and raw.parse().choices[0].finish_reason == "tool_calls"
        )
    stream = c.chat.completions.create(
        model="auto", messages=msgs, tools=tools, temperature=0, stream=True
    )
    names = []
    for ch in stream:
        for tc in (ch.choices[0].delta.tool_calls or ()) if ch.choices else ():
            assert tc.function is not None
            names.append(tc.function.name)
    assert names == ["lookup"]


def test_text_completions_and_the_responses_api_are_cached_too(open_gw: str) -> None:
    m = marker()
    c = client(open_gw)
    for want in ("miss", "hit"):
        raw = c.completions.with_raw_response.create(model="auto", prompt=m, temperature=0)
        assert raw.headers["x-gateway-cache"] == want
        assert raw.parse().choices[0].text == f"Echo (highspeed): {m}"
    for want in ("miss", "hit"):
        r = c.responses.with_raw_response.create(model="auto", input=f"r {m}", temperature=0)
        assert r.headers["x-gateway-cache"] == want
        assert r.parse().output_text == f"Echo (highspeed): r {m}"


# -- what is never kept ----------------------------------------------------------------------


def test_a_fallbacks_answer_is_kept_under_the_request(
    open_gw: str, counted: dict[str, str]
) -> None:
    m = marker()
    c = client(open_gw)
    h1, first, _ = ask(c, f"[[highspeed: loop]] {m}")
    assert (
        h1["x-gateway-tier"] == "standard"
        and "highspeed:check_repetition" in h1["x-gateway-fallback"]
    )
    h2, second, _ = ask(c, f"[[highspeed: loop]] {m}")
    assert h2["x-gateway-cache"] == "hit" and h2["x-gateway-tier"] == "standard"
    assert second == first == f"Echo (standard): {m}"
    assert (reached(counted["highspeed"], m), reached(counted["standard"], m)) == (1, 1)


@pytest.mark.parametrize(
    ("directive", "stream", "kw"),
    [
        ("[[*: loop]]", False, {}),  # both tiers loop: delivered with checks failed
        ("[[*: length]]", True, {}),  # a stream cut at the token limit: not_truncated fails
        ("[[*: length]]", False, {"max_tokens": 50}),  # passes its checks, but incomplete
    ],
    ids=["failed-check", "failed-check-stream", "incomplete"],
)
def test_an_answer_that_failed_a_check_or_is_incomplete_is_never_served(
    open_gw: str, counted: dict[str, str], directive: str, stream: bool, kw: dict[str, Any]
) -> None:
    m = marker()
    c = client(open_gw)
    for _ in range(2):
        h, _, _ = ask(c, f"{directive} {m}", stream, **kw)
        assert h["x-gateway-cache"] == "miss"
    assert reached(counted["highspeed"], m) == 2


# -- what the client and the rule say ------------------------------------------------------------


def test_no_cache_bypasses_and_no_store_keeps_nothing(
    open_gw: str, counted: dict[str, str]
) -> None:
    m, c = marker(), client(open_gw)
    ask(c, m)
    assert ask(c, m)[0]["x-gateway-cache"] == "hit"
    for cc in ("no-cache", "max-age=0"):
        h, _, _ = ask(c, m, extra_headers={"Cache-Control": cc})
        assert h["x-gateway-cache"] == "bypass"
    assert reached(counted["highspeed"], m) == 3
    n = marker()
    assert ask(c, n, extra_headers={"Cache-Control": "no-store"})[0]["x-gateway-cache"] == "bypass"
    assert ask(c, n)[0]["x-gateway-cache"] == "miss"  # nothing was kept


def test_a_sampled_request_is_not_cached_unless_the_rule_says(
    open_gw: str, counted: dict[str, str]
) -> None:
    m, c = marker(), client(open_gw)
    for _ in range(2):
        assert ask(c, m, temperature=0.8)[0]["x-gateway-cache"] == "bypass"
    assert (
        ask(c, m, temperature=0.8, seed=3)[0]["x-gateway-cache"] == "miss"
    )  # a seed is one answer
    assert ask(c, m, temperature=0.8, seed=3)[0]["x-gateway-cache"] == "hit"
    assert reached(counted["highspeed"], m) == 3


# -- a burst ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_a_burst_of_identical_requests_reaches_the_engine_once(
    open_gw: str, counted: dict[str, str], stream: bool
) -> None:
    m = marker()
    content = f"[[*: delay=0.4]] burst {m}"
    results: list[tuple[dict[str, str], str, Any]] = []
    lock = threading.Lock()
    start = threading.Barrier(8)

    def one() -> None:
        c = client(open_gw)
        start.wait()
        r = ask(c, content, stream)
        with lock:
            results.append(r)

    threads = [threading.Thread(target=one) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(results) == 8
    assert {text for _, text, _ in results} == {f"Echo (highspeed): burst {m}"}
    states = sorted(h["x-gateway-cache"] for h, _, _ in results)
    assert states == ["hit"] * 7 + ["miss"]
    assert {h["x-gateway-cache-match"] for h, _, _ in results if "age" in h} <= {
        "coalesced",
        "exact",
    }
    assert reached(counted["highspeed"], m) == 1


# -- tenants -----------------------------------------------------------------------------------


def test_another_tenant_never_hits(tenant_gw: Proc, counted: dict[str, str]) -> None:
    m = marker()
    _, _, key_a = new_tenant(tenant_gw.admin)
    _, _, key_b = new_tenant(tenant_gw.admin)
    a, b = client(base(tenant_gw), key_a), client(base(tenant_gw), key_b)
    assert ask(a, m)[0]["x-gateway-cache"] == "miss"
    assert ask(a, m)[0]["x-gateway-cache"] == "hit"
    assert ask(b, m)[0]["x-gateway-cache"] == "miss"
    assert ask(b, m)[0]["x-gateway-cache"] == "hit"
    assert reached(counted["highspeed"], m) == 2


def test_a_forced_tier_is_another_cache(tenant_gw: Proc, counted: dict[str, str]) -> None:
    m = marker()
    _, _, key = new_tenant(tenant_gw.admin)
    _, _, forced = new_tenant(tenant_gw.admin, {"forced_tier": "standard"})
    ask(client(base(tenant_gw), key), m)
    h, text, _ = ask(client(base(tenant_gw), forced), m)
    assert h["x-gateway-cache"] == "miss" and text == f"Echo (standard): {m}"


def test_a_hit_is_charged_zero_engine_tokens_even_past_the_budget(tenant_gw: Proc) -> None:
    m = marker()
    tid, _, key = new_tenant(tenant_gw.admin, {"token_budget": {"tokens": 1}})
    c = client(base(tenant_gw), key)
    h1, _, usage = ask(c, m)  # admitted (nothing spent yet), spends the budget
    spent = usage.total_tokens
    assert until(lambda: _usage(tenant_gw, tid)["completion_tokens"] > 0)
    h2, _, _ = ask(c, m)  # a hit spends no engine tokens: served
    assert (h1["x-gateway-cache"], h2["x-gateway-cache"]) == ("miss", "hit")
    with pytest.raises(openai.RateLimitError):
        ask(c, marker())  # a new question needs the engine: over budget
    assert until(lambda: _usage(tenant_gw, tid).get("cache_hits") == 1)
    u = _usage(tenant_gw, tid)
    assert u["cache_saved_tokens"] == spent and u["tokens_by_tier"]["cache"] == 0
    assert u["prompt_tokens"] + u["completion_tokens"] == spent


def _usage(p: Proc, tid: str) -> dict[str, Any]:
    st, body, _ = call(p.admin, "GET", f"/admin/tenants/{tid}/usage")
    assert st == 200, body
    out: dict[str, Any] = body
    return out


def test_the_admin_api_inspects_and_purges_a_tenants_cache(tenant_gw: Proc) -> None:
    m = marker()
    tid, _, key = new_tenant(tenant_gw.admin)
    c = client(base(tenant_gw), key)
    ask(c, f"one {m}")
    ask(c, f"two {m}")
    path = f"/admin/tenants/{tid}/cache"
    assert until(lambda: call(tenant_gw.admin, "GET", path)[1]["entries"] == 2)
    st, body, _ = call(tenant_gw.admin, "GET", path + "?limit=1")
    assert st == 200 and body["store"] == "memory" and body["bytes"] > 0 and len(body["data"]) == 1
    entry = body["data"][0]
    assert entry["tier"] == "highspeed" and m not in json.dumps(body)  # no answer text
    assert call(tenant_gw.admin, "DELETE", f"{path}/{entry['key']}")[0] == 204
    assert call(tenant_gw.admin, "DELETE", f"{path}/{entry['key']}")[0] == 404
    st, body, _ = call(tenant_gw.admin, "DELETE", path)
    assert st == 200 and body["purged"] == 1
    assert ask(c, f"one {m}")[0]["x-gateway-cache"] == "miss"
    assert call(tenant_gw.admin, "GET", "/admin/tenants/ten_nobody/cache")[0] == 404


def test_metrics_count_hits_misses_stores_and_bytes(open_gw: str) -> None:
    m, c = marker(), client(open_gw)
    ask(c, m)
    ask(c, m)

    def text() -> str:
        with urllib.request.urlopen(f"{open_gw}/metrics", timeout=5) as r:
            return str(r.read().decode())

    assert until(lambda: "gateway_cache_hits_total" in text())
    t = text()
    for name in ("cache_misses_total", "cache_stores_total", "cache_bytes", "cache_saved_tokens"):
        assert f"gateway_{name}" in t
    assert 'tier="cache"' in t  # a hit's request, counted under the cache, not an engine


# -- Redis: two replicas, one cache --------------------------------------------------------------


def test_two_replicas_share_one_cache_through_redis(
    replicas: list[Proc], counted: dict[str, str]
) -> None:
    m = marker()
    tid, _, key = new_tenant(replicas[0].admin)
    a, b = (client(base(p), key) for p in replicas)
    h1, first, _ = ask(a, m)
    assert h1["x-gateway-cache"] == "miss"
    path = f"/admin/tenants/{tid}/cache"
    assert until(lambda: call(replicas[1].admin, "GET", path)[1]["entries"] == 1)
    st, body, _ = call(replicas[1].admin, "GET", path)
    assert st == 200 and body["store"] == "redis" and body["data"][0]["tier"] == "highspeed"
    h2, second, _ = ask(b, m, stream=True)
    assert h2["x-gateway-cache"] == "hit" and second == first
    assert ask(b, m, extra_headers={"Cache-Control": "max-age=600"})[0]["x-gateway-cache"] == "hit"
    _, _, other = new_tenant(replicas[1].admin)
    assert ask(client(base(replicas[1]), other), m)[0]["x-gateway-cache"] == "miss"
    assert call(replicas[1].admin, "DELETE", f"/admin/tenants/{tid}/cache")[1]["purged"] == 1
    assert ask(a, m)[0]["x-gateway-cache"] == "miss"  # purged for every replica
    assert reached(counted["highspeed"], m) == 3
