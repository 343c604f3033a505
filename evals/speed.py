"""``python -m evals speed``: TTFT, TPOT, throughput and latency of OpenAI-compatible targets.

    python -m evals speed \
        --target fast=http://127.0.0.1:8080/v1,x-gateway-tier:highspeed \
        --target std=http://127.0.0.1:8080/v1,x-gateway-tier:standard \
        [--concurrency 1,4,16] [--requests 32 | --duration 20] [--prompts FILE.jsonl] \
        [--replay TRAFFIC.jsonl] [--model auto] [--api-key KEY] [--rounds 2] [--out DIR]

Every request is a streamed chat (or text) completion with
``stream_options.include_usage``. Per request: TTFT = time to the first content token
(content, reasoning content, tool-call arguments or completion text), TPOT = (last token
time - first token time) / (tokens - 1), latency = time to the end of the stream. Tokens
are the final usage chunk's ``completion_tokens``, else the number of content chunks. A
request is an error when the status is not 200, the stream carries an error event, ends
without ``[DONE]`` or has no content, or the connection fails or times out.

**Closed loop** (default): for each concurrency C of the sweep, C workers send requests
back to back, ``--requests`` per target (or for ``--duration`` seconds). The targets are
interleaved within each cell: the cell is split into ``--rounds`` slices that alternate
between the targets (A, B, A, B), so drifting machine noise hits all of them. All targets
get the same prompt sequence (``--prompts``: one ``{"messages": [...], "max_tokens": N}``
per line, other fields pass through to the body; ``{"prompt": ...}`` goes to
``/completions``).

**Open loop** (``--replay``): recorded traffic, one ``{"t": seconds_since_start, "body":
{...}}`` per line, is sent with its original timing to each target in turn, whatever the
answers' speed; the recorded model is kept unless ``--model`` is given.

Prints one Markdown table per cell (TTFT p50/p95/p99, TPOT p50/p95, latency p50/p95/p99,
aggregate output tokens/s, requests/s, errors) with the ratio of the first target over the
second, and writes ``report.md``, ``raw.json`` (every request, with its ``x-gateway-*`` and
``x-sim-*`` response headers) and ``latency.png`` / ``throughput.png`` to ``--out``
(default ``results/speed-<UTC stamp>/``).
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import os
import platform
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from evals import report_util as ru
from evals.bench.common import run as run_loop

PROMPTS = Path(__file__).resolve().parent / "data" / "prompts_speed.jsonl"
KEPT_HEADERS = ("x-gateway-", "x-sim-")
FALLBACK_COMMENT = b": x-gateway-fallback "
Body = dict[str, Any]


# --- inputs -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """An OpenAI-compatible base URL and the extra headers sent to it."""

    name: str
    base_url: str
    headers: tuple[tuple[str, str], ...] = ()

    def url(self, body: Body) -> str:
        path = "completions" if "prompt" in body and "messages" not in body else "chat/completions"
        return f"{self.base_url.rstrip('/')}/{path}"


def parse_target(spec: str) -> Target:
    """``NAME=BASE_URL[,header:value...]``."""
    name, sep, rest = spec.partition("=")
    parts = rest.split(",")
    if not sep or not name or not parts[0].startswith(("http://", "https://")):
        raise argparse.ArgumentTypeError(f"expected NAME=BASE_URL[,header:value...], got {spec!r}")
    headers = []
    for part in parts[1:]:
        key, colon, value = part.partition(":")
        if not colon or not key.strip():
            raise argparse.ArgumentTypeError(f"bad header {part!r} in {spec!r} (header:value)")
        headers.append((key.strip(), value.strip()))
    return Target(name, parts[0], tuple(headers))


def parse_concurrency(text: str) -> list[int]:
    try:
        levels = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected e.g. 1,4,16, got {text!r}") from None
    if not levels or min(levels) < 1:
        raise argparse.ArgumentTypeError("concurrency levels must be >= 1")
    return levels


def _jsonl(path: Path) -> Iterator[Any]:
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            yield json.loads(line)


def streamed(body: Body, model: str | None) -> Body:
    """A copy of ``body`` asking for a stream with a usage chunk (model set if given)."""
    out = copy.deepcopy(body)
    if model is not None or "model" not in out:
        out["model"] = model or "auto"
    out["stream"] = True
    out["stream_options"] = {**(out.get("stream_options") or {}), "include_usage": True}
    return out


def load_prompts(path: Path, model: str | None) -> list[Body]:
    bodies = [streamed(p, model or "auto") for p in _jsonl(path)]
    if not bodies:
        raise SystemExit(f"no prompts in {path}")
    return bodies


def load_replay(path: Path, model: str | None) -> list[tuple[float, Body]]:
    """(offset in seconds, body) sorted by offset, starting at 0."""
    entries = sorted((float(e["t"]), streamed(e["body"], model)) for e in _jsonl(path))
    if not entries:
        raise SystemExit(f"no entries in {path}")
    first = entries[0][0]
    return [(t - first, body) for t, body in entries]


# --- one request ------------------------------------------------------------------------------


@dataclass
class Sample:
    """One measured request (seconds; ``start`` is relative to its slice's start)."""

    target: str
    cell: str
    start: float
    ok: bool = False
    error: str | None = None
    status: int | None = None
    ttft: float | None = None
    tpot: float | None = None
    latency: float | None = None
    tokens: int = 0
    token_source: str = "chunks"
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class StreamState:
    """What the SSE parser has seen so far."""

    first: float | None = None
    last: float | None = None
    chunks: int = 0
    usage_tokens: int | None = None
    done: bool = False
    error: str | None = None
    fallback: str | None = None


def _has_content(event: Body) -> bool:
    for choice in event.get("choices") or ():
        delta = choice.get("delta") or {}
        if choice.get("text") or delta.get("content") or delta.get("reasoning_content"):
            return True
        if any((c.get("function") or {}).get("arguments") for c in delta.get("tool_calls") or ()):
            return True
    return False


def feed_line(state: StreamState, line: bytes, now: float) -> None:
    """Update ``state`` with one line of an SSE body."""
    if line.startswith(FALLBACK_COMMENT):
        state.fallback = line[len(FALLBACK_COMMENT) :].decode(errors="replace").strip()
        return
    if not line.startswith(b"data:"):
        return
    data = line[5:].strip()
    if data == b"[DONE]":
        state.done = True
        return
    try:
        event = orjson.loads(data)
    except orjson.JSONDecodeError:
        state.error = state.error or "bad_event"
        return
    if not isinstance(event, dict):
        return
    if "error" in event:
        err = event["error"] if isinstance(event["error"], dict) else {}
        state.error = state.error or f"error_event:{err.get('code') or 'unknown'}"
    usage = event.get("usage")
    if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
        state.usage_tokens = usage["completion_tokens"]
    if _has_content(event):
        state.first = now if state.first is None else state.first
        state.last = now
        state.chunks += 1


def finish_sample(s: Sample, st: StreamState, t0: float, end: float) -> None:
    """Fill timings and the verdict of a 200 stream from the parser's state."""
    if st.fallback:
        s.headers["x-gateway-fallback"] = st.fallback
    s.latency = end - t0
    s.tokens = st.usage_tokens if st.usage_tokens is not None else st.chunks
    s.token_source = "usage" if st.usage_tokens is not None else "chunks"
    if st.first is not None and st.last is not None:
        s.ttft = st.first - t0
        s.tpot = (st.last - st.first) / (s.tokens - 1) if s.tokens > 1 else None
    s.error = _verdict(st)
    s.ok = s.error is None


def _verdict(st: StreamState) -> str | None:
    """Why a finished 200 stream counts as an error, or None."""
    if st.error:
        return st.error
    if not st.done:
        return "incomplete"
    return None if st.first is not None else "no_content"


async def _post(
    session: aiohttp.ClientSession, url: str, data: bytes, headers: dict[str, str]
) -> aiohttp.ClientResponse:
    """POST; once more on a fresh connection when a pooled keep-alive one was closed by the
    server (llama.cpp's closes it after every stream, whatever its Keep-Alive header says)."""
    try:
        return await session.post(url, data=data, headers=headers)
    except aiohttp.ClientConnectorError:
        raise
    except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError):
        return await session.post(url, data=data, headers=headers)


async def send(
    session: aiohttp.ClientSession,
    target: Target,
    body: Body,
    headers: dict[str, str],
    cell: str,
    origin: float,
) -> Sample:
    """Stream one request and measure it; never raises for a failed request."""
    t0 = time.perf_counter()
    s = Sample(target.name, cell, start=t0 - origin)
    try:
        async with await _post(session, target.url(body), orjson.dumps(body), headers) as resp:
            s.status = resp.status
            s.headers = {
                k.lower(): v for k, v in resp.headers.items() if k.lower().startswith(KEPT_HEADERS)
            }
            if resp.status != 200:
                await resp.read()
                s.error = f"http_{resp.status}"
                return s
            st = StreamState()
            async for line in resp.content:
                feed_line(st, line.rstrip(b"\r\n"), time.perf_counter())
            finish_sample(s, st, t0, time.perf_counter())
    except TimeoutError:
        s.error = "timeout"
    except (aiohttp.ClientError, OSError, ValueError) as exc:
        s.error = type(exc).__name__
    return s


# --- load shapes ------------------------------------------------------------------------------


@dataclass
class Runner:
    """Shared state of a run: the HTTP session, request headers, progress bar, results."""

    session: aiohttp.ClientSession
    api_key: str | None
    bar: Any
    samples: list[Sample] = field(default_factory=list)
    elapsed: dict[tuple[str, str], float] = field(default_factory=dict)

    def headers(self, target: Target) -> dict[str, str]:
        h = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if self.api_key:
            h["Authorization"] = f"Bearer {self.api_key}"
        h.update(dict(target.headers))
        return h

    async def one(self, target: Target, body: Body, cell: str, origin: float) -> Sample:
        sample = await send(self.session, target, body, self.headers(target), cell, origin)
        self.bar.update(1)
        return sample

    def record(self, target: Target, cell: str, samples: list[Sample], elapsed: float) -> None:
        self.samples += samples
        key = (target.name, cell)
        self.elapsed[key] = self.elapsed.get(key, 0.0) + elapsed


async def closed_loop(
    r: Runner, target: Target, cell: str, concurrency: int, next_body: Callable[[], Body | None]
) -> None:
    """``concurrency`` workers send back to back until ``next_body`` returns None."""
    origin = time.perf_counter()
    done: list[Sample] = []

    async def worker() -> None:
        while (body := next_body()) is not None:
            done.append(await r.one(target, body, cell, origin))

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    r.record(target, cell, done, time.perf_counter() - origin)


async def open_loop(
    r: Runner, target: Target, cell: str, schedule: Sequence[tuple[float, Body]]
) -> None:
    """Send each body at its offset from now, whether or not earlier ones finished."""
    origin = time.perf_counter()

    async def at(offset: float, body: Body) -> Sample:
        await asyncio.sleep(max(0.0, origin + offset - time.perf_counter()))
        return await r.one(target, body, cell, origin)

    done = await asyncio.gather(*(at(t, b) for t, b in schedule))
    r.record(target, cell, list(done), time.perf_counter() - origin)


def body_source(
    prompts: Sequence[Body], start: int, count: int | None, deadline: float | None
) -> tuple[Callable[[], Body | None], Callable[[], int]]:
    """(next body or None when the slice is over, how many were handed out)."""
    handed = [0]

    def next_body() -> Body | None:
        if count is not None and handed[0] >= count:
            return None
        if deadline is not None and time.perf_counter() >= deadline:
            return None
        body = prompts[(start + handed[0]) % len(prompts)]
        handed[0] += 1
        return body

    return next_body, lambda: handed[0]


def split(total: int, parts: int) -> list[int]:
    """``total`` as ``parts`` near-equal integers, larger ones first."""
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


async def sweep(
    r: Runner, targets: Sequence[Target], prompts: Sequence[Body], a: argparse.Namespace
) -> None:
    """The closed-loop cells, each split into rounds that alternate between the targets."""
    for c in a.concurrency:
        cell = f"c={c}"
        offsets = dict.fromkeys((t.name for t in targets), 0)
        slices = split(a.requests, a.rounds) if a.duration is None else [None] * a.rounds
        for size in slices:
            if size == 0:
                continue
            for target in targets:
                r.bar.set_description(f"{cell} {target.name}")
                deadline = (
                    None if a.duration is None else (time.perf_counter() + a.duration / a.rounds)
                )
                next_body, handed = body_source(prompts, offsets[target.name], size, deadline)
                await closed_loop(r, target, cell, c, next_body)
                offsets[target.name] += handed()


async def replay(
    r: Runner, targets: Sequence[Target], schedule: Sequence[tuple[float, Body]]
) -> None:
    for target in targets:
        r.bar.set_description(f"replay {target.name}")
        await open_loop(r, target, "replay", schedule)


async def warm_up(r: Runner, targets: Sequence[Target], body: Body, n: int) -> None:
    for target in targets:
        for _ in range(n):
            await send(r.session, target, body, r.headers(target), "warmup", time.perf_counter())


# --- summaries --------------------------------------------------------------------------------

METRICS = (  # (key, column title, unit) in table order
    ("ttft_p50", "TTFT p50", "ms"),
    ("ttft_p95", "TTFT p95", "ms"),
    ("ttft_p99", "TTFT p99", "ms"),
    ("tpot_p50", "TPOT p50", "ms"),
    ("tpot_p95", "TPOT p95", "ms"),
    ("latency_p50", "latency p50", "ms"),
    ("latency_p95", "latency p95", "ms"),
    ("latency_p99", "latency p99", "ms"),
    ("tok_s", "tok/s", ""),
    ("req_s", "req/s", ""),
)
SENTENCE = (
    ("ttft_p50", "TTFT p50"),
    ("tpot_p50", "TPOT"),
    ("latency_p50", "latency p50"),
    ("tok_s", "tok/s"),
    ("req_s", "req/s"),
)


def _ms(values: list[float], p: float) -> float | None:
    v = ru.percentile(values, p)
    return None if v is None else v * 1000


def summarize(samples: list[Sample], elapsed: float) -> dict[str, Any]:
    """Percentiles (ms) over the good requests, aggregate rates, error counts."""
    good = [s for s in samples if s.ok]
    ttft = [s.ttft for s in good if s.ttft is not None]
    tpot = [s.tpot for s in good if s.tpot is not None]
    lat = [s.latency for s in good if s.latency is not None]
    errors: dict[str, int] = {}
    for s in samples:
        if s.error:
            errors[s.error] = errors.get(s.error, 0) + 1
    tiers: dict[str, int] = {}
    for s in good:
        if tier := s.headers.get("x-gateway-tier"):
            tiers[tier] = tiers.get(tier, 0) + 1
    tokens = sum(s.tokens for s in good)
    out: dict[str, Any] = {
        "requests": len(samples),
        "ok": len(good),
        "errors": errors,
        "elapsed_s": elapsed,
        "output_tokens": tokens,
        "tiers": tiers,
        "fallbacks": sum("x-gateway-fallback" in s.headers for s in good),
    }
    for p in (50, 95, 99):
        out[f"ttft_p{p}"], out[f"latency_p{p}"] = _ms(ttft, p), _ms(lat, p)
    out["tpot_p50"], out["tpot_p95"] = _ms(tpot, 50), _ms(tpot, 95)
    out["tok_s"] = tokens / elapsed if elapsed > 0 else None
    out["req_s"] = len(good) / elapsed if elapsed > 0 else None
    return out


def summaries(
    r: Runner, targets: Sequence[Target], cells: Sequence[str]
) -> dict[str, dict[str, dict[str, Any]]]:
    """cell -> target -> summary."""
    return {
        cell: {
            t.name: summarize(
                [s for s in r.samples if s.cell == cell and s.target == t.name],
                r.elapsed.get((t.name, cell), 0),
            )
            for t in targets
        }
        for cell in cells
    }


# --- report -----------------------------------------------------------------------------------


def _errors_text(errors: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(errors.items())) or "0"


def cell_table(cell: dict[str, dict[str, Any]]) -> str:
    names = list(cell)
    rows: list[list[object]] = [
        [
            name,
            f"{s['ok']}/{s['requests']}",
            *(ru.fmt_num(s[k]) for k, _, _ in METRICS),
            _errors_text(s["errors"]),
        ]
        for name, s in cell.items()
    ]
    if len(names) >= 2:
        a, b = cell[names[0]], cell[names[1]]
        rows.append(
            [f"{names[0]}/{names[1]}", "", *(ru.fmt_ratio(a[k], b[k]) for k, _, _ in METRICS), ""]
        )
    headers = ["target", "ok/n", *(f"{t} ({u})" if u else t for _, t, u in METRICS), "errors"]
    return ru.md_table(headers, rows, "lr" + "r" * len(METRICS) + "l")


def ratio_sentence(cell: dict[str, dict[str, Any]]) -> str:
    names = list(cell)
    if len(names) < 2:
        return ""
    a, b = cell[names[0]], cell[names[1]]
    parts = ", ".join(f"{label} {ru.fmt_ratio(a[k], b[k])}" for k, label in SENTENCE)
    return f"{names[0]}/{names[1]}: {parts}"


def tiers_sentence(cell: dict[str, dict[str, Any]]) -> str:
    parts = []
    for name, s in cell.items():
        if s["tiers"]:
            tiers = ", ".join(f"{t} {n}" for t, n in sorted(s["tiers"].items()))
            parts.append(f"{name}: {tiers} ({s['fallbacks']} fell back)")
    return "answered by (x-gateway-tier): " + "; ".join(parts) if parts else ""


def cell_title(cell: str, meta: dict[str, Any]) -> str:
    if cell == "replay":
        return f"### replay (open loop, {meta['replay_entries']} requests per target)"
    amount = f"{meta['requests']} requests" if meta["duration"] is None else f"{meta['duration']} s"
    return f"### concurrency {cell[2:]} ({amount} per target, {meta['rounds']} rounds)"


def render(sums: dict[str, dict[str, dict[str, Any]]], meta: dict[str, Any]) -> str:
    parts = [
        "# Speed: TTFT, TPOT, throughput",
        f"{meta['started_utc']}, {meta['host']}; model `{meta['model']}`; prompts "
        f"`{meta['prompts']}`. Times in ms, percentiles over successful requests, tok/s "
        "and req/s aggregate over the cell's wall time.",
        ru.md_table(
            ("target", "base URL", "headers"),
            [(t["name"], t["base_url"], ", ".join(t["headers"]) or "-") for t in meta["targets"]],
        ),
    ]
    for cell, per_target in sums.items():
        parts += [cell_title(cell, meta), cell_table(per_target)]
        parts += [line for line in (ratio_sentence(per_target), tiers_sentence(per_target)) if line]
    parts.append("![latency](latency.png)\n\n![throughput](throughput.png)")
    return "\n\n".join(parts) + "\n"


def _series(sums: dict[str, dict[str, dict[str, Any]]], target: str, key: str) -> list[float]:
    return [float("nan") if (v := sums[c][target][key]) is None else v for c in sums]


def plot(sums: dict[str, dict[str, dict[str, Any]]], targets: Sequence[str], out: Path) -> None:
    """latency.png (TTFT, TPOT, latency percentiles) and throughput.png, x = cell."""
    plt = ru.pyplot()
    cells = list(sums)
    xlabel = "open-loop replay" if cells == ["replay"] else "concurrency (closed loop)"
    panels = (
        ("TTFT (ms)", "ttft", (50, 95, 99)),
        ("TPOT (ms)", "tpot", (50, 95)),
        ("latency (ms)", "latency", (50, 95, 99)),
    )
    styles = {50: "-", 95: "--", 99: ":"}
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for ax, (title, key, ps) in zip(axes, panels, strict=True):
        for i, name in enumerate(targets):
            for p in ps:
                ax.plot(
                    cells,
                    _series(sums, name, f"{key}_p{p}"),
                    styles[p],
                    marker="o",
                    color=f"C{i}",
                    label=f"{name} p{p}",
                )
        _decorate(ax, title, xlabel)
    ru.save_figure(fig, out / "latency.png")
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, (title, key) in zip(
        axes, (("output tokens/s", "tok_s"), ("requests/s", "req_s")), strict=True
    ):
        for i, name in enumerate(targets):
            ax.plot(cells, _series(sums, name, key), marker="o", color=f"C{i}", label=name)
        _decorate(ax, title, xlabel)
    ru.save_figure(fig, out / "throughput.png")


def _decorate(ax: Any, title: str, xlabel: str) -> None:
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)


# --- entry point ------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m evals speed", description="TTFT, TPOT, throughput and latency percentiles."
    )
    ap.add_argument(
        "--target",
        type=parse_target,
        action="append",
        required=True,
        metavar="NAME=BASE_URL[,header:value...]",
    )
    ap.add_argument("--model", default=None, help="model field (default auto; replay: recorded)")
    ap.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY"))
    ap.add_argument("--concurrency", type=parse_concurrency, default=[1, 4, 16])
    amount = ap.add_mutually_exclusive_group()
    amount.add_argument("--requests", type=int, default=32, help="per target and cell")
    amount.add_argument("--duration", type=float, default=None, help="seconds per target and cell")
    ap.add_argument("--rounds", type=int, default=2, help="slices per cell alternating targets")
    ap.add_argument("--prompts", type=Path, default=PROMPTS)
    ap.add_argument("--replay", type=Path, default=None, help="traffic .jsonl (open loop)")
    ap.add_argument("--warmup", type=int, default=1, help="unrecorded requests per target")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per request")
    ap.add_argument(
        "--out", type=Path, default=None, help="output folder (default results/speed-<UTC stamp>/)"
    )
    ap.add_argument("--no-progress", action="store_true")
    a = ap.parse_args(argv)
    names = [t.name for t in a.target]
    if len(set(names)) != len(names):
        ap.error(f"target names must be unique: {names}")
    if a.requests < 1 or a.rounds < 1 or (a.duration is not None and a.duration <= 0):
        ap.error("--requests, --rounds and --duration must be positive")
    return a


def metadata(a: argparse.Namespace, replay_entries: int | None) -> dict[str, Any]:
    return {
        "started_utc": ru.utc_stamp(),
        "host": f"{platform.node()} ({os.cpu_count()} CPUs)",
        "targets": [
            {"name": t.name, "base_url": t.base_url, "headers": [f"{k}:{v}" for k, v in t.headers]}
            for t in a.target
        ],
        "model": a.model or ("as recorded" if a.replay else "auto"),
        "prompts": ru.shown_path(a.replay or a.prompts),
        "concurrency": a.concurrency,
        "requests": a.requests,
        "duration": a.duration,
        "rounds": a.rounds,
        "replay_entries": replay_entries,
        "warmup": a.warmup,
        "timeout_s": a.timeout,
    }


async def measure(
    a: argparse.Namespace, prompts: list[Body], schedule: list[tuple[float, Body]] | None
) -> Runner:
    per_target = (
        len(schedule) if schedule else None if a.duration else a.requests * len(a.concurrency)
    )
    total = None if per_target is None else per_target * len(a.target)
    timeout = aiohttp.ClientTimeout(total=a.timeout)
    # idle connections go before an engine's own 5 s keep-alive closes them under us
    connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=4)
    async with aiohttp.ClientSession(
        timeout=timeout, connector=connector, read_bufsize=1 << 20
    ) as session:
        with ru.progress(total, "speed", not a.no_progress) as bar:
            r = Runner(session, a.api_key, bar)
            await warm_up(r, a.target, (schedule[0][1] if schedule else prompts[0]), a.warmup)
            if schedule:
                await replay(r, a.target, schedule)
            else:
                await sweep(r, a.target, prompts, a)
    return r


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    out = a.out or ru.default_out("speed")
    schedule = load_replay(a.replay, a.model) if a.replay else None
    prompts = [] if schedule else load_prompts(a.prompts, a.model)
    r = run_loop(measure(a, prompts, schedule))
    cells = ["replay"] if schedule else [f"c={c}" for c in a.concurrency]
    sums = summaries(r, a.target, cells)
    meta = metadata(a, len(schedule) if schedule else None)
    report = render(sums, meta)
    raw = {"meta": meta, "cells": sums, "samples": [asdict(s) for s in r.samples]}
    ru.write_outputs(out, report, raw)
    plot(sums, [t.name for t in a.target], out)
    print(report)
    print(f"written to {out}")
    return 0 if any(s.ok for s in r.samples) else 1


if __name__ == "__main__":
    raise SystemExit(main())
