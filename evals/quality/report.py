"""The Markdown report and the plot of a ``python -m evals quality`` run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evals.quality.metrics import METRIC_NAMES
from evals.report import (
    fmt_frac,
    md_table,
    pyplot,
    save_figure,
)


def render(
    tasks: list[dict[str, Any]],
    rows: list[dict[str, Any]],
    names: list[str],
    meta: dict[str, Any],
    shadow: list[dict[str, Any]] | None,
) -> str:
    fast, std = names[0], names[1]
    head = [
        "task",
        "cases",
        "metric",
        f"{fast} score",
        f"{std} score",
        "alignment F1",
        "identical",
        f"{fast} answered by highspeed",
        "verdict",
    ]
    table = md_table(
        head,
        [
            [
                t["task"],
                t["cases"],
                METRIC_NAMES[t["task"]],
                fmt_frac(t["mean"][fast]),
                fmt_frac(t["mean"][std]),
                fmt_frac(t["align_f1"]),
                fmt_frac(t["exact"]),
                fmt_frac(t["fast_answered_itself"]),
                t["verdict"],
            ]
            for t in tasks
        ],
    )
    lines = [
        f"# Quality: {fast} vs {std}",
        "",
        f"{len(rows)} cases from `{meta['data']}`, greedy decoding; {meta['stamp']}. "
        f"Targets: " + "; ".join(f"{n} = {u}" for n, u in meta["targets"].items()) + ".",
        "",
        table,
        "",
        "![scores per task](quality.png)",
        "",
    ]
    if shadow:
        lines += [
            "## Shadow traffic (live requests re-answered by the standard tier)",
            "",
            md_table(
                ["task", "comparisons", "agree (F1 >= 0.6)", "identical", "mean F1"],
                [
                    [
                        s["task"],
                        s["n"],
                        fmt_frac(s["agree"]),
                        fmt_frac(s["exact"]),
                        fmt_frac(s["f1"]),
                    ]
                    for s in shadow
                ],
            ),
            "",
        ]
    lines += [
        "## Cases",
        "",
        md_table(
            ["case", f"{fast}", f"{std}", "F1", f"{fast} fallback"],
            [
                [
                    r["id"],
                    fmt_frac(r["answers"][fast]["score"]),
                    fmt_frac(r["answers"][std]["score"]),
                    fmt_frac(r["f1"]),
                    (r["answers"][fast].get("fallback") or "")[:60],
                ]
                for r in rows
            ],
        ),
    ]
    return "\n".join(lines) + "\n"


def plot(tasks: list[dict[str, Any]], names: list[str], path: Path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 4))
    xs = range(len(tasks))
    w = 0.28
    for i, n in enumerate(names[:2]):
        ax.bar([x + (i - 1) * w for x in xs], [t["mean"][n] for t in tasks], w, label=n)
    ax.bar([x + w for x in xs], [t["align_f1"] for t in tasks], w, label="alignment F1")
    ax.set_xticks(list(xs), [t["task"] for t in tasks])
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("mean score")
    ax.legend()
    save_figure(fig, path)
