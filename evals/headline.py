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
(:mod:`evals.headline_mix`), chat, code, tool calls, JSON extraction, summarization and
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
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from evals.bench.common import free_port
from evals.bench.procs import Service, log
from evals.bench.proxy import wait_ready
from evals.headline_mix import body as mix_body
from evals.headline_mix import prompt as mix_prompt
from evals.headline_mix import shape_defect
from evals.headline_report import report
from evals.report_util import default_out
from gateway.checks.config import RepetitionSettings
from gateway.checks.repetition import find_loop_start
from gateway.settings import REPO_RULES

DEFAULT_FAULTS = "loop=0.05,slow_ttft=0.03,hang=0.01,cut=0.01,leak=0.01"
LEAKS = ("<|im_end|>", "<|im_start|>", "<|endoftext|>", "<|eot_id|>")
TOPICS = ("tea", "rivers", "bridges", "owls", "glass", "maps", "bread", "tides", "chess")


@dataclass
class Target:
    name: str
    url: str
    model: str
    gateway: bool = False


@dataclass
class Sample:
    target: str
    mode: str
    clients: int
    ok: bool
    ttft_s: float | None = None
    latency_s: float = 0.0
    tokens: int = 0
    defect: str | None = None
    error: str | None = None
    tier: str | None = None
    fallback: bool = False
    hedge: bool = False
    # the gateway's own words for it: x-gateway-fallback, -hedge, -continued (a stream's
    # later ones come as comments after its events)
    why: dict[str, str] = field(default_factory=dict)
    index: int = -1  # the prompt's (the same prompt on every target)
    kind: str = "chat"  # the mix's kind of request (evals.headline_mix)


@dataclass
class Run:
    args: argparse.Namespace
    targets: list[Target] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    services: list[Any] = field(default_factory=list)  # Service or LocalEngines
    standard_url: str = ""
    # per cell, what the standard tier's own counters grew by: (requests, generated tokens)
    standard_load: dict[str, tuple[int, int]] = field(default_factory=dict)


def _rules(out: Path, hedge: bool, engines: str) -> Path:
    """The repository's rules; hedging off for the second gateway; on the simulator (which
    speaks SGLang's API) its way of continuing an assistant text, as an SGLang deployment's
    rules would say (the repository's rules name llama.cpp's, for the local engines)."""
    data = yaml.safe_load(REPO_RULES.read_text())
    if engines == "sim":
        for tier in data["tiers"].values():
            tier["continuation"] = "continue_final_message"
    if not hedge:
        for route in (data["default"], *data["rules"]):
            route["hedge_after"] = None
    path = out / f"rules-{'hedge' if hedge else 'nohedge'}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def start_engines(run: Run, out: Path) -> dict[str, str]:
    a = run.args
    urls: dict[str, str] = {}
    if a.engines == "local":
        from engines.launcher import LocalEngines

        engines = LocalEngines(out)
        ports = {"highspeed": free_port(), "standard": free_port()}
        engines.start(list(ports.items()))
        run.services.append(engines)
        return {t: f"http://127.0.0.1:{p}" for t, p in ports.items()}
    for tier in ("highspeed", "standard"):
        port = free_port()
        argv = [
            sys.executable,
            "-m",
            "engines.sim",
            "--port",
            str(port),
            "--profile",
            tier,
            "--seed",
            str(a.seed),
            "--time-scale",
            str(a.time_scale),
        ]
        if tier == "highspeed":
            for f in filter(None, a.faults.split(",")):
                argv += ["--fault", f]
            argv += ["--fault-draw", a.fault_draw]
        service = Service(f"sim-{tier}", argv, cpus=None, nice=False, logdir=out)
        run.services.append(service)
        urls[tier] = f"http://127.0.0.1:{port}"
        wait_ready(urls[tier] + "/health", service)
    return urls


def start_gateway(run: Run, out: Path, urls: dict[str, str], hedge: bool) -> str:
    port = free_port()
    env = {**os.environ, "GATEWAY_LOCAL_ENGINES": "off", "GATEWAY_ADMIN_PORT": str(free_port())}
    env.update({f"GATEWAY_POOL_{t.upper()}_URLS": u for t, u in urls.items()})
    argv = [
        sys.executable,
        "-m",
        "gateway.cli",
        "serve",
        "--rules",
        str(_rules(out, hedge, run.args.engines)),
        "--port",
        str(port),
    ]
    name = "gateway" if hedge else "gateway-nohedge"
    service = Service(name, argv, cpus=None, nice=False, logdir=out, env=env)
    run.services.append(service)
    url = f"http://127.0.0.1:{port}"
    wait_ready(url + "/healthz", service)
    return url


def _body(target: Target, i: int, stream: bool) -> dict[str, Any]:
    topic = TOPICS[i % len(TOPICS)]
    body: dict[str, Any] = {
        "model": target.model,
        "messages": [{"role": "user", "content": f"Tell me about {topic} ({i})."}],
        "max_tokens": 200,
        "stream": stream,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


WHY = ("x-gateway-fallback", "x-gateway-hedge", "x-gateway-continued", "x-gateway-finish")


@dataclass
class Got:
    """What an answer carried: its text, whether it finished, its tool calls' arguments."""

    text: str = ""
    finished: bool = False
    tool_args: list[str] = field(default_factory=list)


def _defect(text: str, finished: bool) -> str | None:
    if any(t in text for t in LEAKS):
        return "leak"
    if find_loop_start(text, RepetitionSettings()) is not None:
        return "loop"
    if not finished:
        return "cut"
    return None


async def _stream(resp: aiohttp.ClientResponse, s: Sample, t0: float) -> Got:
    parts: list[str] = []
    args: dict[int, str] = {}
    finished = done = False
    buf = b""
    async for chunk in resp.content.iter_any():
        buf += chunk
        while b"\n\n" in buf:
            event, buf = buf.split(b"\n\n", 1)
            for line in event.split(b"\n"):
                if line.startswith(b": x-gateway-"):  # what happened after the head
                    name, _, value = line[2:].decode(errors="replace").partition(" ")
                    s.why[name] = value
                    s.fallback = s.fallback or name == "x-gateway-fallback"
                if not line.startswith(b"data: "):
                    continue
                data = line[6:]
                if data == b"[DONE]":
                    done = True
                    continue
                obj = json.loads(data)
                if "error" in obj:
                    s.error = "error_event"
                    continue
                if obj.get("usage"):
                    s.tokens = int(obj["usage"].get("completion_tokens") or s.tokens)
                for ch in obj.get("choices") or ():
                    delta = ch.get("delta") or {}
                    for tc in delta.get("tool_calls") or ():
                        i = tc.get("index", 0)
                        args[i] = args.get(i, "") + (
                            (tc.get("function") or {}).get("arguments") or ""
                        )
                        if s.ttft_s is None:
                            s.ttft_s = time.perf_counter() - t0
                    text = delta.get("content")
                    if text:
                        if s.ttft_s is None:
                            s.ttft_s = time.perf_counter() - t0
                        parts.append(text)
                    finished = finished or bool(ch.get("finish_reason"))
    if not s.tokens:
        s.tokens = len(parts)
    return Got("".join(parts), finished and done, [args[k] for k in sorted(args)])


def _plain(obj: dict[str, Any], s: Sample) -> Got:
    ch = obj["choices"][0]
    msg = ch["message"]
    text = msg.get("content") or ""
    calls = msg.get("tool_calls") or []
    usage = obj.get("usage") or {}
    s.tokens = int(usage.get("completion_tokens") or len(text.split()))
    args = [(c.get("function") or {}).get("arguments") or "" for c in calls]
    return Got(text, bool(ch.get("finish_reason")), args)


async def one(
    session: aiohttp.ClientSession,
    target: Target,
    i: int,
    mode: str,
    clients: int,
    a: argparse.Namespace,
) -> Sample:
    stream = mode == "stream"
    s = Sample(target.name, mode, clients, ok=False, index=i)
    tasks = a.mix == "tasks"
    s.kind = mix_prompt(i).kind if tasks else "chat"
    body = mix_body(target.model, i, stream) if tasks else _body(target, i, stream)
    t0 = time.perf_counter()
    url = target.url + "/v1/chat/completions"
    try:
        async with asyncio.timeout(a.timeout), session.post(url, json=body) as r:
            s.tier = r.headers.get("x-gateway-tier")
            s.fallback = "x-gateway-fallback" in r.headers
            s.hedge = "x-gateway-hedge" in r.headers
            s.why = {k: r.headers[k] for k in WHY if k in r.headers}
            if r.status != 200:
                s.error = f"http_{r.status}"
                await r.read()
                return s
            if stream:
                got = await _stream(r, s, t0)
            else:
                obj = await r.json()
                s.ttft_s = time.perf_counter() - t0
                got = _plain(obj, s)
    except TimeoutError:
        s.error = "timeout"
        return s
    except (aiohttp.ClientError, ValueError, KeyError) as e:
        s.error = type(e).__name__
        return s
    s.latency_s = time.perf_counter() - t0
    if s.error is None:
        s.defect = shape_defect(s.kind, got.text, got.tool_args) or _defect(got.text, got.finished)
    s.ok = s.error is None
    return s


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
        urls = start_engines(run, out)
        run.standard_url = urls["standard"]
        rules = yaml.safe_load(REPO_RULES.read_text())
        models = {t: rules["tiers"][t].get("model") or t for t in ("highspeed", "standard")}
        run.targets = [
            Target("fast (raw)", urls["highspeed"], models["highspeed"]),
            Target("standard (raw)", urls["standard"], models["standard"]),
            Target("gateway", start_gateway(run, out, urls, hedge=True), "auto", gateway=True),
        ]
        if not a.no_hedge_target:
            url = start_gateway(run, out, urls, hedge=False)
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
