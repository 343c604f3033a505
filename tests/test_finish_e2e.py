"""A stream whose fast tier loops or cuts, finished on a standard tier that cannot continue
it, through real processes: the gateway, the fake engines, and LiteLLM against the fake
standard engine (an OpenAI-compatible model LiteLLM's map does not know: no assistant
prefill, no price). The client gets the standard tier's answer, whole, and no error event;
``/readyz`` and the log say what the hosted tier lacks; a USD budget is never spent on it.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from gateway.store.redis_store import RedisStore
from tests.conftest import REDIS, Proc, rules_for_tests, start_gateway
from tests.test_streams import ANSWER, content, sse
from tests.test_tenancy import call, chat, new_tenant, tenancy_env

pytestmark = pytest.mark.processes

SENTENCE = "I will repeat this sentence again. "  # the fake engine's loop
CUT = f"q [[*: text={ANSWER}; per=1]] [[highspeed: cut_after=10; gap=0.01]]"
LOOPS = f"q [[*: text={ANSWER}; per=1]] [[highspeed: loop_after=10; gap=0.01]]"


def _no_error(events: list[Any]) -> None:
    assert not [e for e in events if isinstance(e, dict) and "error" in e]
    assert events[-1] == "[DONE]" and events.count("[DONE]") == 1


def _comment(comments: list[str], name: str) -> str:
    found = [c.split(" ", 2)[2] for c in comments if c.startswith(f": {name} ")]
    assert found, comments
    return found[-1]


@pytest.fixture(scope="module")
def refusing(engines: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A gateway of its own: its standard pool learns here that the engine refuses prefixes."""
    rules = rules_for_tests()
    for tier in rules["tiers"].values():
        tier["continuation"] = "continue_final_message"  # as SGLang's rules say
    proc, url = start_gateway(tmp_path_factory.mktemp("refusing"), rules, engines)
    yield url
    proc.stop()


def test_an_engine_refusing_the_continuation_still_gives_its_whole_answer(refusing: str) -> None:
    headers, events, comments = sse(refusing, CUT + " [[standard: no_prefill]]")
    assert headers["x-gateway-finish"] == "continue standard"  # not known to refuse, yet
    _no_error(events)
    assert content(events) == ANSWER  # the first 10 words, then the restart's rest
    assert _comment(comments, "x-gateway-finish") == "restart standard"
    assert _comment(comments, "x-gateway-fallback") == "highspeed:stream_cut -> standard"
    # learned: the next stream's plan is a restart before its first byte, and a loop
    headers, events, comments = sse(refusing, LOOPS + " [[standard: no_prefill]]")
    assert headers["x-gateway-finish"] == "restart standard"
    _no_error(events)
    text = content(events)
    assert text.count(SENTENCE.strip()) <= 2 and text.replace(SENTENCE, "") == ANSWER
    assert _comment(comments, "x-gateway-fallback") == "highspeed:check_repetition -> standard"


@pytest.fixture(scope="module")
def hosted(engines: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    """The standard tier through LiteLLM, at the fake standard engine; tenancy on Redis."""
    prefix = f"gwtest:{uuid.uuid4().hex[:8]}:"
    rules = rules_for_tests()
    rules["tiers"]["standard"] = {
        "provider": "litellm",
        "litellm_params": {
            "model": "openai/fake-standard",  # not in LiteLLM's map: no prefill, no price
            "api_base": engines["standard"] + "/v1",
            "api_key": "unused",
        },
        "timeouts": {"connect": 2.0, "ttft": 10.0, "total": 20.0, "stall": 5.0},
        "circuit": {"failures": 1000, "cooldown": 1.0},
    }
    rules["tiers"]["highspeed"]["price"] = {"input_per_1m": 1.0, "output_per_1m": 2.0}
    urls = {"highspeed": engines["highspeed"]}
    tmp = tmp_path_factory.mktemp("hosted")
    proc, _ = start_gateway(tmp, rules, urls, tenancy_env(prefix), timeout=90)
    yield proc
    proc.stop()

    async def clean() -> None:
        s = RedisStore(REDIS, prefix)
        await s.delete_prefix()
        await s.close()

    asyncio.run(clean())


def _url(proc: Proc) -> str:
    return proc.url.removesuffix("/healthz")


def test_a_hosted_tier_without_prefill_restarts_and_gives_its_whole_answer(hosted: Proc) -> None:
    _, _, key = new_tenant(hosted.admin)
    for directive in (CUT, LOOPS):
        headers, events, comments = sse(_url(hosted), directive, key=key)
        assert headers["x-gateway-finish"] == "restart standard", (headers, comments)
        _no_error(events)
        assert content(events).replace(SENTENCE, "") == ANSWER
        assert _comment(comments, "x-gateway-finish") == "restart standard"
        assert _comment(comments, "x-gateway-fallback").endswith(" -> standard")


def test_the_hosted_tier_says_what_it_lacks(hosted: Proc) -> None:
    st, body, _ = call(_url(hosted), "GET", "/readyz")  # the detail: the admin token
    assert st == 200, body
    assert body["capabilities"]["standard"] == {
        "provider": "litellm",
        "continues": False,
        "finish": "restart",
        "priced": False,
    }
    assert body["capabilities"]["highspeed"]["priced"] is True
    log = hosted.log()
    assert "hosted tier standard (openai/fake-standard): no assistant prefill" in log
    assert "no known price" in log


def test_a_usd_budget_is_never_spent_on_an_unpriced_tier(hosted: Proc) -> None:
    _, _, key = new_tenant(hosted.admin, {"cost_budget": {"usd": 1.0, "period": "day"}})
    st, body, headers = chat(_url(hosted), key, "hello [[highspeed: status=500]]")
    assert st == 502, body  # the priced tier failed; the unpriced one was never tried
    assert "unpriced: standard" in headers["x-gateway-route"]
    st, body, _ = chat(_url(hosted), key, "hello", model="standard")  # pinned to it alone
    assert st == 403 and body["error"]["code"] == "tier_unpriced", body
    _, _, free = new_tenant(hosted.admin)  # without a budget: served there as usual
    st, body, headers = chat(_url(hosted), free, "hello", model="standard")
    assert st == 200 and headers["x-gateway-tier"] == "standard"
