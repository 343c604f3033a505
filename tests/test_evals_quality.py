"""The quality harness: its metrics (table-driven) and a whole run against fake engines."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from evals.data import build_quality_set
from evals.quality import run as quality
from evals.quality.metrics import METRICS

pytestmark = pytest.mark.processes

PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
}


def call(name: str, args: str) -> list[dict[str, Any]]:
    return [{"type": "function", "function": {"name": name, "arguments": args}}]


@pytest.mark.parametrize(
    ("task", "answer", "expect", "score"),
    [
        ("chat", {"text": "Red, blue and yellow."}, {"keywords": ["red", "blue", "yellow"]}, 1.0),
        ("chat", {"text": "Red and green."}, {"keywords": ["red", "blue"]}, 0.5),
        ("reasoning", {"text": "17 + 25 = 42"}, {"number": 42}, 1.0),
        ("reasoning", {"text": "It is 41."}, {"number": 42}, 0.0),
        (
            "code",
            {"text": "```python\ndef add(a, b):\n    return a + b\n```"},
            {"tests": ["assert add(2, 3) == 5", "assert add(0, 0) == 0"]},
            1.0,
        ),
        (
            "code",
            {"text": "def add(a, b):\n    return a - b"},
            {"tests": ["assert add(2, 3) == 5", "assert add(0, 0) == 0"]},
            0.5,
        ),
        ("code", {"text": "while True: pass"}, {"tests": ["assert True"]}, 0.0),
        (
            "extraction",
            {"text": '{"name": "Alice", "age": 30}'},
            {"schema": PERSON, "fields": {"name": "Alice", "age": 30}},
            1.0,
        ),
        (
            "extraction",
            {"text": '{"name": "Alice", "age": "30"}'},
            {"schema": PERSON, "fields": {"name": "Alice", "age": 30}},
            0.25,
        ),
        ("extraction", {"text": "Alice, 30"}, {"schema": PERSON, "fields": {"name": "Alice"}}, 0.0),
        (
            "tools",
            {"tool_calls": call("get_weather", '{"city": "Oslo"}')},
            {"tool": "get_weather", "args": {"city": "Oslo"}},
            1.0,
        ),
        (
            "tools",
            {"tool_calls": call("get_weather", '{"city": "Bergen"}')},
            {"tool": "get_weather", "args": {"city": "Oslo"}},
            0.5,
        ),
        (
            "tools",
            {"tool_calls": call("get_time", "{}")},
            {"tool": "get_weather", "args": {"city": "Oslo"}},
            0.0,
        ),
        ("tools", {"text": "It is sunny."}, {"tool": "get_weather", "args": {"city": "Oslo"}}, 0.0),
        ("summarization", {"text": "a b c d"}, {"reference": "a b c d"}, 1.0),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_metrics(task: str, answer: dict[str, Any], expect: dict[str, Any], score: float) -> None:
    assert METRICS[task](answer, expect) == pytest.approx(score)


def test_shipped_set_is_what_the_builder_writes() -> None:
    shipped = build_quality_set.OUT.read_text(encoding="utf-8").splitlines()
    assert shipped == [json.dumps(c, ensure_ascii=False) for c in build_quality_set.build()]
    assert {json.loads(x)["task"] for x in shipped} == set(METRICS)


def test_a_whole_run_against_two_engines(engines: dict[str, str], tmp_path: Path) -> None:
    out = tmp_path / "q"
    rc = quality.main(
        [
            "--target",
            f"fast={engines['highspeed']}/v1",
            "--target",
            f"standard={engines['standard']}/v1",
            "--out",
            str(out),
            "--no-progress",
        ]
    )
    assert rc == 0
    raw = json.loads((out / "raw.json").read_text())
    assert [t["task"] for t in raw["tasks"]] == list(METRICS)
    # the fake engines echo the prompt: "Echo (highspeed): ..." vs "Echo (standard): ..."
    chat = next(t for t in raw["tasks"] if t["task"] == "chat")
    assert 0.8 < chat["align_f1"] < 1.0 and chat["exact"] == 0.0
    assert (out / "quality.png").stat().st_size > 5_000
    assert "| chat | 8 | keyword recall |" in (out / "report.md").read_text()
