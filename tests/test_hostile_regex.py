"""Client-supplied regexes run in linear time (RE2), never on Python's backtracking ``re``.

A JSON schema's ``pattern`` with catastrophic backtracking once froze the event loop, and
every tenant with it, for seconds. Here it costs microseconds, and the gateway keeps
answering other requests and ``/healthz`` while such a request is checked.
"""

from __future__ import annotations

import json
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from gateway.checks.structured import SchemaValidators

EVIL = "^(a+)+$"  # exponential on Python's re for "aaaa...a!"
EVIL_INPUT = "a" * 48 + "!"
# CPU seconds, not wall-clock ones (a busy machine delays the process, it does not make it
# work more): backtracking would take ~2^48 steps, RE2 takes microseconds
LINEAR_CPU_S = 0.5


def test_catastrophic_pattern_is_linear() -> None:
    v = SchemaValidators()
    schema = {"type": "object", "properties": {"s": {"type": "string", "pattern": EVIL}}}
    t0 = time.process_time()
    assert v.error(schema, {"s": EVIL_INPUT}) == f"data.s must match pattern {EVIL}"
    assert v.error(schema, {"s": "aaaa"}) is None
    assert time.process_time() - t0 < LINEAR_CPU_S


def test_catastrophic_pattern_properties_are_linear() -> None:
    v = SchemaValidators()
    schema = {"type": "object", "patternProperties": {"^(x+)+y$": {"type": "integer"}}}
    t0 = time.process_time()
    assert v.error(schema, {"x" * 48 + "z": "not checked"}) is None
    assert v.error(schema, {"xxxy": "no"}) == "data.xxxy must be integer"
    assert time.process_time() - t0 < LINEAR_CPU_S


def test_required_names_are_not_matched_with_re_while_compiling() -> None:
    """fastjsonschema tests required names against patternProperties with ``re`` at compile
    time when additionalProperties is false: RE2 answers that instead."""
    v = SchemaValidators()
    evil = {
        "type": "object",
        "additionalProperties": False,
        "patternProperties": {EVIL: {}},
        "required": [EVIL_INPUT],
    }
    t0 = time.process_time()
    assert v.get(evil) is None  # the required name can never be present: not checkable
    assert time.process_time() - t0 < LINEAR_CPU_S
    ok = {
        "type": "object",
        "additionalProperties": False,
        "patternProperties": {EVIL: {"type": "string"}},
        "required": ["aaaa"],
    }
    assert v.error(ok, {"aaaa": "x"}) is None
    assert v.error(ok, {"aaaa": 1}) == "data.aaaa must be string"
    assert v.error(ok, {"aaaa": "x", "b": 1}) is not None  # additional property


def test_patterns_re2_refuses_make_the_schema_unchecked() -> None:
    v = SchemaValidators()
    for pattern in (r"(a)\1", "(?=a)b", "a{1000}{1000}", "x" * 5000, "(unclosed"):
        assert v.get({"type": "string", "pattern": pattern}) is None, pattern
    assert v.get({"type": "string", "pattern": "^[a-z]+$"}) is not None


def _post(url: str, body: dict[str, Any]) -> tuple[int, dict[str, str], float]:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=20) as r:
        r.read()
        return r.status, dict(r.headers), time.perf_counter() - t0


def _get(url: str) -> float:
    t0 = time.perf_counter()
    with urllib.request.urlopen(url, timeout=10) as r:
        assert r.status == 200
    return time.perf_counter() - t0


@pytest.mark.processes
def test_catastrophic_pattern_stalls_nobody(gateway: str) -> None:
    answer = json.dumps({"s": EVIL_INPUT})
    hostile = {
        "model": "auto",
        "messages": [{"role": "user", "content": f"[[*: json={answer}]]"}],
        "response_format": {
            "type": "json_schema",
            "json_schema": {
                "name": "evil",
                "schema": {
                    "type": "object",
                    "properties": {"s": {"type": "string", "pattern": EVIL}},
                },
            },
        },
    }
    plain = {"model": "auto", "messages": [{"role": "user", "content": "hello"}]}
    url = f"{gateway}/v1/chat/completions"
    with ThreadPoolExecutor(8) as pool:
        hostiles = [pool.submit(_post, url, hostile) for _ in range(4)]
        health = [pool.submit(_get, f"{gateway}/healthz") for _ in range(8)]
        others = [pool.submit(_post, url, plain) for _ in range(4)]
        # wall-clock bounds through a real gateway: backtracking would freeze its event
        # loop for ~2^48 steps; an answer takes milliseconds, so seconds spare a busy machine
        for f in hostiles:
            status, headers, took = f.result()
            assert status == 200 and took < 10
            # every tier's answer breaks the pattern: the last one is delivered, marked
            assert headers.get("x-gateway-checks-failed") == "json_schema"
        assert max(f.result() for f in health) < 5
        assert all(f.result()[0] == 200 for f in others)
