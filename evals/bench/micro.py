"""Micro-benchmark of the gateway's own per-request work, in process (no sockets).

    python -m evals.bench.micro [--rules routing_rules.yaml] [--repeat 7] [--cpu 0] [--strict]

Times, on prebuilt objects, for a few typical request shapes (short chat, tools, JSON
mode, code, a 20 KB summarization prompt):

* ``classify+route``: ``Classifier(rules).classify(req, headers)`` then
  ``Router(rules).decide(cls, {})`` (target < 50 us per request);
* ``parse`` (for information): ``parse_chat(body_bytes)``, which runs before them;

the learned classifier on prompts no header, shape or cue decides (the model runs), each
call timed on its own: P99 of a typical prompt (target < 100 us) and of a 20 KB one
(target < 500 us), in this thread's CPU time (the wall clock of a shared machine counts
other processes' time slices);

and the default rule's quality checks (``rules.default.checks``, via ``run_checks``) on a
1,000-token (~4,500 characters) prose answer (target < 200 us), each check on its own too,
plus two informational answers (Markdown with HTML in a code block; a degenerate loop).

Each figure is the median (and min) over ``--repeat`` timeit repeats of an auto-sized
loop, in microseconds per operation. ``--strict`` exits 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
import timeit
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from multidict import CIMultiDict, CIMultiDictProxy

from evals.bench.texts import (
    SUMMARY_PROMPT_CHARS,
    markdown_answer,
    prose,
    request_body,
    request_shapes,
)
from gateway.checks.base import Output, RequestFacts, run_checks
from gateway.checks.loopguard import LoopGuard
from gateway.checks.registry import build_checks
from gateway.request.model import ClientRequest, parse_chat
from gateway.routing.classify import Classifier
from gateway.routing.router import RouteDecision, Router
from gateway.rules.schema import load_rules
from gateway.server.state import Gateway
from gateway.settings import REPO_RULES, load_settings
from gateway.upstream.framing import SSEFramer
from gateway.upstream.sse import StreamState

CLASSIFY_ROUTE_TARGET_US = 50.0
MODEL_P99_TARGET_US, MODEL_P99_20KB_TARGET_US = 100.0, 500.0
LOOP_GUARD_TARGET_US = 5.0  # of the ~20 us a relayed chunk may cost
CHECKS_TARGET_US = 200.0
ANSWER_CHARS = 4_500  # ~1,000 tokens of English prose


_HEADERS = {
    "Host": "127.0.0.1:8080",
    "User-Agent": "OpenAI/Python 1.54.0",
    "Accept": "application/json",
    "Content-Type": "application/json",
    "Authorization": "Bearer sk-bench",
    "Content-Length": "512",
    "X-Stainless-Lang": "python",
    "X-Stainless-Runtime": "CPython",
    "X-Stainless-Retry-Count": "0",
    "Connection": "keep-alive",
}


@dataclass(frozen=True)
class Timing:
    name: str
    median_us: float
    min_us: float
    target_us: float | None = None
    p99_us: float | None = None  # when set, the target is on the P99 of single calls

    @property
    def ok(self) -> bool | None:
        if self.target_us is None:
            return None
        return (self.median_us if self.p99_us is None else self.p99_us) < self.target_us


def time_us(
    name: str, fn: Callable[[], object], repeat: int, target_us: float | None = None, per: int = 1
) -> Timing:
    """µs per operation; ``per``: operations in one call of ``fn``."""
    timer = timeit.Timer(fn)
    number, _ = timer.autorange()  # loops that take >= 0.2 s
    per_op = [t / number / per * 1e6 for t in timer.repeat(repeat, number)]
    return Timing(name, statistics.median(per_op), min(per_op), target_us)


def per_call_us(name: str, fn: Callable[[], object], calls: int, target_us: float) -> Timing:
    """Median and P99 of ``calls`` single calls, in this thread's CPU time (us)."""
    for _ in range(200):
        fn()
    out = []
    for _ in range(calls):
        c0 = time.thread_time_ns()
        fn()
        out.append((time.thread_time_ns() - c0) / 1000)
    out.sort()
    return Timing(name, statistics.median(out), out[0], target_us, out[int(0.99 * (len(out) - 1))])


def model_timings(classifier: Classifier, headers: Mapping[str, str], calls: int) -> list[Timing]:
    """The classifier where the model decides: typical prompts, and a 20 KB one."""
    typical = [
        "Write a Python function that reverses a string.",
        "In my React app the list flickers every time the parent re-renders. How do I stop that?",
        "If 5 workers build a wall in 8 days, how long would 4 workers take?",
        "Extract every email address from the following: Contact sales@acme.io or, for "
        "partnerships, anna.berg@acme.io. Our old address info@acme-old.com is not monitored.",
        "Can you recommend a good sci-fi series to watch? I liked The Expanse and Dark.",
    ]
    reqs = [parse_chat(request_body([{"role": "user", "content": t}])) for t in typical]
    big = parse_chat(
        request_body(
            [
                {
                    "role": "user",
                    "content": prose(SUMMARY_PROMPT_CHARS, seed=7)
                    + "\n\nWhat do you make of this?",
                }
            ]
        )
    )
    for r in (*reqs, big):
        if not classifier.classify(r, headers).task_source.startswith(("model", "uncertain")):
            raise SystemExit("a model-timing prompt was decided before the model: re-pick it")
    it = iter(range(1 << 62))

    def one_typical() -> object:
        return classifier.classify(reqs[next(it) % len(reqs)], headers)

    return [
        per_call_us(
            "classify, model decides: typical prompt (48-170 chars), P99 per call",
            one_typical,
            calls,
            MODEL_P99_TARGET_US,
        ),
        per_call_us(
            f"classify, model decides: {len(big.cue_text):,}-char prompt, P99 per call",
            partial(classifier.classify, big, headers),
            max(calls // 4, 500),
            MODEL_P99_20KB_TARGET_US,
        ),
    ]


def _classify_route(
    classifier: Classifier, router: Router, req: ClientRequest, headers: Mapping[str, str]
) -> RouteDecision:
    return router.decide(classifier.classify(req, headers), {})


def run(rules_path: Path, repeat: int) -> list[Timing]:
    rules = load_rules(rules_path)
    classifier, router = Classifier(rules), Router(rules)
    headers = CIMultiDictProxy(CIMultiDict(_HEADERS))  # what aiohttp hands the gateway
    out: list[Timing] = []
    for name, raw, task in request_shapes():
        req = parse_chat(raw)
        decision = router.decide(classifier.classify(req, headers), {})
        if decision.cls.task != task:
            raise SystemExit(
                f"{name}: classified as {decision.cls.task}, expected {task}: "
                "the shape no longer measures what it should"
            )
        label = f"{name} [{task} -> {decision.rule}, {len(raw):,} B]"
        out.append(
            time_us(
                f"classify+route: {label}",
                partial(_classify_route, classifier, router, req, headers),
                repeat,
                CLASSIFY_ROUTE_TARGET_US,
            )
        )
        out.append(time_us(f"parse (info): {label}", partial(parse_chat, raw), repeat))
    out += model_timings(classifier, headers, 2000 * repeat)

    registry = build_checks(rules.checks)
    checks = [registry[n] for n in rules.default.checks]
    facts = RequestFacts(max_tokens_set=False, json_mode=False, json_schema=None, tools={})
    answers = [
        ("prose", prose(ANSWER_CHARS, seed=1), True),
        ("markdown+html (info)", markdown_answer(ANSWER_CHARS), True),
        ("looping (info)", ("I will repeat this sentence again. " * 130)[:ANSWER_CHARS], False),
    ]
    names = "+".join(rules.default.checks)
    for label, text, should_pass in answers:
        answer = Output(text=text, finish_reason="stop", tool_calls=[])
        if (run_checks(checks, answer, facts) is None) != should_pass:
            raise SystemExit(
                f"checks on the {label} answer did not "
                f"{'pass' if should_pass else 'fail'} as they should"
            )
        target = CHECKS_TARGET_US if label == "prose" else None
        out.append(
            time_us(
                f"checks {names}: {label} answer, {len(text):,} chars",
                partial(run_checks, checks, answer, facts),
                repeat,
                target,
            )
        )
        if label == "prose":
            out += [
                time_us(f"  one check (info): {c.name}", partial(c.run, answer, facts), repeat)
                for c in checks
            ]
    out.append(
        time_us(
            "live loop guard, per 1-word chunk of a prose stream (2,000 chunks)",
            partial(_loop_guard, prose(ANSWER_CHARS * 3, seed=2).split(" ")[:2000]),
            repeat,
            LOOP_GUARD_TARGET_US,
            per=2000,
        )
    )
    events = _bench_stream(50)
    n = events.count(b"\n\n")
    out.append(
        time_us(
            f"SSE: one read of {n} events, framed, decoded, kept (per event)",
            partial(_read_block, events),
            repeat,
            per=n,
        )
    )
    out.append(asyncio.run(_swap_timing(rules_path, repeat)))
    return out


async def _swap_timing(rules_path: Path, repeat: int) -> Timing:
    """What a new rules version costs the event loop of every replica once it is parsed
    and checked (in a thread): the new snapshot, built and published (same tiers)."""
    rules = load_rules(rules_path)
    gw = Gateway.build(load_settings({}), rules)
    try:
        return time_us(
            "rules swap on the event loop (info): Gateway.use_rules, these rules",
            partial(gw.use_rules, rules),
            repeat,
        )
    finally:
        await gw.close()


def _bench_stream(chunks: int) -> bytes:
    """The SSE events of the proxy benchmark's fake upstream (its HTTP chunking removed)."""
    from evals.bench.fake_upstream import stream_events

    out = b""
    for piece in stream_events(chunks, include_usage=True)[:-1]:  # the zero chunk last
        size, rest = piece.split(b"\r\n", 1)
        out += rest[: int(size, 16)]
    return out


def _read_block(events: bytes) -> None:
    """What the gateway does with one read of a non-streamed call's upstream stream."""
    state = StreamState(True)
    state.events = []
    state.feed_block(SSEFramer().feed_bytes(events))
    if not state.done:
        raise SystemExit("the benchmark stream did not read to its end")


def _loop_guard(words: list[str]) -> None:
    """What the relay does per chunk with the loop guard on (the text bookkeeping included)."""
    state, guard = StreamState(True), LoopGuard()
    for w in words:
        state.parts.append(w + " ")
        state.chars += len(w) + 1
        guard.update(state)


def render(timings: list[Timing]) -> str:
    lines = ["| operation | us/op median (min) | P99 | target | verdict |", "|---|---|---|---|---|"]
    for t in timings:
        target = "" if t.target_us is None else f"< {t.target_us:g} us"
        verdict = {True: "MET", False: "MISSED", None: ""}[t.ok]
        p99 = "" if t.p99_us is None else f"{t.p99_us:.2f}"
        lines.append(
            f"| {t.name} | {t.median_us:.2f} ({t.min_us:.2f}) | {p99} | {target} | {verdict} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m evals.bench.micro", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--rules", type=Path, default=REPO_RULES)
    ap.add_argument("--repeat", type=int, default=7, help="timeit repeats per figure")
    ap.add_argument("--cpu", type=int, default=None, help="pin this process to one CPU")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    a = ap.parse_args(argv)
    if a.cpu is not None:
        os.sched_setaffinity(0, {a.cpu})
    timings = run(a.rules, a.repeat)
    if a.json:
        print(json.dumps([{**t.__dict__, "ok": t.ok} for t in timings], indent=1))
    else:
        print(
            f"python {sys.version.split()[0]}; rules {a.rules}; median (min) of {a.repeat} "
            "timeit repeats\n"
        )
        print(render(timings))
    return 1 if a.strict and any(t.ok is False for t in timings) else 0


if __name__ == "__main__":
    raise SystemExit(main())
