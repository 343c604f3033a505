"""Figures, targets, table and plot of a headline run (:mod:`evals.headline.run`)."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from evals.report import fmt_num, md_table, percentile


def _ms(values: list[float], p: float) -> float | None:
    v = percentile(values, p)
    return None if v is None else v * 1000


def stats(samples: list[Any]) -> dict[str, Any]:
    ok = [s for s in samples if s.ok]
    ttft = [s.ttft_s for s in ok if s.ttft_s is not None]
    lat = [s.latency_s for s in ok]
    tpot = [
        (s.latency_s - s.ttft_s) / (s.tokens - 1)
        for s in ok
        if s.mode == "stream" and s.ttft_s is not None and s.tokens > 1
    ]
    tps = [s.tokens / s.latency_s for s in ok if s.latency_s > 0]
    return {
        "n": len(samples),
        "errors": len(samples) - len(ok),
        "defects": {d: sum(1 for s in ok if s.defect == d) for d in _defect_kinds(ok)},
        "ttft_ms": {p: _ms(ttft, p) for p in (50, 95, 99)},
        "tpot_ms": _ms(tpot, 50),
        "latency_ms": {p: _ms(lat, p) for p in (50, 95, 99)},
        "tokens_per_s": percentile(tps, 50),
        "fallbacks": sum(1 for s in samples if s.fallback),
        "hedges": sum(1 for s in samples if s.hedge),
        "answered_by_standard": sum(1 for s in samples if s.tier == "standard"),
    }


BASE_DEFECTS = ("loop", "leak", "cut")


def _defect_kinds(ok: list[Any]) -> tuple[str, ...]:
    """loop, leak, cut, and the task mix's own where they happened (bad_json, bad_tool)."""
    extra = sorted({s.defect for s in ok if s.defect and s.defect not in BASE_DEFECTS})
    return (*BASE_DEFECTS, *extra)


def _defects(d: dict[str, int]) -> str:
    text = f"{d['loop']}/{d['leak']}/{d['cut']}"
    more = ", ".join(f"{n} {k}" for k, n in d.items() if k not in BASE_DEFECTS and n)
    return f"{text} (+{more})" if more else text


def _check(g: dict[str, Any], fast: dict[str, Any], std: dict[str, Any]) -> list[list[str]]:
    def ok(cond: bool) -> str:
        return "yes" if cond else "**no**"

    rows = []
    ft, gt = fast["ttft_ms"][50], g["ttft_ms"][50]
    if ft and gt:
        rows.append(
            [
                "TTFT p50 <= 1.5x fast (or +10 ms)",
                f"{gt:.0f} vs {ft:.0f} ms",
                ok(gt <= max(1.5 * ft, ft + 10)),
            ]
        )
    fl, gl = fast["latency_ms"][50], g["latency_ms"][50]
    if fl and gl:
        rows.append(["latency p50 <= 1.2x fast", f"{gl:.0f} vs {fl:.0f} ms", ok(gl <= 1.2 * fl)])
    fs, gs = fast["tokens_per_s"], g["tokens_per_s"]
    if fs and gs:
        rows.append(["tokens/s >= 0.85x fast", f"{gs:.0f} vs {fs:.0f}", ok(gs >= 0.85 * fs)])
    sp, gp = std["latency_ms"][99], g["latency_ms"][99]
    if sp and gp:
        rows.append(["latency p99 <= standard's", f"{gp:.0f} vs {sp:.0f} ms", ok(gp <= sp)])
    bad = sum(g["defects"].values()) + g["errors"]
    rows.append(["no defective answer, no error", f"{bad}", ok(bad == 0)])
    return rows


def _table(cells: dict[str, dict[str, dict[str, Any]]], names: list[str]) -> str:
    rows = []
    for key, by_target in cells.items():
        for name in names:
            st = by_target[name]
            d = st["defects"]
            extra = (
                f"{st['fallbacks']} fb, {st['hedges']} hedges, {st['answered_by_standard']} by std"
                if name.startswith("gateway")
                else ""
            )
            rows.append(
                [
                    key,
                    name,
                    fmt_num(st["ttft_ms"][50]),
                    fmt_num(st["ttft_ms"][99]),
                    fmt_num(st["tpot_ms"]),
                    fmt_num(st["latency_ms"][50]),
                    fmt_num(st["latency_ms"][95]),
                    fmt_num(st["latency_ms"][99]),
                    fmt_num(st["tokens_per_s"]),
                    _defects(d),
                    str(st["errors"]),
                    extra,
                ]
            )
    head = [
        "cell",
        "target",
        "TTFT p50 ms",
        "TTFT p99 ms",
        "TPOT p50 ms",
        "lat p50 ms",
        "lat p95 ms",
        "lat p99 ms",
        "tok/s p50",
        "defects loop/leak/cut (+more)",
        "errors",
        "standard's extra load",
    ]
    return md_table(head, rows)


def _plot(cells: dict[str, dict[str, dict[str, Any]]], names: list[str], path: Path) -> bool:
    try:
        from evals.report import pyplot, save_figure

        plt = pyplot()
    except ImportError:
        return False
    fig, axes = plt.subplots(1, len(cells), figsize=(4.2 * len(cells), 3.6), squeeze=False)
    for ax, (key, by_target) in zip(axes[0], cells.items(), strict=True):
        xs = range(len(names))
        for p, alpha in ((50, 1.0), (99, 0.35)):
            ax.bar(
                xs,
                [by_target[n]["latency_ms"][p] or 0 for n in names],
                alpha=alpha,
                label=f"latency p{p}",
            )
        ax.scatter(
            xs,
            [by_target[n]["ttft_ms"][50] or 0 for n in names],
            color="k",
            zorder=3,
            label="TTFT p50",
        )
        ax.set_xticks(list(xs), [n.replace(" ", "\n", 1) for n in names], fontsize=7)
        ax.set_yscale("log")
        ax.set_title(key, fontsize=9)
        ax.set_ylabel("ms")
    axes[0][0].legend(fontsize=7)
    save_figure(fig, path)
    return True


def _load_table(
    samples: list[Any], load: dict[str, tuple[int, int]], gateways: list[str]
) -> list[str]:
    """The standard tier's own counters per cell, less what its raw target asked of it."""
    rows = []
    for key, (requests, tokens) in load.items():
        mode, c = key.split(" c=")
        cell = [s for s in samples if s.mode == mode and s.clients == int(c)]
        raw = [s for s in cell if s.target == "standard (raw)"]
        asked = sum(1 for s in cell if s.target in gateways)
        extra = requests - len(raw), tokens - sum(s.tokens for s in raw)
        rows.append(
            [
                key,
                f"{requests} / {tokens:,}",
                f"{len(raw)} / {tokens - extra[1]:,}",
                f"{extra[0]} / {extra[1]:,}",
                f"{extra[0] / max(1, asked):.0%}",
            ]
        )
    if not rows:
        return []
    head = [
        "cell",
        "standard tier: requests / tokens generated",
        "its raw target's",
        f"the gateways' ({', '.join(gateways)})",
        "per gateway request",
    ]
    return [
        "The standard tier's load, from its own counters (`sglang:num_requests_total`, "
        "`sglang:generation_tokens_total`) before and after each cell: fallbacks, hedges "
        "(won or lost), continuations, and continuations opened ahead of a candidate loop "
        "and dropped, all included.",
        "",
        md_table(head, rows),
        "",
    ]


def _kinds(samples: list[Any], names: list[str], clients: int) -> list[str]:
    """The task mix per kind of request, at ``clients``: latency p50/p99 and defects."""
    kinds = sorted({s.kind for s in samples})
    if kinds == ["chat"]:
        return []
    rows = []
    for mode in sorted({s.mode for s in samples}, reverse=True):
        for kind in kinds:
            row = [f"{mode} c={clients}", kind]
            for name in names:
                st = stats(
                    [
                        s
                        for s in samples
                        if s.target == name
                        and s.kind == kind
                        and s.mode == mode
                        and s.clients == clients
                    ]
                )
                lat = st["latency_ms"]
                bad = sum(st["defects"].values()) + st["errors"]
                row.append(f"{fmt_num(lat[50])} / {fmt_num(lat[99])} ({bad})")
            rows.append(row)
    return [
        "Per kind of request: latency p50 / p99 ms (defective answers and errors):",
        "",
        md_table(["cell", "kind", *names], rows),
        "",
    ]


def _slowest(samples: list[Any], cells: dict[str, Any], n: int = 3) -> list[str]:
    """The gateway's slowest answers per cell and what its headers said about them, next to
    the standard tier's slowest: the tail, explained."""
    rows = []
    for key in cells:
        mode, c = key.split(" c=")
        cell = [s for s in samples if s.ok and s.mode == mode and s.clients == int(c)]
        for target in ("gateway", "standard (raw)"):
            mine = sorted((s for s in cell if s.target == target), key=lambda s: -s.latency_s)
            for s in mine[:n]:
                why = "; ".join(f"{k.removeprefix('x-gateway-')}: {v}" for k, v in s.why.items())
                ttft = f"{s.ttft_s * 1000:,.0f}" if s.ttft_s is not None else "-"
                lat = f"{s.latency_s * 1000:,.0f}"
                rows.append([key, target, str(s.index), lat, ttft, str(s.tokens), s.tier or "-"])
                rows[-1].append(why or "-")
    if not rows:
        return []
    head = ["cell", "target", "prompt", "latency ms", "TTFT ms", "tokens", "tier", "why"]
    return [
        f"The {n} slowest answers per cell, through the gateway (its headers and trailing "
        "comments) and from the standard tier raw:",
        "",
        md_table(head, rows),
        "",
    ]


def report(
    samples: list[Any],
    names: list[str],
    a: argparse.Namespace,
    out: Path,
    load: dict[str, tuple[int, int]] | None = None,
) -> str:
    cells: dict[str, dict[str, dict[str, Any]]] = {}
    for s in samples:
        cells.setdefault(f"{s.mode} c={s.clients}", {}).setdefault(s.target, [])  # type: ignore[arg-type]
    for key in cells:
        mode, c = key.split(" c=")
        cells[key] = {
            n: stats(
                [s for s in samples if s.target == n and s.mode == mode and s.clients == int(c)]
            )
            for n in names
        }
    lines = [
        "# Headline: the fast tier's speed through the gateway, with the standard's reliability",
        "",
        f"`python -m evals headline --mix {getattr(a, 'mix', 'chat')} --engines {a.engines} "
        f"--requests {a.requests} "
        f"--clients {a.clients} --modes {a.modes} --faults {a.faults} "
        f"--fault-draw {a.fault_draw} --time-scale {a.time_scale}`; targets interleaved "
        "request by request in one run.",
        "",
        _table(cells, names),
        "",
    ]
    for key, by_target in cells.items():
        if not key.endswith(f"c={max(int(c) for c in a.clients.split(','))}"):
            continue
        lines += [
            f"Targets, {key}, gateway vs the tiers raw:",
            "",
            md_table(
                ["target", "measured", "met"],
                _check(by_target["gateway"], by_target["fast (raw)"], by_target["standard (raw)"]),
            ),
            "",
        ]
    lines += _kinds(samples, names, max(int(c) for c in a.clients.split(",")))
    lines += _load_table(samples, load or {}, [n for n in names if n.startswith("gateway")])
    lines += _slowest(samples, cells)
    if _plot(cells, names, out / "headline.png"):
        lines += ["![latency and TTFT per target](headline.png)", ""]
    text = "\n".join(lines)
    (out / "headline.md").write_text(text)
    raw = {
        "args": vars(a) | {"out": str(a.out)},
        "cells": cells,
        "standard_load": load or {},
        "samples": [asdict(s) for s in samples],
    }
    (out / "headline.json").write_text(json.dumps(raw, indent=1, default=str))
    return text
