"""The report of ``python -m evals routing``: the setup, a hit-rate summary, one table per
workload and load, the bars, and a plot (hit rate and engine TTFT p99 per router)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evals.report import fmt_num, md_table, pyplot, save_figure
from evals.routing import cost
from evals.routing.workloads import ANSWER_TOKENS, LOADS, RATES, WORKLOADS


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.1%}"


def _ms(v: float | None) -> str:
    return "-" if v is None else fmt_num(v)


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def _setup(s: dict[str, Any]) -> str:
    rates = " / ".join(f"{r * s['rate_scale']:g}" for r in RATES)
    return (
        f"{s['engines']} simulated SGLang replicas (`engines.sim`, highspeed profile, one "
        f"seed), each with a radix cache of {s['cache_tokens']:,} tokens and "
        f"{s['max_running']} batch slots, at time scale {s['time_scale']:g} (wall s per model "
        f"s); the oracle is one engine with {s['engines']}x the cache, slots and speed. "
        f"Sessions start open-loop for {s['seconds']:g} model seconds per cell, {rates} "
        f"requests per model second (moderate / near capacity), each asking for up to "
        f"{ANSWER_TOKENS} tokens, streamed. Caches are flushed "
        f"and every router started fresh before each cell; the routers take turns on the same "
        f"sessions. Run started {s['started']}, {s['minutes']} min, Python {s['python']}.\n\n"
        f"    {s['command']}\n\n"
        "Engine TTFT is the simulator's own figure in model ms (queue, prefill lane, prefill of "
        "the uncached prompt); client TTFT and end-to-end are wall ms at the client, so about "
        f"{s['time_scale']:g}x the model figures plus what the router adds. Imbalance: the "
        "busiest engine over the mean, in requests and in prefilled tokens. Router CPU: its "
        "processes' user + system time over the cell (health probes and metric scrapes "
        "included) per request."
    )


def _summary(cells: list[dict[str, Any]], routers: list[str]) -> str:
    rows = []
    for w in WORKLOADS:
        for load in LOADS:
            got = {c["router"]: c for c in cells if c["workload"] == w and c["load"] == load}
            if got:
                rows.append(
                    [
                        f"{w} {load}",
                        *(_pct(got[r]["hit_rate"]) if r in got else "-" for r in routers),
                    ]
                )
    return md_table(["workload, load", *routers], rows)


def _client(c: dict[str, Any], text: str) -> str:
    """A client-side figure; none for the oracle, whose engine's clock runs faster."""
    return "-" if c["router"] == "oracle" else text


def _cell_table(cells: list[dict[str, Any]]) -> str:
    head = [
        "router", "requests (failed)", "hit rate", "engine TTFT p50 / p99 ms",
        "client TTFT p50 / p99 ms", "e2e p99 ms", "tokens/s", "imbalance req / prefill",
        "router CPU us/req",
    ]  # fmt: skip
    rows = [
        [
            c["router"],
            f"{c['requests']} ({c['failed']})",
            _pct(c["hit_rate"]),
            f"{_ms(c['engine_ttft_p50_ms'])} / {_ms(c['engine_ttft_p99_ms'])}",
            _client(c, f"{_ms(c['client_ttft_p50_ms'])} / {_ms(c['client_ttft_p99_ms'])}"),
            _client(c, _ms(c["e2e_p99_ms"])),
            fmt_num(c["tokens_per_s"]),
            f"{_x(c['imbalance_requests'])} / {_x(c['imbalance_prefill'])}",
            _ms(c["router_cpu_us"]),
        ]
        for c in cells
    ]
    return md_table(head, rows)


def _bars(bars: list[dict[str, Any]]) -> str:
    def fig(v: float | None, what: str) -> str:
        return _pct(v) if "hit rate" in what or "replicas" in what else _ms(v)

    rows = [
        [
            b["bar"],
            fig(b["gateway"], b["bar"]),
            fig(b["reference"], b["bar"]),
            {True: "met", False: "**missed**", None: "-"}[b["met"]],
        ]
        for b in bars
    ]
    met = sum(1 for b in bars if b["met"])
    return f"{met} of {len(bars)} met.\n\n" + md_table(["bar", "gateway", "reference", ""], rows)


def _cost(cells: list[dict[str, Any]]) -> str:
    rows = [
        [
            r["workload"],
            fmt_num(r["answer_tokens"]),
            fmt_num(r["prefill_tokens"]),
            fmt_num(r["engine_rps"]),
            fmt_num(r["gateway_us"]),
            "-" if r["peer_us"] is None else fmt_num(r["peer_us"]),
            fmt_num(r["cores_measured"]),
            fmt_num(r["cores_proxy"]),
        ]
        for r in cost.rows(cells)
    ]
    head = [
        "workload (near capacity, gateway-1)", "answer tokens", "uncached prompt tokens",
        "one engine's req/s at full load", "gateway CPU us/req (here)",
        f"{cost.PEER} CPU us/req (here)",
        f"gateway cores per {cost.FLEET} engines (here)", "(at the proxy figure)",
    ]  # fmt: skip
    return (cost.__doc__ or "").split("\n\n")[1].replace("\n", " ") + "\n\n" + md_table(head, rows)


def markdown(result: dict[str, Any], png: Path | None) -> str:
    s, cells = result["setup"], result["cells"]
    parts = [
        "# Fleet routing: the gateway beside the SGLang Model Gateway",
        _setup(s),
        "## Prefix-cache hit rate (the engines' own counters)",
        _summary(cells, s["routers"]),
    ]
    if png is not None:
        parts.append(f"![hit rate and TTFT p99 per router]({png.name})")
    for w in WORKLOADS:
        for load in LOADS:
            got = [c for c in cells if c["workload"] == w and c["load"] == load]
            if got:
                parts += [f"## {w}, {load}: {WORKLOADS[w].what}", _cell_table(got)]
    parts += [
        "## Bars",
        _bars(result["bars"]),
        "## The gateway's cost at fleet scale",
        _cost(cells),
    ]
    return "\n\n".join(parts) + "\n"


def plot(cells: list[dict[str, Any]], path: Path) -> Path | None:
    """Hit rate and engine TTFT p99 per router, one group of bars per workload and load."""
    try:
        plt = pyplot()
    except ImportError:
        return None
    groups = [(w, load) for w in WORKLOADS for load in LOADS]
    groups = [g for g in groups if any((c["workload"], c["load"]) == g for c in cells)]
    routers = list(dict.fromkeys(c["router"] for c in cells))
    by = {(c["workload"], c["load"], c["router"]): c for c in cells}
    fig, axes = plt.subplots(2, 1, figsize=(12, 7), sharex=True)
    width = 0.8 / max(len(routers), 1)
    for i, r in enumerate(routers):
        xs = [g + i * width for g in range(len(groups))]
        for ax, key in zip(axes, ("hit_rate", "engine_ttft_p99_ms"), strict=True):
            ys = [(by.get((*g, r)) or {}).get(key) or 0.0 for g in groups]
            ax.bar(xs, ys, width, label=r)
    axes[0].set_ylabel("prefix-cache hit rate")
    axes[1].set_ylabel("engine TTFT p99 (model ms)")
    axes[1].set_yscale("log")
    axes[1].set_xticks([g + 0.4 - width / 2 for g in range(len(groups))])
    axes[1].set_xticklabels([f"{w}\n{load}" for w, load in groups])
    axes[0].legend(ncol=4, fontsize=8)
    save_figure(fig, path)
    return path


MAIN_ROUTERS = ("gateway-1", "gateway-4", "smg-cache_aware", "smg-cache_aware-tuned", "oracle")


def runs_table(runs: list[dict[str, Any]]) -> str:
    """Hit rate and engine / client TTFT p99 per workload, load and router, run after run
    (``a / b``): the summary a report of several runs opens with."""

    def fig(cells: list[dict[str, Any]], w: str, load: str, r: str, key: str) -> str:
        got = [c for c in cells if (c["workload"], c["load"], c["router"]) == (w, load, r)]
        if not got or got[0].get(key) is None or (r == "oracle" and key.startswith("client")):
            return "-"  # the oracle's clock runs faster than the wall's: no client figures
        return _pct(got[0][key]) if key == "hit_rate" else fmt_num(got[0][key])

    rows = []
    for w in WORKLOADS:
        for load in LOADS:
            row = [f"{w} {load}"]
            for r in MAIN_ROUTERS:
                parts = []
                for key in ("hit_rate", "engine_ttft_p99_ms", "client_ttft_p99_ms"):
                    parts.append(" / ".join(fig(run["cells"], w, load, r, key) for run in runs))
                row.append("<br>".join(parts))
            if any(p != "-" for p in row[1:]):
                rows.append(row)
    return md_table(["workload, load", *MAIN_ROUTERS], rows)


def main(argv: list[str] | None = None) -> int:
    """``python -m evals.routing.report [--render] DIR [DIR ...]``: the runs' summary table,
    or (``--render``) each run's report and plot written again from its ``results.json``."""
    import json
    import sys

    args = list(argv if argv is not None else sys.argv[1:])
    render = "--render" in args
    dirs = [Path(d) for d in args if d != "--render"]
    runs = [json.loads((d / "results.json").read_text()) for d in dirs]
    if not render:
        print(runs_table(runs))
    for d, run in zip(dirs, runs, strict=True):
        if render:
            png = plot(run["cells"], d / "routing.png")
            (d / "report.md").write_text(markdown(run, png))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
