"""Requests routed by what fits each tier's context window, and ``max_tokens`` checked before an
engine sees it.

Pure parts by table (:mod:`gateway.routing.fit`, the router with windows, the classifier's
estimate), then real processes: a window the engine lists (``max_model_len``) keeps a long
prompt off the tier; a window it does not list is found by its "too long" 400, which moves
the request on and is remembered; no window large enough is a 400 saying why; the SGLang
simulator's windows, the failover suite's context-length case.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from gateway.errors import ContextTooLong, InvalidField
from gateway.request.model import parse_chat
from gateway.routing.classify import Classifier
from gateway.routing.fit import Limits, Need, fit
from gateway.routing.router import Router
from gateway.rules.schema import load_rules
from tests.conftest import Proc, free_port, rules_for_tests, start_engine, start_gateway
from tests.test_e2e_proxy import engine_requests

ROOT = Path(__file__).resolve().parent.parent
RULES = load_rules(ROOT / "routing_rules.yaml")
CHAIN = ("highspeed", "standard")


@pytest.mark.parametrize(
    ("limits", "need", "kept"),
    [
        ({}, Need(10_000, 500), CHAIN),  # unknown windows: every tier is tried
        ({"highspeed": Limits(4096)}, Need(3000, 500), CHAIN),
        ({"highspeed": Limits(4096)}, Need(3000, 1500), ("standard",)),
        ({"highspeed": Limits(4096)}, Need(5000), ("standard",)),  # no max_tokens: the prompt
        ({"highspeed": Limits(4096), "standard": Limits(8192)}, Need(5000, 1000), ("standard",)),
        ({"highspeed": Limits(None, 100)}, Need(10, 200), ("standard",)),  # over its cap
        ({"highspeed": Limits(None, 100)}, Need(10_000, 50), CHAIN),
    ],
)
def test_fit_keeps_the_tiers_that_can_hold_it(
    limits: dict[str, Limits], need: Need, kept: tuple[str, ...]
) -> None:
    assert fit(CHAIN, need, limits)[0] == kept


def test_no_tier_holds_it_a_400_saying_why() -> None:
    limits = {"highspeed": Limits(4096), "standard": Limits(8192)}
    with pytest.raises(ContextTooLong) as e:
        fit(CHAIN, Need(9000, 100), limits)
    assert e.value.code == "context_length_exceeded" and e.value.param == "messages"
    assert "about 9100 tokens" in e.value.message
    assert "highspeed: window 4096, standard: window 8192" in e.value.message
    # max_tokens alone over every tier's limit: the 400 names that field
    with pytest.raises(InvalidField) as m:
        fit(CHAIN, Need(10, 10**9, "max_completion_tokens"), limits)
    assert m.value.param == "max_completion_tokens" and m.value.code == "invalid_value"
    assert "at most 8192 tokens" in m.value.message


def _chat(content: str, **kw: Any) -> Any:
    body = {"model": "auto", "messages": [{"role": "user", "content": content}], **kw}
    return parse_chat(json.dumps(body).encode())


def test_the_router_leaves_out_a_window_too_small_and_says_so() -> None:
    c = Classifier(RULES).classify(_chat("x" * 20_000), {})
    d = Router(RULES).decide(c, {}, windows={"highspeed": 4096})
    assert d.tiers == ("standard",)
    assert "too long for highspeed (window 4096)" in d.route_header
    assert Router(RULES).decide(c, {}).tiers == CHAIN  # windows unknown: both
    with pytest.raises(ContextTooLong):
        Router(RULES).decide(c, {}, windows={"highspeed": 4096, "standard": 4096})
    with pytest.raises(InvalidField) as e:  # the repository's rules cap max_tokens
        Router(RULES).decide(Classifier(RULES).classify(_chat("x", max_tokens=10**9), {}), {})
    assert e.value.param == "max_tokens"


def test_the_estimate_counts_tool_definitions() -> None:
    tools = [{"type": "function", "function": {"name": "f", "description": "d" * 4000}}]
    plain = Classifier(RULES).classify(_chat("hello"), {})
    with_tools = Classifier(RULES).classify(_chat("hello", tools=tools), {})
    assert with_tools.context_tokens >= plain.context_tokens + 1000


# --- real processes ----------------------------------------------------------------------------


def _oa(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=20)


@pytest.fixture(scope="module")
def listed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str]]]:
    """A fast tier whose engine lists a 1,000-token window; a standard one without limit."""
    hs, hs_url = start_engine("highspeed", "--context", "1000")
    st, st_url = start_engine("standard")
    urls = {"highspeed": hs_url, "standard": st_url}
    proc, url = start_gateway(tmp_path_factory.mktemp("gw"), rules_for_tests(), urls)
    yield url, urls
    for p in (proc, hs, st):
        p.stop()


@pytest.mark.processes
def test_a_listed_window_keeps_a_long_prompt_off_the_tier(
    listed: tuple[str, dict[str, str]],
) -> None:
    url, urls = listed
    with _oa(url) as oa:
        raw = oa.chat.completions.with_raw_response.create(
            model="auto", messages=[{"role": "user", "content": "long " * 1200}]
        )
        assert raw.headers["x-gateway-tier"] == "standard"
        assert "too long for highspeed (window 1000)" in raw.headers["x-gateway-route"]
        assert "x-gateway-fallback" not in raw.headers  # never sent there
        assert engine_requests(urls["highspeed"]) == []
        # max_tokens over the fast tier's window, a short prompt: the standard tier too
        raw = oa.chat.completions.with_raw_response.create(
            model="auto", max_tokens=2000, messages=[{"role": "user", "content": "hi"}]
        )
        assert raw.headers["x-gateway-tier"] == "standard"
        short = oa.chat.completions.with_raw_response.create(
            model="auto", messages=[{"role": "user", "content": "hi"}]
        )
        assert short.headers["x-gateway-tier"] == "highspeed"


@pytest.fixture(scope="module")
def quiet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str]]]:
    """Engines that do not list their windows (1,000 and 1,500 tokens) but refuse past them."""
    hs, hs_url = start_engine("highspeed", "--context", "1000", "--context-quiet")
    st, st_url = start_engine("standard", "--context", "1500", "--context-quiet")
    urls = {"highspeed": hs_url, "standard": st_url}
    proc, url = start_gateway(tmp_path_factory.mktemp("gw"), rules_for_tests(), urls)
    yield url, urls
    for p in (proc, hs, st):
        p.stop()


@pytest.mark.processes
def test_a_too_long_400_moves_on_is_remembered_and_only_no_window_is_an_error(
    quiet: tuple[str, dict[str, str]],
) -> None:
    url, urls = quiet
    medium: Any = [{"role": "user", "content": "word " * 960}]  # ~1,200 tokens: standard only
    with _oa(url) as oa:
        raw = oa.chat.completions.with_raw_response.create(model="auto", messages=medium)
        assert raw.headers["x-gateway-tier"] == "standard"
        assert raw.headers["x-gateway-fallback"] == "highspeed:context_length -> standard"
        # the window the engine named is kept: the next such request skips the tier unsent
        raw = oa.chat.completions.with_raw_response.create(model="auto", messages=medium)
        assert "too long for highspeed (window 1000)" in raw.headers["x-gateway-route"]
        assert len(engine_requests(urls["highspeed"])) == 1
        # too long for both: the client's 400 quotes the engine that was tried
        long: Any = [{"role": "user", "content": "word " * 1600}]
        with pytest.raises(openai.BadRequestError) as e:
            oa.chat.completions.create(model="auto", messages=long)
        assert e.value.code == "context_length_exceeded" and e.value.param == "messages"
        assert "standard: This model's maximum context length is 1500 tokens" in e.value.message
        # both windows known now: the 400 comes before any engine, with each window
        with pytest.raises(openai.BadRequestError) as e2:
            oa.chat.completions.create(model="auto", messages=long)
        assert "highspeed: window 1000, standard: window 1500" in e2.value.message
    # the same on /v1/messages: Anthropic's error type, the SDK's exception
    ac: Any = anthropic.Anthropic(base_url=url, api_key="x", max_retries=0)
    with ac, pytest.raises(anthropic.BadRequestError) as ae:
        ac.messages.create(model="claude-x", max_tokens=10, messages=long)
    body: Any = ae.value.body
    assert body["error"]["type"] == "invalid_request_error"


@pytest.mark.processes
def test_max_tokens_past_every_limit_is_a_400_naming_it(gateway: str) -> None:
    with _oa(gateway) as oa, pytest.raises(openai.BadRequestError) as e:
        oa.chat.completions.create(
            model="auto", max_tokens=10**9, messages=[{"role": "user", "content": "hi"}]
        )
    assert e.value.param == "max_tokens" and "too large" in e.value.message


@pytest.mark.processes
def test_an_engines_400_keeps_its_message_in_openais_envelope(gateway: str) -> None:
    with _oa(gateway) as oa, pytest.raises(openai.BadRequestError) as e:
        oa.chat.completions.create(
            model="auto", messages=[{"role": "user", "content": "[[highspeed: status=400]]"}]
        )
    body = e.value.body
    assert isinstance(body, dict)  # the engine said type "engine_error" and code 400
    assert body == {
        "message": "highspeed says 400",
        "type": "invalid_request_error",
        "param": None,
        "code": None,
    }


def _sim(tier: str, *args: str) -> tuple[Proc, str]:
    port = free_port()
    argv = [sys.executable, "-m", "engines.sim", "--port", str(port), "--profile", tier]
    argv += ["--time-scale", "0.01", "--model", f"sim-{tier}", *args]
    return Proc(argv, f"http://127.0.0.1:{port}/health"), f"http://127.0.0.1:{port}"


@pytest.mark.processes
def test_the_simulators_windows_send_a_long_prompt_to_the_standard_tier(
    tmp_path: Path,
) -> None:
    hs, hs_url = _sim("highspeed", "--context-length", "1024")
    st, st_url = _sim("standard")
    proc, url = start_gateway(
        tmp_path, rules_for_tests(), {"highspeed": hs_url, "standard": st_url}
    )
    try:
        with _oa(url) as oa:
            # ~3,000 words: over the fast tier's window by any count
            prose = "The committee met on Tuesday and discussed the budget at length. " * 270
            r = oa.chat.completions.with_raw_response.create(
                model="gpt-4o-mini", messages=[{"role": "user", "content": prose}]
            )
            assert (
                r.headers["x-gateway-tier"] == "standard" and r.parse().choices[0].message.content
            )
            # 1,500 one-letter words: ~750 tokens by the estimate, 1,500 to the engine, whose
            # 400 sends it on
            letters = "a " * 1500
            r = oa.chat.completions.with_raw_response.create(
                model="auto", messages=[{"role": "user", "content": letters}]
            )
            assert r.headers["x-gateway-tier"] == "standard"
            assert r.headers["x-gateway-fallback"] == "highspeed:context_length -> standard"
    finally:
        for p in (proc, hs, st):
            p.stop()
