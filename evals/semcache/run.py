"""The semantic cache on labelled prompt pairs: false hits and hit rate per threshold.

    python -m evals semcache [--data evals/data/semantic_pairs.jsonl] [--out docs/reports]

Each pair's first prompt is stored, its second looked up, through the gateway's own code:
the local embedder (all-MiniLM-L6-v2, :mod:`gateway.cache.minilm`), the index's float16
records and :func:`gateway.cache.semantic.best` — threshold and guard. A ``same`` pair that
matches is a hit; a ``different`` pair that matches is a false hit (the cache would answer
another question). Reported with the guard (what the gateway does) and without it (the
threshold alone, as a plain semantic cache does), overall and per kind of pair, and the
embedder's time per prompt on this machine. Writes ``semantic-cache.md`` under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from evals import data

DATA = data.DIR / "semantic_pairs.jsonl"
THRESHOLDS = (0.8, 0.85, 0.9, 0.93, 0.95, 0.97)
SHIPPED = 0.9  # gateway.rules.cache.SemanticCache.threshold's default


def judge(rows: list[dict[str, Any]], vecs: Any, threshold: float, guard: bool) -> list[bool]:
    """Per pair: whether the lookup of ``b`` finds the stored ``a``."""
    from gateway.cache.guard import signature
    from gateway.cache.semantic import best, record

    out = []
    for i, r in enumerate(rows):
        a, b = vecs[2 * i], vecs[2 * i + 1]
        sig_a, sig_b = signature(r["a"]), signature(r["b"])
        if not guard:
            sig_a = sig_b = ()
        out.append(best(b, sig_b, [("a", record(sig_a, a))], threshold) is not None)
    return out


def rates(rows: list[dict[str, Any]], matched: list[bool]) -> tuple[float, float, int, int]:
    same = [m for r, m in zip(rows, matched, strict=True) if r["label"] == "same"]
    diff = [m for r, m in zip(rows, matched, strict=True) if r["label"] == "different"]
    return sum(same) / len(same), sum(diff) / len(diff), sum(same), sum(diff)


def report(rows: list[dict[str, Any]], vecs: Any, embed_ms: list[float]) -> str:
    n_same = sum(r["label"] == "same" for r in rows)
    n_diff = len(rows) - n_same
    lines = [
        "# Semantic cache: false hits and hit rate on labelled pairs",
        "",
        f"`python -m evals semcache`: {len(rows)} hand-written pairs "
        f"(`evals/data/semantic_pairs.jsonl`): {n_same} near duplicates (`same`: one answer "
        f"serves both) and {n_diff} different questions (`different`, most of them hard: the "
        "same words reversed, a negation, another number, entity or task). The first prompt "
        "of a pair is stored, the second looked up through the gateway's code (local "
        "all-MiniLM-L6-v2, float16 records, `gateway.cache.semantic.best`).",
        "",
        "| threshold | guard | hit rate (same) | false-hit rate (different) |",
        "|---|---|---|---|",
    ]
    for th in THRESHOLDS:
        for guard in (True, False):
            hit, false, nh, nf = rates(rows, judge(rows, vecs, th, guard))
            mark = " **(shipped)**" if guard and th == SHIPPED else ""
            lines.append(
                f"| {th}{mark} | {'on' if guard else 'off'} | {hit:.1%} ({nh}/{n_same}) "
                f"| {false:.1%} ({nf}/{n_diff}) |"
            )
    lines += ["", f"Per kind of pair at the shipped threshold {SHIPPED}:", ""]
    lines += ["| label | kind | pairs | matched, guard on | matched, guard off |"]
    lines += ["|---|---|---|---|---|"]
    on, off = judge(rows, vecs, SHIPPED, True), judge(rows, vecs, SHIPPED, False)
    kinds: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0])
    for r, a, b in zip(rows, on, off, strict=True):
        k = kinds[(r["label"], r["kind"])]
        k[0], k[1], k[2] = k[0] + 1, k[1] + a, k[2] + b
    for (label, kind), (n, with_guard, without) in sorted(kinds.items()):
        lines.append(f"| {label} | {kind} | {n} | {with_guard} | {without} |")
    p50 = statistics.median(embed_ms)
    lines += [
        "",
        f"The local embedder: {p50:.1f} ms per prompt (median over {len(embed_ms)}, one BLAS "
        "thread, this shared 2-core machine).",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m evals semcache", description=__doc__)
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--out", type=Path, default=Path("docs/reports"))
    a = ap.parse_args(argv)
    from gateway.settings import pin_blas_threads

    pin_blas_threads(1)
    import numpy as np

    from gateway.cache.minilm import MiniLM

    rows = [json.loads(line) for line in a.data.read_text().splitlines() if line.strip()]
    model = MiniLM()
    vecs, took = [], []
    for r in rows:
        for text in (r["a"], r["b"]):
            t0 = time.perf_counter()
            vecs.append(model.embed([text])[0])
            took.append((time.perf_counter() - t0) * 1000)
    text = report(rows, np.stack(vecs), took)
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "semantic-cache.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
