"""End to end through the real local engine: llama.cpp's server running SmolLM2-135M.

Real generation, greedy decoding: the prompts below are ones this model answers well,
and ones it loops on (engines/LOCAL.md), so the repetition check and the fallback are
exercised by a real model, not a script. Skipped, with the install command, where the
local engine is not installed (``make install-local``).
"""

from __future__ import annotations

import json
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from engines.launcher import installed
from tests.conftest import Proc, free_port

ROOT = Path(__file__).resolve().parent.parent
SANE = "What is 2+2?"
LOOPS = "Write a poem about the ocean."
METRICS_TOKEN = "metrics-token-0123456789"
OPERATOR = {"Authorization": f"Bearer {METRICS_TOKEN}"}  # /readyz's detail

pytestmark = [
    pytest.mark.local_engine,
    pytest.mark.processes,
    pytest.mark.skipif(
        installed() is not None, reason=f"local engine not installed: {installed()}"
    ),
]


@pytest.fixture(scope="module")
def local_engines() -> Iterator[dict[str, str]]:
    """Both tiers' llama.cpp servers: tier -> base URL."""
    from engines.local import start_local_engine, stop_local_engine, wait_ready

    ports = {"highspeed": free_port(), "standard": free_port()}
    engines = {t: start_local_engine(t, p) for t, p in ports.items()}
    try:
        for t, p in ports.items():
            wait_ready(f"http://127.0.0.1:{p}", timeout=60, proc=engines[t])
        yield {t: f"http://127.0.0.1:{p}" for t, p in ports.items()}
    finally:
        for proc in engines.values():
            stop_local_engine(proc)


@pytest.fixture(scope="module")
def local_gateway(local_engines: dict[str, str]) -> Iterator[str]:
    env = {f"GATEWAY_POOL_{t.upper()}_URLS": url for t, url in local_engines.items()}
    env["GATEWAY_METRICS_TOKEN"] = METRICS_TOKEN  # /readyz's detail
    port = free_port()
    # the repository's own rules: what `gateway serve` runs by default
    gw = Proc(
        [
            sys.executable,
            "-m",
            "gateway.cli",
            "serve",
            "--rules",
            str(ROOT / "routing_rules.yaml"),
            "--port",
            str(port),
        ],
        f"http://127.0.0.1:{port}/healthz",
        env=env,
    )
    yield f"http://127.0.0.1:{port}"
    gw.stop()


@pytest.fixture()
def client(local_gateway: str) -> Iterator[Any]:
    c = openai.OpenAI(base_url=f"{local_gateway}/v1", api_key="unused", max_retries=0, timeout=120)
    yield c
    c.close()


def ask(client: Any, prompt: str, max_tokens: int = 256, **kw: Any) -> tuple[Any, Any]:
    raw = client.chat.completions.with_raw_response.create(
        model="auto",
        temperature=0,
        max_tokens=max_tokens,
        messages=[{"role": "user", "content": prompt}],
        **kw,
    )
    return raw.headers, raw.parse()


def test_real_answer_from_the_fast_tier(client: Any) -> None:
    headers, resp = ask(client, SANE)
    assert "4" in resp.choices[0].message.content
    assert resp.choices[0].finish_reason == "stop"
    assert headers["x-gateway-tier"] == "highspeed"
    assert "x-gateway-fallback" not in headers
    assert resp.usage.completion_tokens > 0


def test_real_loop_fails_the_repetition_check_and_standard_answers(client: Any) -> None:
    headers, resp = ask(client, LOOPS)
    assert headers["x-gateway-fallback"].startswith("highspeed:check_repetition")
    assert headers["x-gateway-tier"] == "standard"
    text = resp.choices[0].message.content
    assert resp.choices[0].finish_reason == "stop" and len(text) > 40
    assert "A place of endless mystery,\nA place of endless mystery" not in text


def test_real_stream_with_usage(client: Any) -> None:
    with client.chat.completions.with_streaming_response.create(
        model="auto",
        temperature=0,
        max_tokens=64,
        stream=True,
        stream_options={"include_usage": True},
        messages=[{"role": "user", "content": "Name three primary colors."}],
    ) as r:
        headers = r.headers
        chunks = list(r.parse())
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert "Red" in text and "Blue" in text
    assert headers["x-gateway-tier"] == "highspeed"
    assert chunks[-1].usage.completion_tokens > 0
    assert len({c.id for c in chunks}) == 1


def test_real_looping_stream_is_recovered(client: Any) -> None:
    """A loop the hold-back window cannot see (it starts later): continued on standard."""
    with client.chat.completions.with_streaming_response.create(
        model="auto",
        temperature=0,
        max_tokens=256,
        stream=True,
        messages=[{"role": "user", "content": LOOPS}],
    ) as r:
        chunks = list(r.parse())
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finish = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    assert finish == ["stop"]  # the standard tier finished the text, it did not run to length
    # left alone, the fast tier repeats the line until max_tokens (~34 times); the client
    # got the start of the loop (what was sent before the check saw it), then the end
    # the standard tier wrote from the text before the loop
    assert text.count("A place of endless") < 25
    assert len({c.id for c in chunks}) == 1


@pytest.mark.parametrize("share", [0.25, 0.5])
def test_the_engine_continues_its_own_prefix_with_the_rest_of_its_answer(
    local_engines: dict[str, str], share: float
) -> None:
    """What the simulator models (engines/sim/, continuations): with greedy decoding, a
    request whose trailing assistant message is the start of the engine's own answer gets
    the rest of that answer (llama.cpp's server echoes the prefix first; the gateway strips
    it, dispatch/splice.py)."""

    def ask(messages: list[dict[str, str]]) -> str:
        body = {"model": "m", "messages": messages, "temperature": 0, "max_tokens": 60}
        req = urllib.request.Request(
            f"{local_engines['standard']}/v1/chat/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=120) as r:
            return str(json.loads(r.read())["choices"][0]["message"]["content"])

    question = [{"role": "user", "content": "Explain what a hash table is."}]
    whole = ask(question)
    assert " " in whole[int(len(whole) * share) :], whole  # a word boundary to cut at
    prefix = whole[: whole.index(" ", int(len(whole) * share))]
    again = ask([*question, {"role": "assistant", "content": prefix}])
    assert again.startswith(prefix)  # the echo
    rest = again[len(prefix) :]
    assert rest and (prefix + rest)[: len(whole)] == whole


def test_real_completions_endpoint(client: Any) -> None:
    raw = client.completions.with_raw_response.create(
        model="auto", prompt="The capital of Italy is", max_tokens=8, temperature=0
    )
    assert raw.parse().choices[0].text.strip()
    assert raw.headers["x-gateway-tier"] == "highspeed"


def test_tiers_discover_the_local_engines_models(local_gateway: str) -> None:
    """The rules name no model: each tier sends what its engine serves (its --alias); the
    standard engine's frequency penalty is its own default, not a field the gateway adds."""
    req = urllib.request.Request(f"{local_gateway}/readyz", headers=OPERATOR)
    with urllib.request.urlopen(req, timeout=10) as r:
        models = json.loads(r.read())["models"]
    assert models["highspeed"]["model"] == "smollm2-135m-instruct-fast"
    assert models["standard"]["model"] == "smollm2-135m-instruct"
    assert models["standard"]["source"] == "discovered"
