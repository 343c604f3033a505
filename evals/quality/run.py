"""``python -m evals quality``: both tiers on the shipped eval set, side by side.

Every case of ``evals/data/quality_set.jsonl`` (chat, reasoning, code, extraction, tool
calls, summarization) is answered by each target with greedy decoding, and scored with
its task's metric:

* chat — share of the expected keywords present; reasoning — the last number equals
  the expected one; code — the share of its unit tests that pass (the answer's code is
  run in a subprocess with a timeout); extraction — JSON valid, schema valid, share of
  fields exactly right; tools — right function, arguments valid JSON, share of arguments
  right; summarization — token F1 against a reference summary.

Then the two targets' answers are compared with each other (exact match and token F1:
alignment), and each task gets a verdict: the fast tier is fit for it when its mean
score is within ``--tolerance`` of the standard tier's and the answers align.

``--shadow URL`` adds the gateway's own shadow comparisons (live traffic sampled to the
standard tier, ``GET /admin/shadow``) per task.
"""

from __future__ import annotations

import argparse
import json
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from evals import data
from evals.quality.metrics import METRICS, answer_key
from evals.quality.report import plot, render
from evals.report import (
    default_out,
    progress,
    shown_path,
    utc_stamp,
    write_outputs,
)
from evals.speed.targets import Target, parse_target
from gateway.dispatch.shadow import token_f1

DATA = data.DIR / "quality_set.jsonl"
DEFAULT_TARGETS = [
    "fast=http://127.0.0.1:8080/v1,x-gateway-tier:highspeed",
    "standard=http://127.0.0.1:8080/v1,x-gateway-tier:standard",
]


def ask(target: Target, body: dict[str, Any], api_key: str, timeout: float) -> dict[str, Any]:
    """One non-streamed request: the answer, tool calls, the tier that answered, or an error."""
    headers = {
        "Content-Type": "application/json",
        "Authorization": f"Bearer {api_key}",
        **dict(target.headers),
    }
    req = urllib.request.Request(target.url(body), data=json.dumps(body).encode(), headers=headers)
    t0 = time.perf_counter()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            data = json.loads(r.read())
            tier = r.headers.get("x-gateway-tier")
            fallback = r.headers.get("x-gateway-fallback")
    except urllib.error.HTTPError as e:
        return {"error": f"HTTP {e.code}", "seconds": time.perf_counter() - t0}
    except (OSError, ValueError) as e:
        return {"error": type(e).__name__, "seconds": time.perf_counter() - t0}
    msg = (data.get("choices") or [{}])[0].get("message") or {}
    return {
        "text": msg.get("content") or "",
        "tool_calls": msg.get("tool_calls") or [],
        "tier": tier,
        "fallback": fallback,
        "seconds": time.perf_counter() - t0,
    }


def run(
    cases: list[dict[str, Any]],
    targets: list[Target],
    api_key: str,
    workers: int,
    timeout: float,
    show: bool,
) -> list[dict[str, Any]]:
    jobs = [(c, t) for c in cases for t in targets]
    bar = progress(len(jobs), "quality", show)
    with ThreadPoolExecutor(workers) as ex:
        futures = {
            (c["id"], t.name): ex.submit(ask, t, c["body"], api_key, timeout) for c, t in jobs
        }
        answers: dict[tuple[str, str], dict[str, Any]] = {}
        for key, fut in futures.items():
            answers[key] = fut.result()
            bar.update(1)
    bar.close()
    rows = []
    for c in cases:
        row: dict[str, Any] = {"id": c["id"], "task": c["task"], "answers": {}}
        for t in targets:
            ans = answers[(c["id"], t.name)]
            ans["score"] = 0.0 if "error" in ans else METRICS[c["task"]](ans, c["expect"])
            row["answers"][t.name] = ans
        a, b = (row["answers"][t.name] for t in targets[:2])
        ka, kb = answer_key(a), answer_key(b)
        row["exact"] = ka.strip() == kb.strip() and "error" not in a
        row["f1"] = token_f1(ka, kb)
        rows.append(row)
    return rows


def per_task(
    rows: list[dict[str, Any]], names: list[str], tolerance: float, min_align: float
) -> list[dict[str, Any]]:
    out = []
    for task in METRICS:
        sel = [r for r in rows if r["task"] == task]
        if not sel:
            continue
        mean = {n: sum(r["answers"][n]["score"] for r in sel) / len(sel) for n in names}
        fast, std = names[0], names[1]
        own = sum(r["answers"][fast].get("tier") in (None, "highspeed") for r in sel) / len(sel)
        align = sum(r["f1"] for r in sel) / len(sel)
        exact = sum(r["exact"] for r in sel) / len(sel)
        fit = mean[fast] >= mean[std] - tolerance and align >= min_align
        out.append(
            {
                "task": task,
                "cases": len(sel),
                "mean": mean,
                "align_f1": align,
                "exact": exact,
                "fast_answered_itself": own,
                "verdict": "fast tier OK" if fit else "keep on standard",
            }
        )
    return out


def shadow_summary(url: str, token: str) -> list[dict[str, Any]]:
    req = urllib.request.Request(
        f"{url.rstrip('/')}/admin/shadow?limit=5000", headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        recs = json.loads(r.read())["data"]
    tasks: dict[str, list[dict[str, Any]]] = {}
    for rec in recs:
        tasks.setdefault(rec["task"], []).append(rec)
    return [
        {
            "task": t,
            "n": len(rs),
            "agree": sum(r["agree"] for r in rs) / len(rs),
            "exact": sum(r["exact"] for r in rs) / len(rs),
            "f1": sum(r["f1"] for r in rs) / len(rs),
        }
        for t, rs in sorted(tasks.items())
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m evals quality", description=__doc__)
    ap.add_argument(
        "--target",
        action="append",
        type=parse_target,
        help="NAME=BASE_URL[,header:value...] (twice: fast tier first)",
    )
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--api-key", default="unused")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument(
        "--tolerance",
        type=float,
        default=0.05,
        help="how far below standard the fast tier's mean score may be",
    )
    ap.add_argument("--min-alignment", type=float, default=0.5)
    ap.add_argument(
        "--shadow", default=None, help="the admin API's URL (:8081): include /admin/shadow"
    )
    ap.add_argument("--admin-token", default="")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--no-progress", action="store_true")
    a = ap.parse_args(argv)
    targets: list[Target] = a.target or [parse_target(s) for s in DEFAULT_TARGETS]
    if len(targets) != 2:
        ap.error("give exactly two --target (the fast tier first)")
    cases = [json.loads(x) for x in a.data.read_text(encoding="utf-8").splitlines() if x]
    names = [t.name for t in targets]
    rows = run(cases, targets, a.api_key, a.workers, a.timeout, not a.no_progress)
    tasks = per_task(rows, names, a.tolerance, a.min_alignment)
    shadow = shadow_summary(a.shadow, a.admin_token) if a.shadow else None
    out = a.out or default_out("quality")
    meta = {
        "stamp": utc_stamp(),
        "data": shown_path(a.data),
        "targets": {
            t.name: t.base_url + "".join(f" [{k}: {v}]" for k, v in t.headers) for t in targets
        },
    }
    report = render(tasks, rows, names, meta, shadow)
    write_outputs(out, report, {"meta": meta, "tasks": tasks, "cases": rows, "shadow": shadow})
    plot(tasks, names, out / "quality.png")
    print(report.split("## Cases")[0])
    print(f"written to {shown_path(out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
