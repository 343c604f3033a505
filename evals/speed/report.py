"""Summaries, tables and plots of a ``python -m evals speed`` run."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from evals import report as ru
from evals.speed.load import Runner
from evals.speed.stream import Sample
from evals.speed.targets import Target

METRICS = (  # (key, column title, unit) in table order
    ("ttft_p50", "TTFT p50", "ms"),
    ("ttft_p95", "TTFT p95", "ms"),
    ("ttft_p99", "TTFT p99", "ms"),
    ("tpot_p50", "TPOT p50", "ms"),
    ("tpot_p95", "TPOT p95", "ms"),
    ("latency_p50", "latency p50", "ms"),
    ("latency_p95", "latency p95", "ms"),
    ("latency_p99", "latency p99", "ms"),
    ("tok_s", "tok/s", ""),
    ("req_s", "req/s", ""),
)
SENTENCE = (
    ("ttft_p50", "TTFT p50"),
    ("tpot_p50", "TPOT"),
    ("latency_p50", "latency p50"),
    ("tok_s", "tok/s"),
    ("req_s", "req/s"),
)


def _ms(values: list[float], p: float) -> float | None:
    v = ru.percentile(values, p)
    return None if v is None else v * 1000


def summarize(samples: list[Sample], elapsed: float) -> dict[str, Any]:
    """Percentiles (ms) over the good requests, aggregate rates, error counts."""
    good = [s for s in samples if s.ok]
    ttft = [s.ttft for s in good if s.ttft is not None]
    tpot = [s.tpot for s in good if s.tpot is not None]
    lat = [s.latency for s in good if s.latency is not None]
    errors: dict[str, int] = {}
    for s in samples:
        if s.error:
            errors[s.error] = errors.get(s.error, 0) + 1
    tiers: dict[str, int] = {}
    for s in good:
        if tier := s.headers.get("x-gateway-tier"):
            tiers[tier] = tiers.get(tier, 0) + 1
    tokens = sum(s.tokens for s in good)
    out: dict[str, Any] = {
        "requests": len(samples),
        "ok": len(good),
        "errors": errors,
        "elapsed_s": elapsed,
        "output_tokens": tokens,
        "tiers": tiers,
        "fallbacks": sum("x-gateway-fallback" in s.headers for s in good),
    }
    for p in (50, 95, 99):
        out[f"ttft_p{p}"], out[f"latency_p{p}"] = _ms(ttft, p), _ms(lat, p)
    out["tpot_p50"], out["tpot_p95"] = _ms(tpot, 50), _ms(tpot, 95)
    out["tok_s"] = tokens / elapsed if elapsed > 0 else None
    out["req_s"] = len(good) / elapsed if elapsed > 0 else None
    return out


def summaries(
    r: Runner, targets: Sequence[Target], cells: Sequence[str]
) -> dict[str, dict[str, dict[str, Any]]]:
    """cell -> target -> summary."""
    return {
        cell: {
            t.name: summarize(
                [s for s in r.samples if s.cell == cell and s.target == t.name],
                r.elapsed.get((t.name, cell), 0),
            )
            for t in targets
        }
        for cell in cells
    }


# --- report -----------------------------------------------------------------------------------


def _errors_text(errors: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(errors.items())) or "0"


def cell_table(cell: dict[str, dict[str, Any]]) -> str:
    names = list(cell)
    rows: list[list[object]] = [
        [
            name,
            f"{s['ok']}/{s['requests']}",
            *(ru.fmt_num(s[k]) for k, _, _ in METRICS),
            _errors_text(s["errors"]),
        ]
        for name, s in cell.items()
    ]
    if len(names) >= 2:
        a, b = cell[names[0]], cell[names[1]]
        rows.append(
            [f"{names[0]}/{names[1]}", "", *(ru.fmt_ratio(a[k], b[k]) for k, _, _ in METRICS), ""]
        )
    headers = ["target", "ok/n", *(f"{t} ({u})" if u else t for _, t, u in METRICS), "errors"]
    return ru.md_table(headers, rows, "lr" + "r" * len(METRICS) + "l")


def ratio_sentence(cell: dict[str, dict[str, Any]]) -> str:
    names = list(cell)
    if len(names) < 2:
        return ""
    a, b = cell[names[0]], cell[names[1]]
    parts = ", ".join(f"{label} {ru.fmt_ratio(a[k], b[k])}" for k, label in SENTENCE)
    return f"{names[0]}/{names[1]}: {parts}"


def tiers_sentence(cell: dict[str, dict[str, Any]]) -> str:
    parts = []
    for name, s in cell.items():
        if s["tiers"]:
            tiers = ", ".join(f"{t} {n}" for t, n in sorted(s["tiers"].items()))
            parts.append(f"{name}: {tiers} ({s['fallbacks']} fell back)")
    return "answered by (x-gateway-tier): " + "; ".join(parts) if parts else ""


def cell_title(cell: str, meta: dict[str, Any]) -> str:
    if cell == "replay":
        return f"### replay (open loop, {meta['replay_entries']} requests per target)"
    amount = f"{meta['requests']} requests" if meta["duration"] is None else f"{meta['duration']} s"
    return f"### concurrency {cell[2:]} ({amount} per target, {meta['rounds']} rounds)"


def render(sums: dict[str, dict[str, dict[str, Any]]], meta: dict[str, Any]) -> str:
    parts = [
        "# Speed: TTFT, TPOT, throughput",
        f"{meta['started_utc']}, {meta['host']}; model `{meta['model']}`; prompts "
        f"`{meta['prompts']}`. Times in ms, percentiles over successful requests, tok/s "
        "and req/s aggregate over the cell's wall time.",
        ru.md_table(
            ("target", "base URL", "headers"),
            [(t["name"], t["base_url"], ", ".join(t["headers"]) or "-") for t in meta["targets"]],
        ),
    ]
    for cell, per_target in sums.items():
        parts += [cell_title(cell, meta), cell_table(per_target)]
        parts += [line for line in (ratio_sentence(per_target), tiers_sentence(per_target)) if line]
    parts.append("![latency](latency.png)\n\n![throughput](throughput.png)")
    return "\n\n".join(parts) + "\n"


def _series(sums: dict[str, dict[str, dict[str, Any]]], target: str, key: str) -> list[float]:
    return [float("nan") if (v := sums[c][target][key]) is None else v for c in sums]


def plot(sums: dict[str, dict[str, dict[str, Any]]], targets: Sequence[str], out: Path) -> None:
    """latency.png (TTFT, TPOT, latency percentiles) and throughput.png, x = cell."""
    plt = ru.pyplot()
    cells = list(sums)
    xlabel = "open-loop replay" if cells == ["replay"] else "concurrency (closed loop)"
    panels = (
        ("TTFT (ms)", "ttft", (50, 95, 99)),
        ("TPOT (ms)", "tpot", (50, 95)),
        ("latency (ms)", "latency", (50, 95, 99)),
    )
    styles = {50: "-", 95: "--", 99: ":"}
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for ax, (title, key, ps) in zip(axes, panels, strict=True):
        for i, name in enumerate(targets):
            for p in ps:
                ax.plot(
                    cells,
                    _series(sums, name, f"{key}_p{p}"),
                    styles[p],
                    marker="o",
                    color=f"C{i}",
                    label=f"{name} p{p}",
                )
        _decorate(ax, title, xlabel)
    ru.save_figure(fig, out / "latency.png")
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, (title, key) in zip(
        axes, (("output tokens/s", "tok_s"), ("requests/s", "req_s")), strict=True
    ):
        for i, name in enumerate(targets):
            ax.plot(cells, _series(sums, name, key), marker="o", color=f"C{i}", label=name)
        _decorate(ax, title, xlabel)
    ru.save_figure(fig, out / "throughput.png")


def _decorate(ax: Any, title: str, xlabel: str) -> None:
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
