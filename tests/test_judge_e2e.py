"""A judge model as a check, through a real gateway and real fake engines (a third engine
is the judge tier): ``gate`` holds the answer for the verdict and a FAIL moves the request
on; ``score`` records the verdict after the answer went out, delaying no one."""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import rules_for_tests, start_engine, start_gateway
from tests.waiting import wait_until

pytestmark = pytest.mark.processes

GATE = {"kind": "judge", "tier": "judge", "rubric": "Polite and on topic.", "mode": "gate"}
SCORE = {**GATE, "mode": "score", "timeout": 5.0}


@pytest.fixture(scope="module")
def gw(engines: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    judge, judge_url = start_engine("judge", "--model", "fake-judge")
    rules = rules_for_tests()
    rules["tiers"]["judge"] = copy.deepcopy(rules["tiers"]["standard"])
    rules["checks"] = {"grader": {**GATE, "timeout": 2.0}, "scorer": SCORE}
    rules["rules"] = [
        {
            "name": f"with-{name}",
            "when": {"headers": {"x-check": name}},
            "tier": "highspeed",
            "fallback": ["standard"],
            "checks": ["non_empty", name],
        }
        for name in ("grader", "scorer")
    ] + rules["rules"]
    proc, url = start_gateway(tmp_path_factory.mktemp("gw"), rules, {**engines, "judge": judge_url})
    yield url
    proc.stop()
    judge.stop()


def _ask(gw: str, check: str, user: str) -> httpx.Response:
    body = {"model": "auto", "messages": [{"role": "user", "content": user}]}
    r = httpx.post(f"{gw}/v1/chat/completions", json=body, headers={"x-check": check}, timeout=20)
    assert r.status_code == 200, r.text
    return r


def test_a_judge_that_passes_keeps_the_fast_answer(gw: str) -> None:
    r = _ask(gw, "grader", "Hello [[judge: text=PASS: polite]]")
    assert r.headers["x-gateway-tier"] == "highspeed"
    assert r.json()["choices"][0]["message"]["content"] == "Echo (highspeed): Hello"


def test_a_gating_judge_that_fails_moves_the_request_on(gw: str) -> None:
    r = _ask(gw, "grader", "Hello [[judge: text=FAIL: rude]]")
    assert "check_grader" in r.headers["x-gateway-fallback"]
    assert r.headers["x-gateway-tier"] == "standard"
    # the judge fails the standard answer too: the last tier's is delivered, and says so
    assert r.headers["x-gateway-checks-failed"] == "grader"


def test_a_judge_that_hangs_costs_its_timeout_and_passes(gw: str) -> None:
    t0 = time.monotonic()
    r = _ask(gw, "grader", "Hello [[judge: text=FAIL: rude; delay=10]]")
    assert r.headers["x-gateway-tier"] == "highspeed"  # on_error: pass
    assert time.monotonic() - t0 < 3.5  # its 2 s timeout, not 10


def test_a_scoring_judge_delays_no_one_and_is_measured(gw: str) -> None:
    t0 = time.monotonic()
    r = _ask(gw, "scorer", "Hello [[judge: text=FAIL: rude; delay=1.5]]")
    assert time.monotonic() - t0 < 1.2  # answered before the judge did
    assert r.headers["x-gateway-tier"] == "highspeed" and "x-gateway-fallback" not in r.headers
    wanted = 'gateway_check_seconds_count{check="scorer",result="fail"}'
    wait_until(
        lambda: wanted in httpx.get(f"{gw}/metrics", timeout=5).text,
        "the judge's verdict in the metrics",
        timeout=10,
    )
