"""The proxy benchmark's verdicts: which product targets a run meets, peers included."""

from __future__ import annotations

from typing import Any

import pytest

from evals.bench import report

SCENARIOS = [
    {"id": report.scenario_id(s, c), "stream": s, "clients": c}
    for s in (False, True)
    for c in (1, 64)
]


def _cell(**stats: float) -> dict[str, Any]:
    return {k: {"median": v, "min": v, "max": v} for k, v in stats.items()}


def _summary(
    gateway_ns_p50: float, gateway_ns_rps: float, gateway_st_rps: float, router: bool = True
) -> report.Summary:
    def target(ns_p50: float, st_ttfb: float, ns_rps: float, st_rps: float) -> dict[str, Any]:
        return {
            "ns_c1": _cell(lat_p50_ms=ns_p50, lat_p99_ms=ns_p50 * 2),
            "st_c1": _cell(ttfb_p50_ms=st_ttfb, lat_p50_ms=st_ttfb + 0.1),
            "ns_c64": _cell(rps=ns_rps),
            "st_c64": _cell(rps=st_rps),
        }

    out = {
        "direct": target(1.0, 1.0, 20_000, 10_000),
        "relay": target(1.3, 1.3, 9_000, 4_700),
        "gateway": target(gateway_ns_p50, 1.5, gateway_ns_rps, gateway_st_rps),
    }
    if router:
        out["sglang-router"] = target(1.16, 45.0, 15_000, 2_500)
    return out


def _oks(summary: report.Summary) -> dict[str, bool | None]:
    return {v["name"]: v["ok"] for v in report.verdicts(summary, SCENARIOS)}


@pytest.mark.parametrize(
    ("ns_p50", "ns_rps", "st_rps", "missed"),
    [
        (1.4, 7_600, 2_600, set()),
        # added 0.5 ms against the relay's 0.3: 1.67x, over 1.5x
        (1.5, 7_600, 2_600, {"added latency at c=1, non-stream p50"}),
        # 5,000/s: 56 % of the relay's, 33 % of the router's
        (
            1.4,
            5_000,
            2_600,
            {
                "throughput at c=64, non-stream: gateway / relay",
                "throughput at c=64, non-stream: gateway / sglang-router",
            },
        ),
        # fewer streams/s than the router
        (1.4, 7_600, 2_400, {"throughput at c=64, stream: gateway / sglang-router"}),
    ],
)
def test_verdicts(ns_p50: float, ns_rps: float, st_rps: float, missed: set[str]) -> None:
    oks = _oks(_summary(ns_p50, ns_rps, st_rps))
    got = {
        name.removesuffix(" req/s").split(": gateway_added")[0]
        for name, ok in oks.items()
        if ok is False
    }
    assert got == missed
    assert sum(ok is None for ok in oks.values()) == 1  # the p99 row is information only


def test_without_the_router_its_verdicts_are_left_out() -> None:
    names = list(_oks(_summary(1.4, 7_600, 2_600, router=False)))
    assert not [n for n in names if "sglang-router" in n]
    assert len(names) == 6


def test_the_table_has_the_router_column() -> None:
    meta = {
        "targets": ["direct", "relay", "gateway", "sglang-router"],
        "scenarios": SCENARIOS,
        "started_utc": "x",
        "repeats": 1,
        "duration_s": 1,
        "sut_cpus": "0",
        "load_cpus": "1",
        "nice": False,
        "chunks": 50,
        "chunk_delay_ms": 0,
        "python": "3.11",
        "aiohttp": "3",
    }
    summary = _summary(1.4, 7_600, 2_600)
    for cells in summary.values():
        for cell in cells.values():
            cell.update(
                errors={},
                cpu_busy_pct={"0": 50.0},
                runs_clean=1,
                runs_total=1,
                foreign_cpu_pct=None,
            )
    text = report.render(summary, meta)
    assert (
        "| metric | relay | gateway | sglang-router | gateway/relay | gateway/sglang-router |"
        in text
    )


@pytest.mark.parametrize(
    ("long_", "short", "us"),
    [
        # (CPU s, streams, events per stream): the events the streams carried, not the
        # chunks the fake engine was started with (it sends no more than max_tokens)
        ((1.0, 100, 503), (0.5, 100, 13), 10.2),
        ((2.0, 200, 67), (1.0, 200, 13), 92.59),
        ((0.5, 50, 13), (0.5, 50, 3), 0.0),
    ],
)
def test_stream_chunks_divides_by_the_events_the_streams_carried(
    long_: tuple[float, int, int], short: tuple[float, int, int], us: float
) -> None:
    from evals.bench.stream_chunks import per_chunk

    assert round(per_chunk(long_, short), 2) == us


def test_stream_chunks_asks_for_as_many_tokens_as_chunks() -> None:
    import json

    from evals.bench.common import chat_body

    assert json.loads(chat_body(True, "auto", max_tokens=500))["max_tokens"] == 500
    assert json.loads(chat_body(True))["max_tokens"] == 64
    assert json.loads(chat_body(False))["max_tokens"] == 14
