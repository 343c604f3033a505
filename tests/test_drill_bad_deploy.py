"""The bad-deploy drill's figures (``python -m evals drill-bad-deploy``) from a made-up run:
what counts as paying for the fast tier's bad answer, as skipping it, and the times read
off the replicas' gauges. The drill itself runs real processes (docs/reports/drills.md)."""

from __future__ import annotations

from pathlib import Path

from evals.drills.load import Flip, Sample
from evals.drills.report import Phases, figures, write

PAID = "highspeed:check_repetition -> standard"
SKIP = "default; task=chat; tier=highspeed demoted highspeed: 10 check failures in a row"
PROBE = "default; task=chat; tier=highspeed probe highspeed (demoted: 10 check failures)"


def _run() -> tuple[list[Sample], list[Flip], Phases]:
    s: list[Sample] = []
    s += [Sample(t / 10, 0, 200, 0.1, "highspeed", "default") for t in range(100)]  # 0-10 s
    s += [Sample(10 + t / 10, 0, 200, 0.4, "standard", "default", PAID) for t in range(15)]
    s += [Sample(11.5 + t / 10, 1, 200, 0.3, "standard", SKIP) for t in range(80)]
    s.append(Sample(12.0, 0, 200, 0.45, "standard", PROBE, PAID))
    s += [Sample(20 + t / 10, 1, 200, 0.3, "standard", SKIP) for t in range(50)]  # fixed at 20
    s += [Sample(25 + t / 10, 0, 200, 0.1, "highspeed", "default") for t in range(50)]
    flips = [Flip(11.6, 0, True), Flip(11.7, 1, True), Flip(25.1, 1, False), Flip(25.0, 0, False)]
    return s, flips, Phases(bad=10.0, fixed=20.0, end=30.0)


def test_the_drills_figures() -> None:
    fig = figures(*_run())
    assert fig["time_to_demote_s"] == 1.6 and fig["replicas_apart_s"] == 0.1
    assert fig["first_request_skipping_s"] == 1.5
    assert fig["paid_before_demotion"] == 15
    assert fig["paid_after_demotion"] == {"probes": 1, "others": 0}
    assert fig["skipped_during"] == 80 and fig["during_requests"] == 96
    assert fig["time_to_restore_s"] == 5.0 and fig["first_fast_answer_after_fix_s"] == 5.0
    assert fig["standard_rps"] == {"before": 0.0, "during": 9.6, "after": 5.0}
    assert fig["latency"]["before"] == {"n": 100, "p50_ms": 100.0, "p99_ms": 100.0}
    assert fig["latency"]["during_undetected"]["p50_ms"] == 400.0


def test_the_report_is_written(tmp_path: Path) -> None:
    samples, flips, ph = _run()
    setup = {
        "command": "python -m evals drill-bad-deploy",
        "replicas": 2,
        "redis": True,
        "rate": 16.0,
        "max_tokens": 200,
        "time_scale": 0.5,
        "quality": "the shipped defaults",
        "bad_at": ph.bad,
        "fixed_at": ph.fixed,
        "end": ph.end,
    }
    text = write(tmp_path, figures(samples, flips, ph), setup, samples).read_text()
    assert "| time to demote (first replica's gauge) | 1.6 s |" in text
    assert (tmp_path / "drill-bad-deploy.json").stat().st_size > 0
