"""Summaries, product-target verdicts and Markdown tables of a proxy benchmark run.

Every cell (target x scenario) holds several runs; a cell's figure is the median over its
clean runs (all runs when none is clean), shown as ``median (min-max)``. Overheads are
differences of medians against ``direct`` at the same scenario.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

Summary = dict[str, dict[str, dict[str, Any]]]  # target -> scenario id -> cell summary
PROXIES = ("relay", "gateway", "sglang-router")
ROUTER = "sglang-router"
STAT_KEYS = (
    "rps",
    "lat_p50_ms",
    "lat_p95_ms",
    "lat_p99_ms",
    "ttfb_p50_ms",
    "ttfb_p95_ms",
    "ttfb_p99_ms",
    "self_overhead_p50_ms",
    "foreign_cpu_pct",
)
ADDED_LATENCY_MAX = 1.5  # gateway_added / relay_added at c=1, non-streamed
STREAM_ADDED_MAX_MS = 1.0  # gateway_added at c=1, streamed (TTFB and total)
THROUGHPUT_MIN = {False: 0.6, True: 0.5}  # gateway / relay req/s at the highest concurrency
ROUTER_MIN = {False: 0.5, True: 1.0}  # gateway / sglang-router req/s, same cores
_DASH = "\N{EN DASH}"


@dataclass(frozen=True)
class Row:
    label: str
    scenario: str
    key: str
    digits: int

    @property
    def is_rps(self) -> bool:
        return self.key == "rps"


def scenario_id(stream: bool, clients: int) -> str:
    return f"{'st' if stream else 'ns'}_c{clients}"


def table_rows(scenarios: list[dict[str, Any]]) -> list[Row]:
    rows = []
    for s in scenarios:
        sid, c = s["id"], s["clients"]
        if s["stream"]:
            for what, key in (("TTFB", "ttfb"), ("total", "lat")):
                rows += [
                    Row(f"stream c={c} {what} {p} ms", sid, f"{key}_{p}_ms", 3)
                    for p in ("p50", "p95", "p99")
                ]
            rows.append(Row(f"stream c={c} streams/s", sid, "rps", 0))
        else:
            rows += [
                Row(f"non-stream c={c} {p} ms", sid, f"lat_{p}_ms", 3)
                for p in ("p50", "p95", "p99")
            ]
            rows.append(Row(f"non-stream c={c} req/s", sid, "rps", 0))
    return rows


def _stat(runs: list[dict[str, Any]], key: str) -> dict[str, float] | None:
    vals = [r[key] for r in runs if r.get(key) is not None]
    if not vals:
        return None
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals), "n": len(vals)}


def summarize(results: dict[str, dict[str, list[dict[str, Any]]]]) -> Summary:
    summary: Summary = {}
    for target, cells in results.items():
        for sid, runs in cells.items():
            if not runs:
                continue
            use = [r for r in runs if r["clean"]] or runs
            cell: dict[str, Any] = {k: _stat(use, k) for k in STAT_KEYS}
            cell["runs_clean"] = sum(1 for r in runs if r["clean"])
            cell["runs_total"] = len(runs)
            errors: dict[str, int] = {}
            for r in runs:
                for kind, n in r["errors"].items():
                    errors[kind] = errors.get(kind, 0) + n
            cell["errors"] = errors
            cell["cpu_busy_pct"] = {
                c: statistics.median(r["cpu_busy_pct"][c] for r in use)
                for c in use[0]["cpu_busy_pct"]
            }
            summary.setdefault(target, {})[sid] = cell
    return summary


def _median(summary: Summary, target: str, sid: str, key: str) -> float | None:
    stat = summary.get(target, {}).get(sid, {}).get(key)
    return None if stat is None else float(stat["median"])


def _added(summary: Summary, target: str, sid: str, key: str) -> float | None:
    v, d = _median(summary, target, sid, key), _median(summary, "direct", sid, key)
    return None if v is None or d is None else v - d


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b <= 0 else a / b


def _latency_verdicts(summary: Summary, ids: set[str]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    checks = [
        ("non-stream p50", "ns_c1", "lat_p50_ms", "ratio"),
        ("stream TTFB p50", "st_c1", "ttfb_p50_ms", "ms"),
        ("stream total p50", "st_c1", "lat_p50_ms", "ms"),
        ("non-stream p99", "ns_c1", "lat_p99_ms", None),
    ]
    for label, sid, key, judged in checks:
        if sid not in ids:
            continue
        relay, gw = _added(summary, "relay", sid, key), _added(summary, "gateway", sid, key)
        ratio = _ratio(gw, relay)
        if judged == "ratio":
            target = f"<= {ADDED_LATENCY_MAX:g}"
            ok = ratio is not None and ratio <= ADDED_LATENCY_MAX
        elif judged == "ms":
            target = f"gateway added < {STREAM_ADDED_MAX_MS:g} ms"
            ok = gw is not None and gw < STREAM_ADDED_MAX_MS
        else:
            target, ok = "info", None
        out.append(
            {
                "name": f"added latency at c=1, {label}: gateway_added / relay_added",
                "relay_added_ms": relay,
                "gateway_added_ms": gw,
                "value": ratio,
                "target": target,
                "ok": ok,
            }
        )
    return out


def verdicts(summary: Summary, scenarios: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The figures the product is judged by, each with its target and whether it is met."""
    ids = {s["id"] for s in scenarios}
    out = _latency_verdicts(summary, ids)
    top = max((s["clients"] for s in scenarios), default=0)
    for stream, label in ((False, "non-stream"), (True, "stream")):
        sid = scenario_id(stream, top)
        if sid not in ids:
            continue
        gw = _median(summary, "gateway", sid, "rps")
        for peer, mins in (("relay", THROUGHPUT_MIN), (ROUTER, ROUTER_MIN)):
            if peer not in summary:
                continue
            other = _median(summary, peer, sid, "rps")
            ratio = _ratio(gw, other)
            out.append(
                {
                    "name": f"throughput at c={top}, {label}: gateway / {peer} req/s",
                    "peer": peer,
                    "peer_rps": other,
                    "gateway_rps": gw,
                    "value": ratio,
                    "target": f">= {mins[stream]:g}",
                    "ok": ratio is not None and ratio >= mins[stream],
                }
            )
    return out


def _fmt(stat: dict[str, float] | None, digits: int) -> str:
    if not stat:
        return "n/a"
    return f"{stat['median']:.{digits}f} ({stat['min']:.{digits}f}{_DASH}{stat['max']:.{digits}f})"


def _table(header: list[str], body: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(r) + " |" for r in body]


def _added_cell(summary: Summary, target: str, row: Row) -> str:
    if row.is_rps:
        pct = _ratio(
            _median(summary, target, row.scenario, "rps"),
            _median(summary, "direct", row.scenario, "rps"),
        )
        return "n/a" if pct is None else f"{pct * 100:.1f}% of direct"
    added = _added(summary, target, row.scenario, row.key)
    return "n/a" if added is None else f"{added:+.3f}"


def _gw_vs(summary: Summary, row: Row, peer: str) -> str:
    if row.is_rps:
        r = _ratio(
            _median(summary, "gateway", row.scenario, "rps"),
            _median(summary, peer, row.scenario, "rps"),
        )
    else:
        r = _ratio(
            _added(summary, "gateway", row.scenario, row.key),
            _added(summary, peer, row.scenario, row.key),
        )
    return "n/a" if r is None else f"{r:.2f}"


def _verdict_line(v: dict[str, Any]) -> str:
    mark = {True: "MET", False: "MISSED", None: "info"}[v["ok"]]
    value = "n/a" if v["value"] is None else f"{v['value']:.2f}"
    if "relay_added_ms" in v:
        parts = [
            f"relay {v['relay_added_ms']:+.3f} ms"
            if v["relay_added_ms"] is not None
            else "relay n/a",
            f"gateway {v['gateway_added_ms']:+.3f} ms"
            if v["gateway_added_ms"] is not None
            else "gateway n/a",
        ]
    else:
        peer = v["peer"]
        parts = [
            f"{peer} {v['peer_rps']:.0f}/s" if v["peer_rps"] is not None else f"{peer} n/a",
            f"gateway {v['gateway_rps']:.0f}/s" if v["gateway_rps"] is not None else "gateway n/a",
        ]
    target = "" if v["target"] == "info" else f" (target {v['target']})"
    return f"- {v['name']}: {', '.join(parts)} -> **{value}**{target}: {mark}"


def render(summary: Summary, meta: dict[str, Any]) -> str:
    targets = [t for t in meta["targets"] if t in summary]
    proxies = [t for t in PROXIES if t in summary]
    rows = table_rows(meta["scenarios"])
    out = [
        f"Proxy benchmark {meta['started_utc']} | {meta['repeats']} x {meta['duration_s']} s "
        f"per cell, round-robin | median (min{_DASH}max) | SUT cpus={meta['sut_cpus']}, "
        f"loadgen+upstream cpus={meta['load_cpus']} | nice={meta['nice']} | stream = "
        f"{meta['chunks']} chunks, {meta['chunk_delay_ms']:g} ms apart | "
        f"python {meta['python']}, aiohttp {meta['aiohttp']}",
        "",
    ]
    out += _table(
        ["metric", *targets],
        [
            [r.label, *(_fmt(summary[t].get(r.scenario, {}).get(r.key), r.digits) for t in targets)]
            for r in rows
        ],
    )
    if "gateway" in summary:
        gw = summary["gateway"]
        own = [
            f"{s['id']} {_fmt(gw.get(s['id'], {}).get('self_overhead_p50_ms'), 3)}"
            for s in meta["scenarios"]
        ]
        out += [
            "",
            "Gateway's own x-gateway-overhead-ms header, p50 per run (ms): " + ", ".join(own),
        ]
    if "direct" in summary and proxies:
        peers = [p for p in proxies if p != "gateway"] if "gateway" in proxies else []
        out += [
            "",
            "Added over direct (difference of medians, ms; throughput as % of direct); "
            "gateway/peer = ratio of added latency, or of req/s:",
        ]
        header = ["metric", *proxies, *(f"gateway/{p}" for p in peers)]
        out += _table(
            header,
            [
                [
                    r.label,
                    *(_added_cell(summary, t, r) for t in proxies),
                    *(_gw_vs(summary, r, p) for p in peers),
                ]
                for r in rows
            ],
        )
    vs = verdicts(summary, meta["scenarios"])
    if vs:
        out += ["", "Product targets:", *(_verdict_line(v) for v in vs)]
    out += [
        "",
        "Per run (medians): CPU busy % cpu0/cpu1, CPU of processes outside the harness "
        "(% of a core), clean runs/total, errors:",
    ]
    body = []
    for s in meta["scenarios"]:
        cells = []
        for t in targets:
            c = summary[t].get(s["id"])
            if c is None:
                cells.append("n/a")
                continue
            busy = "/".join(f"{v:.0f}" for v in c["cpu_busy_pct"].values())
            foreign = (c["foreign_cpu_pct"] or {}).get("median", 0.0)
            errs = sum(c["errors"].values())
            cells.append(
                f"{busy} foreign {foreign:.0f}% ({c['runs_clean']}/{c['runs_total']})"
                + (f" errors {errs}" if errs else "")
            )
        body.append([s["id"], *cells])
    out += _table(["scenario", *targets], body)
    errors = {t: {s: c["errors"] for s, c in summary[t].items() if c["errors"]} for t in targets}
    errors = {t: e for t, e in errors.items() if e}
    if errors:
        out += ["", f"Errors by kind: {errors}"]
    return "\n".join(out)
