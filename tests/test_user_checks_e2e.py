"""Checks users write, through a real gateway process, real fake engines and a real
webhook server: a fast answer that names a forbidden phrase, misses a required pattern, is
in the wrong language, breaks a JSON assertion or is rejected by the webhook is never shown,
and the standard tier answers, non-streamed and streamed; a hanging webhook costs at most
its timeout; a failing one opens its circuit."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import Proc, rules_for_tests, start_gateway

pytestmark = pytest.mark.processes

CHECKS = {
    "no_competitor": {"kind": "contains", "must_not_contain": ["Acme Corp", "acme.com"]},
    "ticket_id": {"kind": "regex", "must_match": "TCK-[0-9]{6}"},
    "reply_lang": {"kind": "language"},
    "totals": {"kind": "json_assert", "assert": ["total == parts.a + parts.b", "exists(id)"]},
    "house": {"kind": "webhook", "url": "", "timeout": 0.5, "on_error": "pass"},
    "flaky": {
        "kind": "webhook",
        "url": "",
        "timeout": 0.5,
        "on_error": "pass",
        "circuit": {"failures": 3, "cooldown": 60},
    },
}


class Hook:
    """The user's webhook: rejects a text with REJECT, hangs on HANG; 500s on /flaky."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.flaky_calls = 0
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                if self.path == "/flaky":
                    hook.flaky_calls += 1
                    self.send_response(500)
                    self.end_headers()
                    return
                hook.calls.append(body)
                if "HANG" in body["text"]:
                    time.sleep(3)
                verdict = {"pass": "REJECT" not in body["text"], "reason": "house rules"}
                out = json.dumps(verdict).encode()
                try:
                    self.send_response(200)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(out)))
                    self.end_headers()
                    self.wfile.write(out)
                except BrokenPipeError:
                    pass  # the gateway stopped waiting (a hanging webhook): expected

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def hook() -> Iterator[Hook]:
    h = Hook()
    yield h
    h.close()


@pytest.fixture(scope="module")
def gw(
    engines: dict[str, str], hook: Hook, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    rules = rules_for_tests(total=5.0)
    checks = json.loads(json.dumps(CHECKS))
    checks["house"]["url"] = f"{hook.url}/verify"
    checks["flaky"]["url"] = f"{hook.url}/flaky"
    rules["checks"] = checks
    rules["rules"] = [
        {
            "name": f"with-{name}",
            "when": {"headers": {"x-check": name}},
            "tier": "highspeed",
            "fallback": ["standard"],
            "checks": ["non_empty", name],
        }
        for name in CHECKS
    ] + rules["rules"]
    proc, url = start_gateway(tmp_path_factory.mktemp("gw"), rules, engines)
    yield url
    proc.stop()


def _ask(
    gw: str, check: str, system: str, user: str = "Hello", stream: bool = False
) -> tuple[httpx.Response, str]:
    body = {
        "model": "auto",
        "stream": stream,
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
    }
    r = httpx.post(f"{gw}/v1/chat/completions", json=body, headers={"x-check": check}, timeout=20)
    assert r.status_code == 200, r.text
    if not stream:
        return r, r.json()["choices"][0]["message"]["content"]
    text = ""
    for line in r.text.splitlines():
        if line.startswith("data: ") and line != "data: [DONE]":
            for c in json.loads(line[6:]).get("choices") or []:
                text += (c.get("delta") or {}).get("content") or ""
    return r, text


FAST_STD = "[[highspeed: text={fast}; chunks=12]] [[standard: text={std}; chunks=6]]"


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize(
    ("check", "fast", "std", "user"),
    [
        (
            "ticket_id",
            "Your ticket is open and we will be in touch.",
            "Your ticket TCK-123456 is open.",
            "Hello",
        ),
        (
            "reply_lang",
            "The weather in Berlin will be cloudy tomorrow with some rain in the afternoon.",
            "Das Wetter in Berlin wird morgen bewölkt sein, mit etwas Regen am Nachmittag.",
            "Wie wird das Wetter morgen in Berlin, und brauche ich einen Regenschirm?",
        ),
        (
            "totals",
            '{"id": 7, "total": 31, "parts": {"a": 10, "b": 20}}',  # (no "]": a directive)
            '{"id": 7, "total": 30, "parts": {"a": 10, "b": 20}}',
            "Hello",
        ),
        ("house", "REJECT this one please.", "A fine answer.", "Hello"),
    ],
)
def test_a_failing_fast_answer_is_never_shown(
    gw: str, check: str, fast: str, std: str, user: str, stream: bool
) -> None:
    r, text = _ask(gw, check, FAST_STD.format(fast=fast, std=std), user, stream)
    assert text == std
    assert fast not in r.text
    if not stream:  # a stream's headers left before the verdict was known: its trailer
        assert r.headers["x-gateway-tier"] == "standard"
        assert f"check_{check}" in r.headers["x-gateway-fallback"]


def test_a_passing_fast_answer_is_the_answer(gw: str) -> None:
    fast = "Your ticket TCK-654321 is open."
    r, text = _ask(gw, "ticket_id", FAST_STD.format(fast=fast, std="unused"))
    assert text == fast and r.headers["x-gateway-tier"] == "highspeed"
    assert "x-gateway-fallback" not in r.headers


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_a_forbidden_phrase_stops_the_answer_at_its_good_prefix(gw: str, stream: bool) -> None:
    fast = "Sure, Acme Corp sells that too, and they ship worldwide."
    std = "Sure, we sell that too, and we ship worldwide."
    r, text = _ask(gw, "no_competitor", FAST_STD.format(fast=fast, std=std), stream=stream)
    assert "Acme" not in r.text  # not one chunk of the phrase reached the client
    assert text == std  # the next tier continued "Sure, ": one clean answer


def test_a_hanging_webhook_costs_at_most_its_timeout(gw: str, hook: Hook) -> None:
    t0 = time.monotonic()
    r, text = _ask(gw, "house", FAST_STD.format(fast="HANG on a moment.", std="unused"))
    took = time.monotonic() - t0
    assert text == "HANG on a moment." and r.headers["x-gateway-tier"] == "highspeed"
    assert 0.45 < took < 1.5  # the webhook's 0.5 s, then on_error: pass


def test_the_webhook_receives_the_documented_body(gw: str, hook: Hook) -> None:
    _ask(gw, "house", FAST_STD.format(fast="Fine words.", std="unused"), "Hi there")
    body = hook.calls[-1]
    assert body["text"] == "Fine words." and body["partial"] is False
    assert body["rule"] == "with-house" and body["check"] == "house"
    assert body["request"]["messages"][-1] == {"role": "user", "content": "Hi there"}


def test_a_failing_webhook_opens_its_circuit(gw: str, hook: Hook) -> None:
    for _ in range(6):
        _, text = _ask(gw, "flaky", FAST_STD.format(fast="Fine words.", std="unused"))
        assert text == "Fine words."  # on_error: pass
    assert hook.flaky_calls == 3  # then open: the rest cost nothing
    metrics = httpx.get(f"{gw}/metrics", timeout=5).text
    assert 'gateway_check_seconds_count{check="flaky",result="pass"}' in metrics


def _gateway(tmp: Path, engines: dict[str, str], checks: dict[str, Any]) -> tuple[Proc, str]:
    rules = rules_for_tests()
    rules["checks"] = checks
    return start_gateway(tmp, rules, engines)


def test_bad_checks_are_refused_with_their_yaml_path(tmp_path: Path) -> None:
    import yaml

    from gateway.rules.schema import RulesError, parse_rules

    rules = rules_for_tests()
    rules["checks"] = {
        "bad_re": {"kind": "regex", "must_match": "(a)\\1"},  # a backreference: not RE2
        "no_kind": {"kind": "telepathy"},
        "empty": {"kind": "contains"},
        "expr": {"kind": "json_assert", "assert": ["total =="]},
    }
    with pytest.raises(RulesError) as e:
        parse_rules(yaml.safe_dump(rules))
    text = "\n".join(e.value.errors)
    assert "checks.bad_re: " in text and "not RE2" in text
    assert "checks.no_kind: " in text and "telepathy" in text
    assert "checks.empty: " in text and "must_not_contain" in text
    assert "checks.expr.assert: " in text and "ends too soon" in text
    # the references are checked once every entry is well formed
    rules["checks"] = {
        "judge": {"kind": "judge", "tier": "oracle", "rubric": "x"},
        "plug": {"kind": "python", "object": "no_such_pkg.mod:Check"},
    }
    rules["default"]["checks"] = [*rules["default"]["checks"], "not_defined"]
    with pytest.raises(RulesError) as e:
        parse_rules(yaml.safe_dump(rules))
    text = "\n".join(e.value.errors)
    assert "checks.judge.tier: unknown tier 'oracle'" in text
    assert "checks.plug: cannot import 'no_such_pkg.mod'" in text
    assert "default.checks[4]: unknown check 'not_defined'" in text
