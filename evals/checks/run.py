"""``python -m evals checks``: precision, recall and cost of each quality check.

    python -m evals checks [--data evals/data/checks_labelled.jsonl] [--out DIR]
        [--repeats 200]

Runs every check of ``gateway.checks.CHECK_NAMES`` (built by ``build_checks(CheckSettings())``,
the defaults the gateway ships with) on every case of a labelled set (see
``evals/data/build_checks_set.py``). A case is *positive* for check ``c`` when ``c`` is in
its ``expect_fail``; the check *predicts* positive when its result is not ok. Per check:
TP/FP/FN/TN, precision, recall, F1 over the whole set, the misclassified case ids (with
the check's reason for false positives), and the cost: each check is called ``--repeats``
times on each case, timed with ``time.perf_counter_ns``; the per-case mean is a cost sample
and the report gives the median, p95 and max over the set (microseconds per call, Python
call overhead included). The shared JSON parse memo of ``json_valid``/``json_schema`` is
defeated (two equal but distinct text objects alternate), so each check pays its own
parse, as ``json_valid`` does in the gateway; ``json_schema`` there reuses that parse.

A last section gives the cost of each declarative check kind users write (``regex``,
``contains``, ``length``, ``language``, ``json_assert``) on a 1,000-token answer against
issue 39's bar (:mod:`evals.checks.kinds`; ``user_kinds`` in ``raw.json``).

Writes ``report.md``, ``raw.json`` and ``checks.png`` (precision/recall bars, cost bars) to
``--out`` (default ``results/checks-<UTC stamp>/``) and prints the report.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evals import data
from evals import report as ru
from evals.checks import kinds as user_kinds
from gateway.checks.base import Check, Output, RequestFacts
from gateway.checks.config import CheckSettings
from gateway.checks.registry import CHECK_NAMES, build_checks

DATA = data.DIR / "checks_labelled.jsonl"


@dataclass(frozen=True)
class Case:
    """One labelled answer."""

    id: str
    category: str
    expect_fail: frozenset[str]
    facts: RequestFacts
    output: Output


@dataclass
class Score:
    """Confusion counts of one check, the cases it got wrong, and its cost samples (ns)."""

    check: str
    tp: int = 0
    fp: int = 0
    fn: int = 0
    tn: int = 0
    false_pos: list[tuple[str, str]] = field(default_factory=list)  # (case id, reason)
    false_neg: list[str] = field(default_factory=list)
    cost_ns: list[float] = field(default_factory=list)

    @property
    def precision(self) -> float | None:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else None

    @property
    def recall(self) -> float | None:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else None

    @property
    def f1(self) -> float | None:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p and r else None

    def cost_us(self, p: float) -> float | None:
        value = ru.percentile(self.cost_ns, p)
        return None if value is None else value / 1000


def load_cases(path: Path) -> list[Case]:
    """The labelled set; unknown check names in ``expect_fail`` are an error."""
    cases = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        raw = json.loads(line)
        unknown = set(raw["expect_fail"]) - set(CHECK_NAMES)
        if unknown:
            raise ValueError(f"{path}:{n}: unknown checks {sorted(unknown)}")
        cases.append(
            Case(
                raw["id"],
                raw["category"],
                frozenset(raw["expect_fail"]),
                RequestFacts(**raw["facts"]),
                Output(**raw["output"]),
            )
        )
    return cases


# --- scoring ----------------------------------------------------------------------------------


def score(checks: dict[str, Check], cases: Sequence[Case]) -> tuple[dict[str, Score], list[Any]]:
    """Confusion counts per check, and each case's predictions (for raw.json)."""
    scores = {name: Score(name) for name in checks}
    per_case = []
    for case in cases:
        failed: dict[str, str] = {}
        for name, check in checks.items():
            result = check.run(case.output, case.facts)
            if not result.ok:
                failed[name] = result.reason
            _tally(scores[name], case, name in case.expect_fail, failed.get(name))
        per_case.append(
            {
                "id": case.id,
                "category": case.category,
                "expect_fail": sorted(case.expect_fail),
                "failed": failed,
            }
        )
    return scores, per_case


def _tally(s: Score, case: Case, positive: bool, reason: str | None) -> None:
    predicted = reason is not None
    if positive and predicted:
        s.tp += 1
    elif positive:
        s.fn += 1
        s.false_neg.append(case.id)
    elif predicted:
        s.fp += 1
        s.false_pos.append((case.id, reason or ""))
    else:
        s.tn += 1


# --- cost -------------------------------------------------------------------------------------


def _twin(out: Output) -> Output:
    """An equal answer whose text is a distinct object (defeats the identity parse memo)."""
    return Output(out.text.encode("utf-8").decode("utf-8"), out.finish_reason, out.tool_calls)


def time_check(check: Check, case: Case, repeats: int) -> float:
    """Mean nanoseconds per ``check.run`` call on this case (after one warm-up call)."""
    a, b = case.output, _twin(case.output)
    facts, run = case.facts, check.run
    run(a, facts)  # compiles a schema validator once, as the gateway's cache does
    pairs = max(repeats // 2, 1)
    start = time.perf_counter_ns()
    for _ in range(pairs):
        run(a, facts)
        run(b, facts)
    return (time.perf_counter_ns() - start) / (2 * pairs)


def measure_costs(
    checks: dict[str, Check], cases: Sequence[Case], scores: dict[str, Score], repeats: int
) -> None:
    for name, check in checks.items():
        scores[name].cost_ns = [time_check(check, case, repeats) for case in cases]


# --- report -----------------------------------------------------------------------------------

HEADERS = (
    "check",
    "positives",
    "TP",
    "FP",
    "FN",
    "TN",
    "precision",
    "recall",
    "F1",
    "median µs",
    "p95 µs",
    "max µs",
)


def score_rows(scores: dict[str, Score]) -> list[list[object]]:
    return [
        [
            s.check,
            s.tp + s.fn,
            s.tp,
            s.fp,
            s.fn,
            s.tn,
            ru.fmt_frac(s.precision),
            ru.fmt_frac(s.recall),
            ru.fmt_frac(s.f1),
            ru.fmt_num(s.cost_us(50)),
            ru.fmt_num(s.cost_us(95)),
            ru.fmt_num(s.cost_us(100)),
        ]
        for s in scores.values()
    ]


def misclassified(scores: dict[str, Score]) -> str:
    lines = []
    for s in scores.values():
        for cid in s.false_neg:
            lines.append(f"- `{s.check}` missed `{cid}`")
        for cid, reason in s.false_pos:
            lines.append(f"- `{s.check}` flagged `{cid}` (good): {reason}")
    return "\n".join(lines) or "None."


def category_rows(per_case: list[dict[str, Any]]) -> list[list[object]]:
    """Cases per category and how many got every check's verdict right."""
    counts: dict[str, list[int]] = {}
    for c in per_case:
        right = set(c["failed"]) == set(c["expect_fail"])
        entry = counts.setdefault(c["category"], [0, 0])
        entry[0] += 1
        entry[1] += right
    return [[cat, n, ok] for cat, (n, ok) in counts.items()]


def render(scores: dict[str, Score], per_case: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    return (
        "\n\n".join(
            [
                "# Quality checks: precision, recall and cost",
                f"{meta['cases']} labelled cases in {meta['categories']} categories from "
                f"`{meta['data']}`, default `CheckSettings()`; cost: {meta['repeats']} calls "
                "per case and check, µs per call (median/p95/max over the cases). "
                f"{meta['started_utc']}.",
                ru.md_table(HEADERS, score_rows(scores), "lrrrrrrrrrrr"),
                "![precision, recall and cost](checks.png)",
                "## Misclassified cases",
                misclassified(scores),
                "## Per category (cases where every check's verdict matches the label)",
                ru.md_table(("category", "cases", "all right"), category_rows(per_case), "lrr"),
            ]
        )
        + "\n"
    )


def plot(scores: dict[str, Score], path: Path) -> None:
    plt = ru.pyplot()
    names = list(scores)
    xs = range(len(names))
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.5))
    width = 0.38
    left.bar(
        [x - width / 2 for x in xs],
        [scores[n].precision or 0 for n in names],
        width,
        label="precision",
    )
    left.bar(
        [x + width / 2 for x in xs], [scores[n].recall or 0 for n in names], width, label="recall"
    )
    left.set_ylim(0, 1.05)
    left.set_title("precision and recall on the labelled set")
    right.bar(xs, [scores[n].cost_us(50) or 0 for n in names], label="median")
    right.scatter(
        xs,
        [scores[n].cost_us(95) or 0 for n in names],
        color="black",
        zorder=3,
        label="p95",
        marker="_",
        s=200,
    )
    right.set_yscale("log")
    right.set_ylabel("µs per call")
    right.set_title("cost per check")
    for ax in (left, right):
        ax.set_xticks(list(xs), names, rotation=30, ha="right")
        ax.legend()
    ru.save_figure(fig, path)


def raw_json(
    scores: dict[str, Score], per_case: list[dict[str, Any]], meta: dict[str, Any]
) -> dict[str, Any]:
    checks = {
        s.check: {
            "tp": s.tp,
            "fp": s.fp,
            "fn": s.fn,
            "tn": s.tn,
            "precision": s.precision,
            "recall": s.recall,
            "f1": s.f1,
            "cost_us_p50": s.cost_us(50),
            "cost_us_p95": s.cost_us(95),
            "cost_us_max": s.cost_us(100),
            "false_negatives": s.false_neg,
            "false_positives": [{"id": i, "reason": r} for i, r in s.false_pos],
            "cost_ns_per_case": [round(v, 1) for v in s.cost_ns],
        }
        for s in scores.values()
    }
    return {"meta": meta, "checks": checks, "cases": per_case}


# --- entry point ------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m evals checks",
        description="Precision, recall and cost of each quality check.",
    )
    ap.add_argument("--data", type=Path, default=DATA, help="labelled set (.jsonl)")
    ap.add_argument(
        "--out", type=Path, default=None, help="output folder (default results/checks-<UTC stamp>/)"
    )
    ap.add_argument(
        "--repeats",
        type=int,
        default=200,
        help="timed calls per case and check; samples per user kind",
    )
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    out = a.out or ru.default_out("checks")
    cases = load_cases(a.data)
    checks = build_checks(CheckSettings())
    scores, per_case = score(checks, cases)
    measure_costs(checks, cases, scores, max(a.repeats, 2))
    meta = {
        "started_utc": ru.utc_stamp(),
        "data": ru.shown_path(a.data),
        "cases": len(cases),
        "categories": len({c.category for c in cases}),
        "repeats": max(a.repeats, 2),
        "median_text_chars": statistics.median(len(c.output.text) for c in cases),
    }
    kind_costs = user_kinds.measure(max(a.repeats, 2))
    report = (
        render(scores, per_case, meta) + "\n" + user_kinds.section(kind_costs, max(a.repeats, 2))
    )
    raw = {**raw_json(scores, per_case, meta), "user_kinds": user_kinds.raw(kind_costs)}
    ru.write_outputs(out, report + "\n", raw)
    plot(scores, out / "checks.png")
    print(report)
    print(f"written to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
