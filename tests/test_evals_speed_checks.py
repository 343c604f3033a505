"""The evaluation harnesses ``python -m evals checks`` and ``python -m evals speed``.

``checks``: run on the shipped labelled set, the report has a row per check and the exact
confusion counts measured when the set was written (a change to a check or to the set shows
up here). ``speed``: against two simulator replicas (``engines.sim``, highspeed and standard
profiles at ``--time-scale 0.02``), closed loop at concurrency 1 and 2 and an open-loop
replay of five recorded requests.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evals.checks import kinds as user_kinds
from evals.checks import run as checks_eval
from evals.data import build_checks_set
from evals.speed import run as speed
from evals.speed.targets import Target, parse_target
from gateway.checks.registry import CHECK_NAMES
from tests.conftest import Proc, free_port

# (TP, FP, FN, TN) of each check on evals/data/checks_labelled.jsonl (198 cases), as measured.
EXPECTED_COUNTS = {
    "non_empty": (7, 0, 0, 191),
    "not_truncated": (25, 0, 0, 173),
    "repetition": (26, 0, 0, 172),
    "json_valid": (14, 0, 0, 184),
    "json_schema": (11, 0, 0, 187),
    "tool_call_valid": (15, 0, 0, 183),
    "template_leak": (12, 2, 0, 184),
    "refusal": (11, 0, 1, 186),
}
# Realistic answers the default settings still get wrong (template_leak's exact-text match
# cannot tell an answer *about* templates from a leak).
EXPECTED_MISSES = {
    # "As an AI language model, I cannot ...": the disclaimer pattern was dropped because it
    # flagged helpful answers that open with it (lookalike_refusal/disclaimer-then-answer)
    "refusal": ["refusal/ai-language-model"],
}
EXPECTED_FALSE_ALARMS = {
    "template_leak": [
        "lookalike_template/html-strikethrough",
        "lookalike_template/chatml-explained",
    ],
}
# Checks whose recall on their own categories is below 0.9 with the default settings.
KNOWN_RECALL_GAPS: dict[str, float] = {}


def _raw(out: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((out / "raw.json").read_text())
    return data


# --- checks -----------------------------------------------------------------------------------


def test_shipped_set_is_what_the_builder_writes() -> None:
    shipped = build_checks_set.OUT.read_text(encoding="utf-8").splitlines()
    built = [json.dumps(c, ensure_ascii=False) for c in build_checks_set.build()]
    assert shipped == built
    assert len(built) >= 150


@pytest.fixture(scope="module")
def checks_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("checks")
    assert checks_eval.main(["--out", str(out), "--repeats", "4"]) == 0
    return out


def test_checks_report_has_a_row_per_check(checks_run: Path) -> None:
    report = (checks_run / "report.md").read_text()
    table = report.split("| check | positives |", 1)[1].split("\n\n", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| ")]
    assert [row.split(" | ")[0][2:] for row in rows] == list(CHECK_NAMES)
    assert all(len(row.split(" | ")) == 12 for row in rows)
    assert (checks_run / "checks.png").stat().st_size > 10_000


def test_checks_confusion_counts_are_the_measured_ones(checks_run: Path) -> None:
    checks = _raw(checks_run)["checks"]
    counts = {name: (c["tp"], c["fp"], c["fn"], c["tn"]) for name, c in checks.items()}
    assert counts == EXPECTED_COUNTS
    misses = {name: c["false_negatives"] for name, c in checks.items() if c["false_negatives"]}
    assert misses == EXPECTED_MISSES
    alarms = {
        name: [fp["id"] for fp in c["false_positives"]]
        for name, c in checks.items()
        if c["false_positives"]
    }
    assert alarms == EXPECTED_FALSE_ALARMS


def test_checks_recall_on_their_own_categories(checks_run: Path) -> None:
    raw = _raw(checks_run)
    for name in CHECK_NAMES:
        own = [c for c in raw["cases"] if name in c["expect_fail"]]
        caught = sum(name in c["failed"] for c in own)
        recall = caught / len(own)
        assert recall == pytest.approx(raw["checks"][name]["recall"])
        if name in KNOWN_RECALL_GAPS:
            assert recall == pytest.approx(KNOWN_RECALL_GAPS[name]), name
        else:
            assert recall >= 0.9, name
    assert all(c["cost_us_p50"] > 0 for c in raw["checks"].values())


def test_checks_report_gives_each_user_kind_cost_against_the_bar(checks_run: Path) -> None:
    kinds = _raw(checks_run)["user_kinds"]
    assert kinds["bar_us"] == 50
    labels = [case.label for case in user_kinds.cases()]
    assert list(kinds["kinds"]) == labels
    for k in kinds["kinds"].values():
        assert 3900 <= k["answer_chars"] <= 4100  # a 1,000-token answer
        assert 0 < k["cost_us_p50"] <= k["cost_us_p95"]
        assert k["meets_bar"] is (k["cost_us_p95"] < 50)
    report = (checks_run / "report.md").read_text()
    section = report.split("## Cost of the declarative kinds users write", 1)[1]
    assert "under 50 µs" in section
    rows = [line for line in section.splitlines() if line.startswith("| ") and "µs" not in line]
    assert [row.split(" | ")[0][2:] for row in rows] == labels


# --- speed ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sims() -> Iterator[dict[str, str]]:
    procs, urls = [], {}
    try:
        for profile in ("highspeed", "standard"):
            port = free_port()
            argv = [
                sys.executable,
                "-m",
                "engines.sim",
                "--port",
                str(port),
                "--profile",
                profile,
                "--time-scale",
                "0.02",
                "--seed",
                "1",
            ]
            procs.append(Proc(argv, f"http://127.0.0.1:{port}/health"))
            urls[profile] = f"http://127.0.0.1:{port}/v1"
        yield urls
    finally:
        for p in procs:
            p.stop()


def _targets(sims: dict[str, str]) -> list[str]:
    return ["--target", f"hs={sims['highspeed']}", "--target", f"std={sims['standard']}"]


@pytest.mark.processes
def test_speed_sweep_two_sims(sims: dict[str, str], tmp_path: Path) -> None:
    argv = [
        *_targets(sims),
        "--requests",
        "8",
        "--concurrency",
        "1,2",
        "--out",
        str(tmp_path),
        "--no-progress",
    ]
    assert speed.main(argv) == 0
    raw = _raw(tmp_path)
    assert list(raw["cells"]) == ["c=1", "c=2"]
    for cell in raw["cells"].values():
        hs, std = cell["hs"], cell["std"]
        for s in (hs, std):
            assert (s["ok"], s["errors"]) == (8, {})
            assert s["ttft_p50"] > 0 and s["tpot_p50"] > 0 and s["tok_s"] > 0
        assert hs["tpot_p50"] < std["tpot_p50"]
    samples = raw["samples"]
    assert len(samples) == 2 * 2 * 8
    assert {s["token_source"] for s in samples} == {"usage"}
    sim_tpot = {
        name: {float(s["headers"]["x-sim-tpot-ms"]) for s in samples if s["target"] == name}
        for name in ("hs", "std")
    }
    assert max(sim_tpot["hs"]) < min(sim_tpot["std"])  # the simulator's own ground truth
    report = (tmp_path / "report.md").read_text()
    assert "### concurrency 1" in report and "### concurrency 2" in report
    assert "| hs/std |" in report and "hs/std: TTFT p50" in report
    for png in ("latency.png", "throughput.png"):
        assert (tmp_path / png).stat().st_size > 10_000


@pytest.mark.processes
def test_speed_replays_recorded_traffic(sims: dict[str, str], tmp_path: Path) -> None:
    offsets = [0.0, 0.05, 0.1, 0.2, 0.3]
    traffic = tmp_path / "traffic.jsonl"
    traffic.write_text(
        "".join(
            json.dumps(
                {
                    "t": 1000 + t,
                    "body": {
                        "model": "recorded",
                        "max_tokens": 40,
                        "messages": [{"role": "user", "content": f"question {i}"}],
                    },
                }
            )
            + "\n"
            for i, t in enumerate(offsets)
        )
    )
    out = tmp_path / "out"
    assert (
        speed.main([*_targets(sims), "--replay", str(traffic), "--out", str(out), "--no-progress"])
        == 0
    )
    raw = _raw(out)
    assert list(raw["cells"]) == ["replay"]
    for name in ("hs", "std"):
        got = sorted((s for s in raw["samples"] if s["target"] == name), key=lambda s: s["start"])
        assert [s["ok"] for s in got] == [True] * 5
        for s, t in zip(got, offsets, strict=True):
            assert t - 0.005 <= s["start"] < t + 0.1  # sent on the recorded schedule
        assert raw["cells"]["replay"][name]["ok"] == 5
    assert "### replay (open loop, 5 requests per target)" in (out / "report.md").read_text()


def test_speed_parses_targets_with_headers() -> None:
    t = parse_target("fast=http://127.0.0.1:8080/v1,x-gateway-tier:highspeed,x-a:b")
    assert t == Target(
        "fast", "http://127.0.0.1:8080/v1", (("x-gateway-tier", "highspeed"), ("x-a", "b"))
    )
    assert t.url({"messages": []}) == "http://127.0.0.1:8080/v1/chat/completions"
    assert t.url({"prompt": "x"}) == "http://127.0.0.1:8080/v1/completions"
