"""A hosted tier through real LiteLLM, against a fake Anthropic Messages API on loopback.

The gateway runs as its own process with three tiers: ``highspeed`` (the fake
OpenAI-compatible engine), ``hosted`` (``provider: litellm``, ``anthropic/claude-haiku-4-5``
at the fake's address, the key from the environment) and ``standard`` (the fake engine
again); ``hosted2`` is a model LiteLLM does not know to take an assistant prefill. No
network: LiteLLM reads the price map it ships.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
import yaml

from gateway.dispatch.fallback import reason, verdict
from gateway.rules.schema import RulesError, parse_rules
from gateway.upstream.failures import (
    AnswerTimeout,
    AttemptFailed,
    ClientRejected,
    ServerError,
    TierRefused,
    UpstreamRateLimited,
)
from tests.conftest import ROOT, Proc, free_port, rules_for_tests
from tests.test_streams import ANSWER, content, sse

pytestmark = [pytest.mark.processes, pytest.mark.slow]

KEY = "sk-ant-test-4f1c"
MODEL = "anthropic/claude-haiku-4-5"  # in LiteLLM's map: $1 / $5 per 1M tokens, prefill


def start_fake_anthropic() -> tuple[Proc, str]:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    argv = [sys.executable, "-m", "evals.bench.fake_anthropic", "--port", str(port)]
    return Proc(argv, f"{base}/health"), base


def hosted_rules(anthropic: str) -> dict[str, Any]:
    rules = rules_for_tests()
    slow = {"connect": 2.0, "ttft": 10.0, "total": 20.0, "stall": 5.0}
    circuit = {"failures": 1000, "cooldown": 1.0}
    params = {"model": MODEL, "api_base": anthropic, "api_key": "os.environ/TEST_ANTHROPIC_KEY"}
    rules["tiers"]["hosted"] = {
        "provider": "litellm",
        "litellm_params": params,
        "timeouts": slow,
        "circuit": circuit,
    }
    params2 = {**params, "model": "anthropic/claude-haiku-5-5"}
    rules["tiers"]["hosted2"] = {
        "provider": "litellm",
        "litellm_params": params2,
        "timeouts": slow,
        "circuit": circuit,
    }
    rules["aliases"]["hosted"] = "hosted"
    rules["default"]["fallback"] = ["hosted", "standard"]
    rules["rules"].insert(
        0,
        {
            "name": "hedge",
            "when": {"headers": {"x-test": "hedge"}},
            "tier": "highspeed",
            "fallback": ["hosted"],
            "checks": ["non_empty"],
            "hedge_after": 0.2,
        },
    )
    rules["rules"].insert(
        0,
        {
            "name": "no-prefill",
            "when": {"headers": {"x-test": "noprefill"}},
            "tier": "highspeed",
            "fallback": ["hosted2"],
            "checks": ["non_empty", "template_leak"],
        },
    )
    return rules


@pytest.fixture(scope="module")
def hosted(engines: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    fake, anthropic = start_fake_anthropic()
    path = tmp_path_factory.mktemp("hosted") / "rules.yaml"
    path.write_text(yaml.safe_dump(hosted_rules(anthropic)))
    port = free_port()
    env = {f"GATEWAY_POOL_{k.upper()}_URLS": v for k, v in engines.items()}
    env["TEST_ANTHROPIC_KEY"] = KEY
    argv = [sys.executable, "-m", "gateway.cli", "serve", "--rules", str(path), "--port", str(port)]
    gw = Proc(argv, f"http://127.0.0.1:{port}/healthz", env=env, timeout=90)
    try:
        yield type("Hosted", (), {"url": f"http://127.0.0.1:{port}", "anthropic": anthropic})
    finally:
        gw.stop()
        fake.stop()


def received(anthropic: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"{anthropic}/_requests", timeout=5) as r:
        out: list[dict[str, Any]] = json.loads(r.read())
    return out


def reset_fake(anthropic: str) -> None:
    req = urllib.request.Request(f"{anthropic}/_reset", data=b"", method="POST")
    urllib.request.urlopen(req, timeout=5).close()


def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=30)


def test_fallback_to_hosted_tier(hosted: Any) -> None:
    reset_fake(hosted.anthropic)
    with client(hosted.url) as c:
        r = c.chat.completions.with_raw_response.create(
            model="auto",
            messages=[{"role": "user", "content": "hello [[highspeed: status=500]]"}],
            max_tokens=40,
        )
    answer = r.parse()
    assert r.headers["x-gateway-tier"] == "hosted"
    assert r.headers["x-gateway-fallback"].endswith("highspeed:http_500 -> hosted")
    assert answer.choices[0].message.content == "Hosted echo: hello [[highspeed: status=500]]"
    assert answer.choices[0].finish_reason == "stop"
    got = received(hosted.anthropic)
    assert len(got) == 1 and got[0]["x-api-key"] == KEY  # from the environment
    assert got[0]["body"]["model"] == "claude-haiku-4-5" and got[0]["body"]["stream"] is True
    u = answer.usage
    assert u is not None and u.prompt_tokens > 0 and u.completion_tokens > 0
    cost = float(r.headers["x-gateway-cost-usd"])  # LiteLLM's price map: $1 in, $5 out
    assert cost == pytest.approx(u.prompt_tokens * 1e-6 + u.completion_tokens * 5e-6)


def test_fallback_to_hosted_tier_streamed(hosted: Any) -> None:
    reset_fake(hosted.anthropic)
    headers, events, comments = sse(
        hosted.url,
        "stream me [[highspeed: status=503]]",
        stream_options={"include_usage": True},
    )
    assert headers["x-gateway-tier"] == "hosted"
    assert headers["x-gateway-fallback"].endswith("highspeed:http_503 -> hosted")
    assert content(events) == "Hosted echo: stream me [[highspeed: status=503]]"
    assert events[-1] == "[DONE]"
    assert [c["choices"][0]["finish_reason"] for c in events[:-2]][-1] == "stop"
    usage = events[-2]["usage"]
    assert usage["completion_tokens"] > 0
    cost = [c for c in comments if c.startswith(": x-gateway-cost-usd ")]
    assert len(cost) == 1
    want = usage["prompt_tokens"] * 1e-6 + usage["completion_tokens"] * 5e-6
    assert float(cost[0].split()[-1]) == pytest.approx(want)
    assert received(hosted.anthropic)[0]["x-api-key"] == KEY


def test_openai_sdk_streams_from_hosted_tier(hosted: Any) -> None:
    with client(hosted.url) as c:
        stream = c.chat.completions.create(
            model="hosted",
            messages=[{"role": "user", "content": "[[hosted: text=alpha beta gamma]]"}],
            stream=True,
        )
        text = "".join(ch.choices[0].delta.content or "" for ch in stream if ch.choices)
    assert text == "alpha beta gamma"


def test_hosted_client_error_is_relayed(hosted: Any) -> None:
    with client(hosted.url) as c, pytest.raises(openai.BadRequestError) as e:
        c.chat.completions.create(
            model="hosted", messages=[{"role": "user", "content": "[[hosted: status=400]]"}]
        )
    assert e.value.status_code == 400
    body = e.value.body
    assert isinstance(body, dict) and body["type"] == "invalid_request_error"
    assert "fake error 400" in body["message"]


@pytest.mark.parametrize("status", [429, 500, 529])
def test_hosted_failure_moves_on_to_the_next_tier(hosted: Any, status: int) -> None:
    with client(hosted.url) as c:
        r = c.chat.completions.with_raw_response.create(
            model="hosted",
            messages=[{"role": "user", "content": f"hi [[hosted: status={status}]]"}],
        )
    assert r.headers["x-gateway-tier"] == "standard"
    assert r.headers["x-gateway-fallback"].startswith("hosted:http_")
    content = r.parse().choices[0].message.content
    assert content is not None and content.startswith("Echo (standard)")


def test_broken_stream_is_continued_on_hosted_tier_by_prefill(hosted: Any) -> None:
    reset_fake(hosted.anthropic)
    headers, events, comments = sse(
        hosted.url, f"q [[*: text={ANSWER}; per=1]] [[highspeed: error_after=25; gap=0.01]]"
    )
    assert headers["x-gateway-tier"] == "highspeed"
    assert content(events) == ANSWER  # spliced without a gap or a repeat
    assert comments[-1].endswith("-> hosted")
    body = received(hosted.anthropic)[-1]["body"]
    assert body["messages"][-1]["role"] == "assistant"  # the prefill


def test_no_prefill_model_restarts_and_the_client_gets_its_whole_answer(hosted: Any) -> None:
    """A hosted model that takes no prefill is never asked to continue: a stream broken
    after its first bytes restarts there, and the client gets only what it had not seen
    (the hosted answer begins with the text sent): the whole answer, no error event."""
    reset_fake(hosted.anthropic)
    headers, events, comments = sse(
        hosted.url,
        f"q [[*: text={ANSWER}; per=1]] [[highspeed: error_after=25; gap=0.01]]",
        extra_headers={"x-test": "noprefill"},
    )
    assert headers["x-gateway-finish"] == "restart hosted2"  # known before the first byte
    assert content(events) == ANSWER
    assert not [e for e in events if isinstance(e, dict) and "error" in e]
    assert ": x-gateway-finish restart hosted2" in comments
    assert ": x-gateway-fallback highspeed:stream_error -> hosted2" in comments
    (got,) = received(hosted.anthropic)  # one request: the restart, never a prefill
    assert got["body"]["messages"][-1]["role"] == "user"


def _open(anthropic: str, path: str, body: dict[str, Any], stream: bool, total: float = 20) -> Any:
    """The transport in this process (LiteLLM imported here): all the answer, or the error."""
    from gateway.upstream.litellm_transport import LiteLLMTransport, load_litellm
    from gateway.upstream.transport import Timeouts

    params = {"model": MODEL, "api_base": anthropic, "api_key": "k"}

    async def go() -> Any:
        t = LiteLLMTransport(params)
        try:
            s = await t.open(
                "litellm:" + MODEL + path, json.dumps(body).encode(), Timeouts(total, 2, 5), stream
            )
            out = []
            while chunk := await s.read():
                out.append(chunk)
            return b"".join(out)
        except AttemptFailed as e:
            return e
        finally:  # LiteLLM keeps its HTTP clients across calls: this loop's end is theirs
            await load_litellm().close_litellm_async_clients()

    return asyncio.run(go())


def test_transport_answers_json_and_text_completions(hosted: Any) -> None:
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 20}
    answer = json.loads(_open(hosted.anthropic, "/v1/chat/completions", chat, stream=False))
    assert answer["object"] == "chat.completion"
    assert answer["choices"][0] == {
        "index": 0,
        "message": {"role": "assistant", "content": "Hosted echo: hi"},
        "finish_reason": "stop",
    }
    assert set(answer["usage"]) == {"prompt_tokens", "completion_tokens", "total_tokens"}
    text = {"prompt": "Say hi", "max_tokens": 20}
    answer = json.loads(_open(hosted.anthropic, "/v1/completions", text, stream=False))
    assert answer["choices"][0]["text"] == "Hosted echo: Say hi"
    events = _open(hosted.anthropic, "/v1/completions", text, stream=True).decode()
    assert events.endswith("data: [DONE]\n\n")
    parts = [json.loads(e[6:]) for e in events.split("\n\n") if e.startswith("data: {")]
    assert "".join(p["choices"][0]["text"] for p in parts if p["choices"]) == "Hosted echo: Say hi"


@pytest.mark.parametrize(
    ("directive", "kind", "why", "next_tier", "same_tier", "timeout"),
    [
        ("status=429", UpstreamRateLimited, "http_429", True, True, False),
        ("status=500", ServerError, "http_500", True, True, False),
        ("status=529", ServerError, "http_500", True, True, False),  # LiteLLM: overloaded: 500
        ("status=401", TierRefused, "http_401", True, False, False),  # the tier's key
        ("status=400", ClientRejected, "http_400", False, False, False),  # relayed
        ("delay=3", AnswerTimeout, "timeout", True, False, True),
    ],
)
def test_exceptions_become_the_same_fallback_triggers(
    hosted: Any,
    directive: str,
    kind: type[AttemptFailed],
    why: str,
    next_tier: bool,
    same_tier: bool,
    timeout: bool,
) -> None:
    chat = {"messages": [{"role": "user", "content": f"[[hosted: {directive}]]"}]}
    err = _open(hosted.anthropic, "/v1/chat/completions", chat, stream=True, total=1.0)
    v = verdict(err)
    assert type(err) is kind
    assert (reason(err), v.next_tier, v.same_tier, v.timeout) == (
        why,
        next_tier,
        same_tier,
        timeout,
    )
    if isinstance(err, ClientRejected):
        assert json.loads(err.body)["error"]["type"] == "invalid_request_error"


def test_unreachable_provider_is_a_retryable_failure() -> None:
    chat = {"messages": [{"role": "user", "content": "hi"}]}
    err = _open(f"http://127.0.0.1:{free_port()}", "/v1/chat/completions", chat, stream=True)
    assert verdict(err).next_tier and reason(err) in ("upstream", "http_500")  # a 500, mostly


def test_hosted_tier_wins_a_hedge(hosted: Any) -> None:
    body = {"model": "auto", "messages": [{"role": "user", "content": "[[highspeed: delay=3]]"}]}
    st, answer, headers = post(hosted.url, body, {"x-test": "hedge"})
    assert st == 200 and headers["x-gateway-tier"] == "hosted"
    assert headers["x-gateway-hedge"] == "hosted after 0.2s; hosted won"
    assert answer["choices"][0]["message"]["content"].startswith("Hosted echo")


def test_hosted_answer_that_fails_a_check_falls_back(hosted: Any) -> None:
    leak = "[[hosted: text=Here you go.<|im_end|><|im_start|>user]]"
    body = {"model": "hosted", "messages": [{"role": "user", "content": leak}]}
    st, answer, headers = post(hosted.url, body)
    assert st == 200 and headers["x-gateway-tier"] == "standard"
    assert headers["x-gateway-fallback"] == "hosted:check_template_leak -> standard"
    assert "<|im_end|>" not in answer["choices"][0]["message"]["content"]


def test_hosted_stream_broken_midway_is_continued_on_the_next_tier(hosted: Any) -> None:
    headers, events, comments = sse(
        hosted.url, f"q [[*: text={ANSWER}; per=1]] [[hosted: error_after=10]]", model="hosted"
    )
    assert headers["x-gateway-tier"] == "hosted"
    assert content(events) == ANSWER
    assert comments[-1] == ": x-gateway-fallback hosted:stream_cut -> standard"


def post(
    url: str, body: dict[str, Any], headers: dict[str, str] | None = None
) -> tuple[int, Any, dict[str, str]]:
    req = urllib.request.Request(
        f"{url}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.status, json.loads(r.read()), {k.lower(): v for k, v in r.headers.items()}


def test_hosted_tier_rules_defaults_and_errors() -> None:
    base = rules_for_tests()
    base["tiers"]["h"] = {"provider": "litellm", "litellm_params": {"model": MODEL}}
    tier = parse_rules(yaml.safe_dump(base)).tiers["h"]
    assert tier.model == MODEL and tier.continuation == "prefill" and not tier.health.enabled
    for bad, says in (
        ({"provider": "litellm"}, "litellm_params with a model"),
        ({"model": "m", "endpoints": ["http://x"], "litellm_params": {"model": "m"}}, "needs"),
        (
            {
                "provider": "litellm",
                "litellm_params": {"model": "m"},
                "continuation": "continue_final_message",
            },
            "prefill",
        ),
    ):
        base["tiers"]["h"] = bad
        with pytest.raises(RulesError) as e:
            parse_rules(yaml.safe_dump(base))
        assert says in str(e.value)


def test_litellm_is_imported_only_when_a_tier_uses_it(tmp_path: Path) -> None:
    code = (
        "import sys, asyncio\n"
        "from gateway.rules.schema import load_rules\n"
        "from gateway.upstream.pools import Pools\n"
        "from gateway.server import app, completions\n"
        f"rules = load_rules(__import__('pathlib').Path({str(ROOT / 'routing_rules.yaml')!r}))\n"
        "async def main():\n"
        "    p = Pools(dict(rules.tiers)); await p.close()\n"
        "asyncio.run(main())\n"
        "print('litellm' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.stdout.strip() == "False", out.stderr


def test_unset_key_variable_falls_back(engines: dict[str, str], tmp_path: Path) -> None:
    """A key variable that is not set fails the hosted tier (logged), not the request."""
    rules = hosted_rules("http://127.0.0.1:9")
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(rules))
    port = free_port()
    env = {f"GATEWAY_POOL_{k.upper()}_URLS": v for k, v in engines.items()}
    argv = [sys.executable, "-m", "gateway.cli", "serve", "--rules", str(path), "--port", str(port)]
    gw = Proc(argv, f"http://127.0.0.1:{port}/healthz", env=env, timeout=90)
    try:
        with client(f"http://127.0.0.1:{port}") as c:
            r = c.chat.completions.with_raw_response.create(
                model="hosted", messages=[{"role": "user", "content": "hi"}]
            )
        assert r.headers["x-gateway-fallback"] == "hosted:config -> standard"
    except urllib.error.URLError:  # pragma: no cover
        raise
    finally:
        gw.stop()
