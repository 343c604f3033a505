"""``python -m evals sched``: prefix affinity across gateway replicas.

Two gateway replicas in front of eight SGLang-shaped replicas (``engines/sim.py``, served
in this process on real sockets, time-scaled). Each gateway replica has its own
:class:`gateway.upstream.pools.Pool` (its own in-flight counts, nothing shared), as two
gateway pods behind a load balancer would; the turns of one chat alternate between them.
The workload: multi-turn chats, each opening with one of a few shared system prompts;
every turn sends the whole history (so a turn can hit the engine's radix cache for the
system prompt and for its own earlier turns). The engine replica is picked by:

* ``round-robin``: each gateway replica's own counter;
* ``least-load``: each gateway replica's own in-flight counts;
* ``modulo``: the previous scheme, prefix hash mod n with bounded load (the same engine on
  every gateway replica while the set is stable; most prefixes move when it changes);
* ``rendezvous``: the gateway's ``Pool.choose`` (rendezvous hashing, bounded load at the
  default ``affinity_slack`` 1.0; ``rendezvous@0.25``: at slack 0.25);
* ``smg``: no choice in the gateway: each gateway replica's pool has one endpoint, an SGLang
  Model Gateway (``sglang-router`` from PyPI, its own process, ``--policy cache_aware``)
  shared by both gateway replicas, over the same engines; ``smg@round_robin`` etc. pick
  another router policy. The router is installed into the benchmark's venv on first use
  (:mod:`evals.bench.peers`).

Figures per policy: the engines' prefix-cache hit rate (cached / prompt tokens, from the
answers' ``usage``) and TTFT P50/P99 in model time (the simulator's ``sim.ttft_ms``), and,
for hashing schemes, the share of prefixes that move when one engine replica of eight
leaves. Writes ``report.md``, ``results.json`` and ``sched.png`` to ``--out``
(default ``docs/reports/sched``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import random
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import aiohttp
from aiohttp import web

from engines.sim import SimConfig, SimServer
from evals.bench.common import percentile
from evals.bench.peers import router_argv, router_python
from evals.report_util import ROOT, md_table, shown_path
from gateway.request.model import parse_chat
from gateway.rules.schema import Tier
from gateway.upstream.pools import Pool
from gateway.upstream.replicas import Replica
from gateway.upstream.scheduler import Gate, Ticket

POLICIES = ("round-robin", "least-load", "modulo", "rendezvous@0.25", "rendezvous", "smg")
WORDS = ("policy", "ledger", "invoice", "shipment", "tenant", "account", "region", "order")
FAIR = (
    "One engine replica lets 4 requests generate at once (50 ms each; the rest wait FIFO). "
    "Tenant A keeps 48 requests in flight; tenant B sends 12 interactive requests one after "
    "another. Latency per request, in wall time (the gateway's own queue, "
    "`gateway/upstream/scheduler.py`, in process)."
)
_JSON = MappingProxyType({"Content-Type": "application/json"})
Choose = Callable[[Pool, int, "Gw"], Replica]


@dataclass
class Gw:
    """One gateway replica's view: its own pool (in-flight counts) and round-robin turn."""

    pool: Pool
    rr: itertools.count[int] = field(default_factory=itertools.count)


def _rr(pool: Pool, affinity: int, gw: Gw) -> Replica:
    return pool.replicas[next(gw.rr) % len(pool.replicas)]


def _least(pool: Pool, affinity: int, gw: Gw) -> Replica:
    return min(pool.replicas, key=lambda r: r.in_flight)


def _modulo(pool: Pool, affinity: int, gw: Gw) -> Replica:
    """The scheme this branch replaced: hash mod n, kept unless 25% (and 2) over the least."""
    live = pool.replicas
    preferred = live[affinity % len(live)]
    least = min(live, key=lambda r: r.load)
    return preferred if preferred.load <= least.load * 1.25 + 2 else least


def _rendezvous(pool: Pool, affinity: int, gw: Gw) -> Replica:
    return pool.choose(affinity)


CHOOSERS: dict[str, Choose] = {
    "round-robin": _rr,
    "least-load": _least,
    "modulo": _modulo,
    "rendezvous": _rendezvous,
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _system_prompt(i: int, tokens: int) -> str:
    rng = random.Random(f"system:{i}")
    words = [f"Assistant {i} for the {WORDS[i % len(WORDS)]} desk."]
    words += [rng.choice(WORDS) + str(rng.randrange(100)) for _ in range(tokens)]
    return " ".join(words)


async def _start_engines(n: int, a: argparse.Namespace) -> tuple[list[web.AppRunner], list[str]]:
    runners, urls = [], []
    for i in range(n):
        port = _free_port()
        cfg = SimConfig(
            port=port,
            seed=i,
            time_scale=a.time_scale,
            max_total_tokens=a.cache_tokens,
            model="sim",
        )
        runner = web.AppRunner(SimServer(cfg).app(), access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        runners.append(runner)
        urls.append(f"http://127.0.0.1:{port}")
    return runners, urls


@dataclass
class Sample:
    ttft_ms: float
    prompt: int
    cached: int


async def _chat(
    s: aiohttp.ClientSession,
    gws: list[Gw],
    choose: Choose,
    chat: int,
    a: argparse.Namespace,
    out: list[Sample],
) -> None:
    system = _system_prompt(chat % a.systems, a.system_tokens)
    messages: list[dict[str, str]] = [{"role": "system", "content": system}]
    rng = random.Random(f"chat:{chat}")
    for turn in range(a.turns):
        question = " ".join(rng.choice(WORDS) for _ in range(a.user_tokens))
        messages.append({"role": "user", "content": f"Turn {turn}: {question}?"})
        body = {"model": "sim", "messages": messages, "max_tokens": a.max_tokens}
        raw = json.dumps(body).encode()
        gw = gws[(chat + turn) % len(gws)]  # the load balancer alternates gateway replicas
        rep = choose(gw.pool, parse_chat(raw).affinity, gw)
        rep.in_flight += 1
        try:
            async with s.post(rep.url + "/v1/chat/completions", data=raw, headers=_JSON) as r:
                answer = await r.json(content_type=None)
                if r.status != 200:
                    raise RuntimeError(f"{rep.url} answered {r.status}: {answer}")
        finally:
            rep.in_flight -= 1
        u = answer["usage"]
        out.append(
            Sample(
                answer["sim"]["ttft_ms"],
                u["prompt_tokens"],
                u["prompt_tokens_details"]["cached_tokens"],
            )
        )
        messages.append(
            {"role": "assistant", "content": answer["choices"][0]["message"]["content"]}
        )


async def _start_router(urls: list[str], policy: str) -> tuple[subprocess.Popen[bytes], str]:
    """An SGLang Model Gateway over ``urls``, ready (its ``/readiness`` says every worker is
    registered) within 60 s."""
    port = _free_port()
    argv = router_argv(router_python(), port, urls, policy=policy, metrics_port=_free_port())
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    async with aiohttp.ClientSession() as s:
        while time.monotonic() < deadline and proc.poll() is None:
            with contextlib.suppress(aiohttp.ClientError, OSError):
                async with s.get(url + "/readiness") as r:
                    body = await r.json(content_type=None)
                    if r.status == 200 and body.get("healthy_workers") == len(urls):
                        return proc, url
            await asyncio.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"sglang-router over {len(urls)} engines not ready within 60 s")


async def _run_policy(name: str, a: argparse.Namespace) -> dict[str, Any]:
    runners, urls = await _start_engines(a.engines, a)
    base, _, param = name.partition("@")  # rendezvous@0.25: another affinity_slack
    router: subprocess.Popen[bytes] | None = None
    if base == "smg":
        router, router_url = await _start_router(urls, param or "cache_aware")
        tier = Tier(endpoints=(router_url,), model="sim")
        base = "round-robin"  # one endpoint: the router chooses
    else:
        tier = Tier(endpoints=tuple(urls), model="sim", affinity_slack=float(param or 1.0))
    gws = [Gw(Pool.create("highspeed", tier)) for _ in range(a.gateways)]
    samples: list[Sample] = []
    sem = asyncio.Semaphore(a.concurrency)
    t0 = time.perf_counter()
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as s:

            async def one(chat: int) -> None:
                async with sem:
                    await _chat(s, gws, CHOOSERS[base], chat, a, samples)

            await asyncio.gather(*(one(c) for c in range(a.chats)))
    finally:
        for g in gws:
            await g.pool.close()
        if router is not None:
            router.terminate()
            router.wait(10)
        for r in runners:
            await r.cleanup()
    prompt = sum(x.prompt for x in samples)
    return {
        "policy": name,
        "samples": samples,
        "hit_rate": sum(x.cached for x in samples) / prompt if prompt else 0.0,
        "wall_s": round(time.perf_counter() - t0, 2),
    }


async def _policy(name: str, a: argparse.Namespace) -> dict[str, Any]:
    """``a.repeats`` runs of one policy on fresh engines: hit rate per run, pooled TTFT."""
    runs = [await _run_policy(name, a) for _ in range(a.repeats)]
    ttft = sorted(x.ttft_ms for r in runs for x in r["samples"])
    hits = [r["hit_rate"] for r in runs]
    return {
        "policy": name,
        "requests": len(ttft),
        "hit_rate": sum(hits) / len(hits),
        "hit_rate_range": [min(hits), max(hits)],
        "ttft_p50_ms": percentile(ttft, 50),
        "ttft_p99_ms": percentile(ttft, 99),
        "moved_when_one_leaves": _moved(name.partition("@")[0], a.engines),
        "wall_s": round(sum(r["wall_s"] for r in runs), 2),
    }


def _moved(name: str, n: int) -> float | None:
    """Share of 20,000 prefixes whose engine changes when engine 3 of ``n`` leaves."""
    if name not in ("modulo", "rendezvous"):
        return None
    urls = tuple(f"http://engine-{i}:30000" for i in range(n))
    full = Pool.create("x", Tier(endpoints=urls, model="m"))
    less = Pool.create("x", Tier(endpoints=urls, model="m"))
    less.replicas = [r for r in less.replicas if not r.url.startswith("http://engine-3:")]
    gw = Gw(full)
    keys = range(0, 20_000 * 7919, 7919)
    moved = sum(CHOOSERS[name](full, k, gw).url != CHOOSERS[name](less, k, gw).url for k in keys)
    return moved / len(keys)


async def _fairness(queue: bool, slots: int = 4, service: float = 0.05) -> dict[str, Any]:
    """Tenant A keeps 48 requests in flight; B sends 12 interactive ones, one after another.
    The engine lets ``slots`` generate at once (the rest wait FIFO, as its batch limit
    does). With ``queue``, the gateway's :class:`Gate` holds the excess instead."""
    engine = asyncio.Semaphore(slots)  # FIFO
    gate = Gate(slots if queue else None)
    stop = asyncio.Event()
    a_lat: list[float] = []

    async def one(ticket: Ticket) -> float:
        t0 = time.perf_counter()
        await gate.acquire(ticket, time.monotonic() + 60)
        try:
            async with engine:
                await asyncio.sleep(service)
        finally:
            gate.release(service)
        return time.perf_counter() - t0

    async def tenant_a() -> None:
        while not stop.is_set():
            a_lat.append(await one(Ticket("a", 0)))

    workers = [asyncio.create_task(tenant_a()) for _ in range(48)]
    await asyncio.sleep(0.5)
    b = sorted([await one(Ticket("b", 0)) for _ in range(12)])
    stop.set()
    await asyncio.gather(*workers)
    a_sorted = sorted(a_lat)
    return {
        "mode": "gateway queue (fair share)" if queue else "engine FIFO only",
        "b_p50_ms": (percentile(b, 50) or 0) * 1000,
        "b_p95_ms": (percentile(b, 95) or 0) * 1000,
        "a_p50_ms": (percentile(a_sorted, 50) or 0) * 1000,
        "a_done": len(a_lat),
        "service_ms": service * 1000,
    }


def _fair_table(rows: list[dict[str, Any]]) -> str:
    return md_table(
        ["mode", "B P50 (ms)", "B P95 (ms)", "A P50 (ms)", "A answered meanwhile", "service (ms)"],
        [
            [
                r["mode"],
                f"{r['b_p50_ms']:.0f}",
                f"{r['b_p95_ms']:.0f}",
                f"{r['a_p50_ms']:.0f}",
                r["a_done"],
                f"{r['service_ms']:.0f}",
            ]
            for r in rows
        ],
    )


def _report(rows: list[dict[str, Any]], a: argparse.Namespace, out: Path) -> str:
    table = md_table(
        [
            "policy",
            "requests",
            "cache hit rate (range)",
            "TTFT P50 (ms)",
            "TTFT P99 (ms)",
            "moved on leave",
        ],
        [
            [
                r["policy"],
                r["requests"],
                f"{r['hit_rate']:.1%} ({r['hit_rate_range'][0]:.0%}-{r['hit_rate_range'][1]:.0%})",
                f"{r['ttft_p50_ms']:.1f}",
                f"{r['ttft_p99_ms']:.1f}",
                "-" if r["moved_when_one_leaves"] is None else f"{r['moved_when_one_leaves']:.1%}",
            ]
            for r in rows
        ],
    )
    setup = (
        f"{a.gateways} gateway replicas, {a.engines} simulated SGLang replicas (highspeed "
        f"profile, KV/prefix cache {a.cache_tokens} tokens each, time scale {a.time_scale}), "
        f"{a.chats} chats x {a.turns} turns over {a.systems} shared system prompts of "
        f"~{a.system_tokens} tokens, {a.concurrency} chats at once, {a.max_tokens} tokens "
        f"per answer; {a.repeats} runs per policy (hit rate: mean and range; TTFT: all runs "
        "pooled). TTFT in model time (queue + prefill of the uncached prompt)."
    )
    cmd = "python -m evals sched " + " ".join(sys.argv[2:] if sys.argv[1:2] == ["sched"] else [])
    fair = [asyncio.run(_fairness(q)) for q in (False, True)]
    text = (
        f"# Prefix affinity across gateway replicas\n\n{setup}\n\n{table}\n\n"
        f"# Fair share under one tenant's burst\n\n{FAIR}\n\n{_fair_table(fair)}\n\n"
        f"`{cmd.strip()}`\n"
    )
    (out / "report.md").write_text(text)
    results = {"affinity": rows, "fairness": fair}
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    _plot(rows, out / "sched.png")
    return text


def _plot(rows: list[dict[str, Any]], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover - the evals extra is not installed
        return
    names = [r["policy"] for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    left.bar(names, [r["hit_rate"] * 100 for r in rows], color="tab:blue")
    left.set_ylabel("prefix-cache hit rate (%)")
    left.tick_params(axis="x", labelrotation=25)
    x = range(len(rows))
    right.bar([i - 0.2 for i in x], [r["ttft_p50_ms"] for r in rows], 0.4, label="P50")
    right.bar([i + 0.2 for i in x], [r["ttft_p99_ms"] for r in rows], 0.4, label="P99")
    right.set_xticks(list(x), names)
    right.set_ylabel("TTFT (model ms)")
    right.tick_params(axis="x", labelrotation=25)
    right.legend()
    fig.suptitle("2 gateway replicas, 8 engine replicas, multi-turn chats")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m evals sched", description=__doc__)
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "reports" / "sched")
    p.add_argument("--policies", default=",".join(POLICIES))
    p.add_argument("--gateways", type=int, default=2)
    p.add_argument("--engines", type=int, default=8)
    p.add_argument("--chats", type=int, default=96)
    p.add_argument("--turns", type=int, default=4)
    p.add_argument("--systems", type=int, default=16)
    p.add_argument("--system-tokens", type=int, default=1500)
    p.add_argument("--user-tokens", type=int, default=40)
    p.add_argument("--max-tokens", type=int, default=48)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--cache-tokens", type=int, default=12000)
    p.add_argument("--time-scale", type=float, default=0.05)
    p.add_argument("--repeats", type=int, default=3)
    return p.parse_args(argv)


def main(argv: list[str]) -> int:
    a = parse(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in a.policies.split(","):
        row = asyncio.run(_policy(name, a))
        print(
            f"{name}: hit {row['hit_rate']:.1%}, TTFT P50 {row['ttft_p50_ms']:.1f} ms, "
            f"P99 {row['ttft_p99_ms']:.1f} ms ({row['wall_s']} s)",
            file=sys.stderr,
        )
        rows.append(row)
    print(_report(rows, a, a.out))
    print(f"wrote {shown_path(a.out)}/report.md, results.json, sched.png", file=sys.stderr)
    return 0
