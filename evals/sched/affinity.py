"""The affinity workload of ``python -m evals sched``: simulated engines served in this
process, multi-turn chats sent through each gateway replica's own pool (or through an
SGLang Model Gateway), and one policy's figures over ``--repeats`` runs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import socket
import subprocess
import time
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import aiohttp
from aiohttp import web

from engines.sim import SimConfig, SimServer
from evals.bench.common import percentile
from evals.bench.peers import router_argv, router_python
from evals.sched.choosers import CHOOSERS, Choose, Gw, moved
from gateway.request.model import parse_chat
from gateway.rules.schema import Tier
from gateway.upstream.pools import Pool

WORDS = ("policy", "ledger", "invoice", "shipment", "tenant", "account", "region", "order")


_JSON = MappingProxyType({"Content-Type": "application/json"})


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
        rep = choose(gw.pool, parse_chat(raw).routing_key(), gw)
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


async def measure(name: str, a: argparse.Namespace) -> dict[str, Any]:
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
        "moved_when_one_leaves": moved(name.partition("@")[0], a.engines),
        "wall_s": round(sum(r["wall_s"] for r in runs), 2),
    }
