"""Response cache benchmark: a hit against the fast tier raw, and a replayed workload.

    python -m evals.bench.cache [--duration 3] [--clients 1,8] [--scale 1] [--out DIR]
                                [--report docs/reports/cache.md] [--time-scale 1.0]

Two parts, against the project's SGLang-shaped simulator (``engines.sim``: the fast
tier's profile, TTFT a few ms, EAGLE-speed decoding) behind a real gateway:

1. **A hit against the fast tier raw** — the proxy benchmark's load generator
   (``evals.bench.loadgen``: closed-loop keep-alive clients, every response verified)
   on the same deterministic chat request against three targets: the simulator itself
   (``fast raw``), a gateway without a cache (``gateway``: the normal path), and a gateway
   whose rule caches it (``gateway hit``: every response must say ``x-gateway-cache:
   hit``). Streamed and not, at each ``--clients``: latency and time to first byte,
   p50 and p99, and requests/s.
2. **A replayed workload** — a deterministic trace, sent once through a caching gateway
   and once through one without: an eval run twice (the second pass a re-run at
   ``temperature: 0``), agent loops whose steps are sometimes re-asked (a retry after
   the agent's own timeout or parse error), and users asking a few common questions
   (Zipf), some rephrased (casing, punctuation, politeness: the semantic cache's guard
   lets these through) and some sampled (``temperature`` 0.7: never cached). Reported:
   hits by kind, hit rate, tokens the hits did not spend (their answers' usage), and the
   simulator's own generated-token counter for both runs.

Every child process is stopped at the end (``evals.bench.procs``). Writes the report to
``--report`` and the raw numbers and logs under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from evals.bench.common import CHAT_PATH, free_port, run
from evals.bench.loadgen import Expect, load
from evals.bench.procs import ROOT, Service, log
from evals.bench.proxy import wait_ready
from gateway.settings import REPO_RULES

PROMPT = "What are the three primary colors? Answer in one sentence."
TOPICS = ("photosynthesis", "TCP handshakes", "compound interest", "the water cycle",
          "binary search", "vaccines", "plate tectonics", "hash tables", "inflation",
          "the French Revolution", "black holes", "recursion", "supply chains", "DNS")
FAQ = ("How do I reset my password?", "How do I cancel my subscription?",
       "Where can I download my invoice?", "How do I change my shipping address?",
       "What are your opening hours?", "How do I contact support?",
       "How do I delete my account?", "Can I get a refund?", "How do I track my order?",
       "Do you ship internationally?", "How do I update my payment method?",
       "How do I enable two-factor authentication?")


# -- processes -------------------------------------------------------------------------------------
def start_sim(outdir: Path, services: list[Service], time_scale: float) -> str:
    port = free_port()
    argv = [sys.executable, "-m", "engines.sim", "--port", str(port), "--profile", "highspeed",
            "--seed", "7", "--time-scale", str(time_scale)]
    svc = Service("sim", argv, cpus=None, nice=False, logdir=outdir)
    services.append(svc)
    url = f"http://127.0.0.1:{port}"
    wait_ready(url + "/health", svc)
    return url


def rules_file(outdir: Path, cache: bool, semantic: bool) -> Path:
    data = yaml.safe_load(REPO_RULES.read_text())
    for tier in data["tiers"].values():
        tier["continuation"] = "continue_final_message"  # the simulator speaks SGLang's API
    if cache:
        c: dict[str, Any] = {"ttl": 3600}
        if semantic:
            c["semantic"] = {"embedder": "local"}
        for route in (data["default"], *data["rules"]):
            route["cache"] = c
    path = outdir / f"rules-{'cache' if cache else 'plain'}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def start_gateway(outdir: Path, services: list[Service], sim: str, cache: bool,
                  semantic: bool) -> str:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    env.update({"GATEWAY_LOCAL_ENGINES": "off", "GATEWAY_ADMIN_PORT": str(free_port()),
                "GATEWAY_POOL_HIGHSPEED_URLS": sim, "GATEWAY_POOL_STANDARD_URLS": sim})
    argv = [sys.executable, "-m", "gateway.cli", "serve", "--rules",
            str(rules_file(outdir, cache, semantic)), "--port", str(port)]
    name = "gateway-cache" if cache else "gateway"
    svc = Service(name, argv, cpus=None, nice=False, logdir=outdir, env=env)
    services.append(svc)
    url = f"http://127.0.0.1:{port}"
    wait_ready(url + "/healthz", svc)
    return url


def post(url: str, body: dict[str, Any], timeout: float = 60) -> tuple[dict[str, str], bytes]:
    req = urllib.request.Request(url + CHAT_PATH, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return {k.lower(): v for k, v in r.headers.items()}, r.read()


def sim_counters(sim: str) -> tuple[float, float]:
    """The simulator's own (requests, generated tokens) counters."""
    with urllib.request.urlopen(sim + "/metrics", timeout=5) as r:
        text = r.read().decode()
    out = {"sglang:num_requests_total": 0.0, "sglang:generation_tokens_total": 0.0}
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in out:
            out[name] += float(line.rsplit(" ", 1)[1])
    return out["sglang:num_requests_total"], out["sglang:generation_tokens_total"]


# -- part 1: a hit against the fast tier raw ---------------------------------------------
def bench_body(stream: bool, model: str) -> bytes:
    body: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": PROMPT}],
                            "max_tokens": 256, "temperature": 0}  # it ends by itself: kept
    if stream:
        body["stream"] = True
    return json.dumps(body, separators=(",", ":")).encode()


def hit_vs_raw(targets: dict[str, tuple[str, str, Expect]], clients: list[int],
               duration: float) -> list[dict[str, Any]]:
    rows = []
    for stream in (False, True):
        for c in clients:
            for name, (url, model, expect) in targets.items():
                out = run(load(url + CHAT_PATH, connections=c, duration=duration, warmup=0.5,
                               stream=stream, expect=expect, body=bench_body(stream, model)))
                row = {"target": name, "stream": stream, "clients": c, "rps": out["rps"],
                       "ok": out["ok"], "errors": out["errors"],
                       "lat_p50": out["total_ms"]["p50"], "lat_p99": out["total_ms"]["p99"],
                       "ttfb_p50": out["ttfb_ms"]["p50"], "ttfb_p99": out["ttfb_ms"]["p99"]}
                log(f"{name:12} stream={stream!s:5} c={c}: {row}")
                rows.append(row)
    return rows


# -- part 2: a replayed workload ---------------------------------------------------------
@dataclass
class Step:
    kind: str  # eval | eval-replay | agent | agent-retry | faq | faq-variant | faq-sampled
    body: dict[str, Any]
    session: str = ""  # an agent: its answers become its history


def _variant(q: str, rng: random.Random) -> str:
    return rng.choice([q.lower().rstrip("?"), "Hi! " + q, q.replace("?", "? Thanks."),
                       "Quick question: " + q[0].lower() + q[1:], q.upper()])


def workload(scale: int, seed: int = 11) -> list[Step]:
    rng = random.Random(seed)
    chat = {"model": "auto", "max_tokens": 256, "temperature": 0}  # answers end by themselves
    evals = [Step("eval", {**chat, "messages": [{"role": "user", "content":
                  f"Explain {TOPICS[i % len(TOPICS)]} to a student (item {i})."}]})
             for i in range(10 * scale)]
    mixed: list[Step] = []
    for a in range(4 * scale):
        for k in range(5):
            mixed.append(Step("agent", {}, session=f"agent{a}:{k}"))
            if rng.random() < 0.35:
                mixed.append(Step("agent-retry", {}, session=f"agent{a}:{k}"))
    weights = [1 / (i + 1) ** 1.1 for i in range(len(FAQ))]
    for _ in range(30 * scale):
        q = rng.choices(FAQ, weights)[0]
        kind, body = "faq", {**chat, "messages": [{"role": "user", "content": q}]}
        roll = rng.random()
        if roll < 0.2:
            kind, body = "faq-sampled", {**body, "temperature": 0.7}
        elif roll < 0.45:
            kind = "faq-variant"
            body = {**body, "messages": [{"role": "user", "content": _variant(q, rng)}]}
        mixed.append(Step(kind, body))
    lanes: dict[str, list[Step]] = {}
    for st in mixed:  # each agent's steps, in the order it takes them
        if st.session:
            lanes.setdefault(st.session.split(":")[0], []).append(st)
    rng.shuffle(mixed)
    nxt = {a: iter(v) for a, v in lanes.items()}  # shuffled slots, each agent's steps in order
    mixed = [next(nxt[st.session.split(":")[0]]) if st.session else st for st in mixed]
    replay = [Step("eval-replay", s.body) for s in evals]
    return [*evals, *mixed, *replay]


@dataclass
class Tally:
    kinds: dict[str, dict[str, int]] = field(default_factory=dict)
    hit_ms: list[float] = field(default_factory=list)
    miss_ms: list[float] = field(default_factory=list)
    saved_tokens: int = 0  # prompt + completion tokens of the hits' stored answers
    saved_completion: int = 0
    requests: int = 0


def replay(url: str, steps: list[Step]) -> Tally:
    t = Tally()
    history: dict[str, list[dict[str, str]]] = {}
    asked: dict[str, dict[str, Any]] = {}
    for s in steps:
        body = s.body
        if s.session:
            agent, k = s.session.split(":")
            if s.kind == "agent":
                task = TOPICS[int(agent.removeprefix("agent")) % len(TOPICS)]
                system = {"role": "system", "content": f"You are an agent researching {task}."}
                msgs = history.setdefault(agent, [system])
                msgs.append({"role": "user", "content": f"Observation {k}: continue the plan."})
                asked[s.session] = {"model": "auto", "max_tokens": 256, "temperature": 0,
                                    "messages": list(msgs)}
            body = asked[s.session]
        t0 = time.perf_counter()
        headers, raw = post(url, body)
        ms = (time.perf_counter() - t0) * 1000
        answer = json.loads(raw)
        if s.kind == "agent":
            history[s.session.split(":")[0]].append(
                {"role": "assistant", "content": answer["choices"][0]["message"]["content"] or ""})
        state = headers.get("x-gateway-cache", "none")
        match = headers.get("x-gateway-cache-match", "").split(" ")[0]
        key = f"hit/{match}" if state == "hit" else state
        row = t.kinds.setdefault(s.kind, {})
        row[key] = row.get(key, 0) + 1
        t.requests += 1
        if state == "hit":
            t.hit_ms.append(ms)
            usage = answer.get("usage") or {}
            t.saved_tokens += int(usage.get("total_tokens") or 0)
            t.saved_completion += int(usage.get("completion_tokens") or 0)
        else:
            t.miss_ms.append(ms)
    return t


# -- the report --------------------------------------------------------------------------
def _f(v: Any) -> str:
    return "-" if v is None else f"{v:,.2f}" if isinstance(v, float) else f"{v:,}"


def report(a: argparse.Namespace, rows: list[dict[str, Any]], cached: Tally, plain: Tally,
           engine: dict[str, tuple[float, float]]) -> str:
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# Response cache: a hit against the fast tier raw, and a replayed workload", "",
        f"`python -m evals cache --duration {a.duration} --clients {a.clients} --scale {a.scale}`"
        f" ({stamp}; this shared 2-core VM, every process on any core: a small run that proves "
        "the benchmark works — rerun it on a quiet machine for figures).", "",
        "## 1. A hit against the fast tier raw", "",
        "The same deterministic chat request (`temperature: 0`, `max_tokens: 256`: the "
        "simulator's 89-token answer ends by itself, so it is kept), closed-loop "
        "keep-alive clients (`evals.bench.loadgen`). `fast raw`: the simulator's fast-tier "
        "profile itself; `gateway`: through a gateway without a cache; `gateway hit`: through "
        "a gateway whose rule caches it (every response checked for `x-gateway-cache: hit`).",
        "",
        "| stream | clients | target | latency p50 / p99 ms | TTFB p50 / p99 ms | req/s | errors |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ttfb = f"{_f(r['ttfb_p50'])} / {_f(r['ttfb_p99'])}" if r["stream"] else "-"
        lines.append(f"| {'yes' if r['stream'] else 'no'} | {r['clients']} | {r['target']} | "
                     f"{_f(r['lat_p50'])} / {_f(r['lat_p99'])} | {ttfb} | {_f(r['rps'])} | "
                     f"{sum(r['errors'].values()) if r['errors'] else 0} |")
    lines += ["", "## 2. A replayed workload", "", _workload_text(a.scale), "",
              "| kind | requests | through the caching gateway |", "|---|---|---|"]
    for kind in sorted(cached.kinds):
        got = cached.kinds[kind]
        lines.append(f"| {kind} | {sum(got.values())} | "
                     + ", ".join(f"{k} {v}" for k, v in sorted(got.items())) + " |")
    hits = len(cached.hit_ms)
    (rq_c, tok_c), (rq_p, tok_p) = engine["cache"], engine["plain"]
    lines += [
        "",
        f"Hit rate: **{hits / cached.requests:.1%}** ({hits} of {cached.requests}); tokens the "
        f"hits did not spend (their stored answers' usage): **{cached.saved_tokens:,}**, "
        f"{cached.saved_completion:,} of them generated (completion) tokens.",
        f"The engine's own counters over the run: {int(rq_c):,} requests and {int(tok_c):,} "
        f"generated tokens through the caching gateway, against {int(rq_p):,} and "
        f"{int(tok_p):,} through the gateway without a cache "
        f"({1 - tok_c / tok_p if tok_p else 0:.1%} fewer generated tokens).",
        f"Latency p50: a hit {_f(_med(cached.hit_ms))} ms, a miss {_f(_med(cached.miss_ms))} "
        f"ms (the same requests without a cache: {_f(_med(plain.miss_ms))} ms; a miss on a "
        "semantic rule embeds its prompt first).",
        "",
        "The semantic cache's false hits and hit rate on labelled pairs: "
        "[semantic-cache.md](semantic-cache.md) (`python -m evals semcache`).",
    ]
    return "\n".join(lines) + "\n"


def _med(v: list[float]) -> float | None:
    return statistics.median(v) if v else None


def _workload_text(scale: int) -> str:
    return (f"Scale {scale}: an eval of {10 * scale} prompts run twice (the second pass a re-run); "
            f"{4 * scale} agents of 5 steps, each step re-asked with probability 0.35; "
            f"{30 * scale} questions from {len(FAQ)} common ones (Zipf, s=1.1), 25 % of them "
            "rephrased (casing, punctuation, greetings) and 20 % sampled at temperature 0.7. "
            "Sent one at a time, in one order, through each gateway; the caching one caches "
            "every rule, semantic on (local embedder, the shipped threshold).")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m evals cache", description=__doc__)
    ap.add_argument("--duration", type=float, default=3.0, help="measured seconds per cell")
    ap.add_argument("--clients", default="1,8")
    ap.add_argument("--scale", type=int, default=1, help="workload size multiplier")
    ap.add_argument("--time-scale", type=float, default=1.0, help="the simulator's clock")
    ap.add_argument("--no-semantic", action="store_true", help="exact cache only")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--report", type=Path, default=ROOT / "docs" / "reports" / "cache.md")
    a = ap.parse_args(argv)
    clients = [int(c) for c in a.clients.split(",")]
    outdir = a.out or ROOT / "results" / f"cache-{datetime.now(UTC):%Y%m%dT%H%M%SZ}"
    outdir.mkdir(parents=True, exist_ok=True)
    services: list[Service] = []
    try:
        sim = start_sim(outdir, services, a.time_scale)
        plain = start_gateway(outdir, services, sim, cache=False, semantic=False)
        cached = start_gateway(outdir, services, sim, cache=True, semantic=not a.no_semantic)
        model = json.loads(urllib.request.urlopen(sim + "/v1/models", timeout=5).read())
        post(cached, json.loads(bench_body(False, "auto")))  # the entry every hit replays
        targets = {"fast raw": (sim, model["data"][0]["id"], Expect()),
                   "gateway": (plain, "auto", Expect({"x-gateway-tier": "highspeed"})),
                   "gateway hit": (cached, "auto", Expect({"x-gateway-cache": "hit"}))}
        rows = hit_vs_raw(targets, clients, a.duration)
        steps = workload(a.scale)
        engine: dict[str, tuple[float, float]] = {}
        tallies = {}
        for name, url in (("plain", plain), ("cache", cached)):
            before = sim_counters(sim)
            tallies[name] = replay(url, steps)
            after = sim_counters(sim)
            engine[name] = (after[0] - before[0], after[1] - before[1])
        text = report(a, rows, tallies["cache"], tallies["plain"], engine)
        (outdir / "raw.json").write_text(json.dumps({"rows": rows, "engine": engine}, indent=1))
        a.report.parent.mkdir(parents=True, exist_ok=True)
        a.report.write_text(text)
        print(text)
    finally:
        for s in reversed(services):
            s.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
