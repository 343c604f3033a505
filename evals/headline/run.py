"""The headline: how much of the fast tier's speed a client keeps through the gateway,
with the standard tier's reliability — measured side by side in one run.

    python -m evals headline [--requests 48] [--clients 1,8] [--modes stream,plain]
        [--mix chat|tasks]
        [--faults loop=0.05,slow_ttft=0.03,hang=0.01,cut=0.01,leak=0.01]
        [--fault-draw content|order] [--time-scale 1.0] [--engines sim|local]
        [--no-hedge-target] [--out DIR]

Engines: ``sim`` (default) starts the project's SGLang-shaped simulator twice — a
``highspeed`` replica with the fault mix, a ``standard`` replica without faults. Faults
are drawn from each request's content (``--fault-draw content``), so the fast tier raw and
the gateways meet the same faults on the same prompts: the comparison is paired, not at the
mercy of which target a fault draw in request order happened to hit (``order``, the way
until round 6);
``local`` starts the real local llama.cpp engines (a short run; no faults can be
injected into a real engine). The gateway runs with the repository's rules, its tiers
pointed at those engines (on the simulator, which speaks SGLang's API, with SGLang's way
of continuing an assistant text, ``continuation: continue_final_message``). Targets,
interleaved request by request in one run: the fast tier raw, the standard tier raw, the
gateway, and (unless ``--no-hedge-target``) a second gateway with hedging off, so hedging
on vs off is measured in the same run.

Mix: ``chat`` (default), everyday questions on the default rule; ``tasks``
(:mod:`evals.headline.mix`), chat, code, tool calls, JSON extraction, summarization and
reasoning prompts, a quarter of them not in English, each on the rule the classifier
gives it, and an answer's defects judged for its kind too (JSON that does not parse, a
tool call missing or with arguments that do not parse), with a table per kind. The sim's
``bad_json`` and ``bad_tool`` faults are not in the default mix (a grammar-constrained
engine's JSON parses); ``--faults`` adds them.

Per mode (streamed and non-streamed) and client count: TTFT (first content byte;
a non-streamed answer's latency), TPOT, latency P50/P95/P99, output tokens/s per request,
errors, and answers that reached the client with a defect (a loop, a template-token
leak, a cut: no finish or no ``[DONE]``); for the gateways, fallbacks, hedges and the
standard tier's extra load. Writes ``headline.md``, ``headline.json`` and
``headline.png`` into ``--out`` (default ``results/headline-<stamp>/``).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from evals.bench.procs import log
from evals.headline.client import Sample, Target, one
from evals.headline.procs import start_engines, start_gateway
from evals.headline.report import report
from evals.report import default_out
from gateway.settings import REPO_RULES

DEFAULT_FAULTS = "loop=0.05,slow_ttft=0.03,hang=0.01,cut=0.01,leak=0.01"


@dataclass
class Run:
    args: argparse.Namespace
    targets: list[Target] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    services: list[Any] = field(default_factory=list)  # Service or LocalEngines
    standard_url: str = ""
    # per cell, what the standard tier's own counters grew by: (requests, generated tokens)
    standard_load: dict[str, tuple[int, int]] = field(default_factory=dict)


async def cell(run: Run, mode: str, clients: int) -> None:
    a = run.args
    jobs = [(t, i) for i in range(a.requests) for t in run.targets]  # interleaved
    queue: asyncio.Queue[tuple[Target, int]] = asyncio.Queue()
    for j in jobs:
        queue.put_nowait(j)
    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=conn) as session:

        async def worker() -> None:
            while not queue.empty():
                target, i = queue.get_nowait()
                run.samples.append(await one(session, target, i, mode, clients, a))

        t0 = time.monotonic()
        before = await _standard_counters(session, run.standard_url)
        await asyncio.gather(*(worker() for _ in range(clients)))
        after = await _standard_counters(session, run.standard_url)
    log(f"{mode} c={clients}: {len(jobs)} requests in {time.monotonic() - t0:.1f}s")
    if before is not None and after is not None:
        run.standard_load[f"{mode} c={clients}"] = (after[0] - before[0], after[1] - before[1])


async def _standard_counters(session: aiohttp.ClientSession, url: str) -> tuple[int, int] | None:
    """The standard engine's requests and generated tokens so far (SGLang's counters, which
    the simulator keeps too): what the gateways add to its load, hedges that lost and
    continuations dropped included. None where the engine has no such metrics."""
    try:
        async with session.get(url + "/metrics", timeout=aiohttp.ClientTimeout(total=5)) as r:
            text = await r.text() if r.status == 200 else ""
    except (aiohttp.ClientError, TimeoutError):
        return None
    found: dict[str, int] = {}
    for line in text.splitlines():
        name, _, value = line.partition("{")
        if name in ("sglang:num_requests_total", "sglang:generation_tokens_total"):
            found[name] = int(float(value.rpartition(" ")[2]))
    if len(found) < 2:
        return None
    return found["sglang:num_requests_total"], found["sglang:generation_tokens_total"]


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m evals headline", description=__doc__.split("\n")[0])
    p.add_argument("--requests", type=int, default=48, help="per target and cell")
    p.add_argument("--clients", default="1,8")
    p.add_argument("--modes", default="stream,plain")
    p.add_argument("--mix", choices=("chat", "tasks"), default="chat", help="the prompts")
    p.add_argument("--faults", default=DEFAULT_FAULTS, help="the fast sim's fault mix")
    p.add_argument(
        "--fault-draw",
        choices=("content", "order"),
        default="content",
        help="the same faults for the same prompt on every target, or drawn in request order",
    )
    p.add_argument("--time-scale", type=float, default=1.0, help="sim wall s per model s")
    p.add_argument("--engines", choices=("sim", "local"), default="sim")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--timeout", type=float, default=30.0, help="per request, seconds")
    p.add_argument("--no-hedge-target", action="store_true", help="skip the hedging-off gateway")
    p.add_argument("--out", type=Path, default=None)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    a = parse(argv)
    out = a.out or default_out("headline")
    out.mkdir(parents=True, exist_ok=True)
    run = Run(a)
    try:
        urls = start_engines(a, out, run.services)
        run.standard_url = urls["standard"]
        rules = yaml.safe_load(REPO_RULES.read_text())
        models = {t: rules["tiers"][t].get("model") or t for t in ("highspeed", "standard")}
        run.targets = [
            Target("fast (raw)", urls["highspeed"], models["highspeed"]),
            Target("standard (raw)", urls["standard"], models["standard"]),
            Target(
                "gateway", start_gateway(a, out, urls, True, run.services), "auto", gateway=True
            ),
        ]
        if not a.no_hedge_target:
            url = start_gateway(a, out, urls, False, run.services)
            run.targets.append(Target("gateway, no hedging", url, "auto", gateway=True))
        for mode in a.modes.split(","):
            for clients in (int(c) for c in a.clients.split(",")):
                asyncio.run(cell(run, mode, clients))
    finally:
        for s in run.services:
            s.stop()
    text = report(run.samples, [t.name for t in run.targets], a, out, run.standard_load)
    print(text)
    log(f"results: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
