"""Closed-loop HTTP/1.1 load generator for OpenAI-style chat requests (asyncio + uvloop).

    python -m evals.bench.loadgen http://127.0.0.1:8080/v1/chat/completions -c 8 -d 3 \
        [--stream --expect-events 53] [--expect-header x-gateway-tier=highspeed] \
        [--forbid-header x-gateway-fallback] [--collect-header x-gateway-overhead-ms]

Each of ``-c`` keep-alive connections sends the request, reads the whole response and
repeats, for ``--warmup`` unrecorded seconds and then ``--duration`` measured seconds (or
until ``--max-requests``). Per request it records the total time and, for SSE streams, the
time to the first ``data:`` event (TTFB). A response counts as an error unless it is a 200
that is complete (a JSON object; a stream that ends in ``[DONE]`` with the expected number
of events) and carries the expected headers. Prints one JSON object on stdout.
Loopback targets only. Adapted from the team's peer harness.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from evals.bench.common import chat_body, percentile, require_loopback, run

_READ = 262144


@dataclass(frozen=True)
class Expect:
    """What makes a response good, beyond status 200 and a complete body."""

    headers: dict[str, str] = field(default_factory=dict)  # lower-case name -> exact value
    forbidden: tuple[str, ...] = ()  # lower-case header names that must be absent
    events: int | None = None  # SSE data events per stream, [DONE] included
    collect: str | None = None  # numeric header whose values are summarised


@dataclass
class Stats:
    ttfb: list[float] = field(default_factory=list)
    total: list[float] = field(default_factory=list)
    collected: list[float] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)
    events_seen: set[int] = field(default_factory=set)

    def err(self, kind: str) -> None:
        self.errors[kind] = self.errors.get(kind, 0) + 1


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    ttfb: float  # seconds to the first SSE data event (non-stream: to the whole body)
    events: int  # SSE data events (0 for a JSON body)
    complete: bool


def _parse_head(head: bytes) -> tuple[int, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    hdrs = {}
    for ln in lines[1:]:
        k, _, v = ln.partition(":")
        hdrs[k.strip().lower()] = v.strip()
    return status, hdrs


async def _read_chunked(
    reader: asyncio.StreamReader, t0: float, timeout: float
) -> tuple[float, int, bool]:
    """Bulk chunked decoder: (ttfb, SSE data events, saw [DONE]) of one streamed body."""
    ttfb: float | None = None
    events = 0
    done = False
    buf, pos, tail = b"", 0, b""
    while True:
        data = await asyncio.wait_for(reader.read(_READ), timeout)
        if not data:
            raise asyncio.IncompleteReadError(buf, None)
        if ttfb is None and b"data:" in data:
            ttfb = time.perf_counter() - t0
        buf, pos = buf[pos:] + data, 0
        while True:
            le = buf.find(b"\r\n", pos)
            if le < 0:
                break
            size = int(buf[pos:le].split(b";")[0], 16)
            if size == 0:
                if buf.find(b"\r\n", le + 2) < 0:
                    break  # need the final CRLF
                if len(buf) > le + 4:
                    raise ValueError("trailing data after the chunked body")
                return (ttfb if ttfb is not None else time.perf_counter() - t0), events, done
            if len(buf) < le + 2 + size + 2:
                break
            seg = tail + buf[le + 2 : le + 2 + size]  # tail: an event marker split by chunking
            events += seg.count(b"data:") - tail.count(b"data:")
            done = done or b"[DONE]" in seg
            tail = seg[-8:]
            pos = le + 2 + size + 2


async def _exchange(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    req: bytes,
    t0: float,
    timeout: float,
) -> Response:
    writer.write(req)
    status, hdrs = _parse_head(await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout))
    if "chunked" in hdrs.get("transfer-encoding", "").lower():
        ttfb, events, done = await _read_chunked(reader, t0, timeout)
        return Response(status, hdrs, ttfb, events, done)
    body = await asyncio.wait_for(reader.readexactly(int(hdrs.get("content-length", "0"))), timeout)
    return Response(status, hdrs, time.perf_counter() - t0, 0, body[:1] == b"{")


def _problem(r: Response, expect: Expect) -> str | None:
    """Why a response is not good, or None."""
    if r.status != 200:
        return f"status_{r.status}"
    if not r.complete:
        return "incomplete"
    if expect.events is not None and r.events != expect.events:
        return "events"
    for k, v in expect.headers.items():
        if r.headers.get(k) != v:
            return f"header_{k}={r.headers.get(k)}"
    for k in expect.forbidden:
        if k in r.headers:
            return f"header_{k}_present"
    return None


async def _connection(
    host: str,
    port: int,
    req: bytes,
    record_after: float,
    deadline: float,
    budget: list[int],
    expect: Expect,
    st: Stats,
    timeout: float,
) -> None:
    reader: asyncio.StreamReader | None = None
    writer: asyncio.StreamWriter | None = None
    while time.perf_counter() < deadline and budget[0] > 0:
        if writer is None or reader is None:
            try:
                reader, writer = await asyncio.open_connection(host, port)
            except OSError:
                st.err("connect")
                await asyncio.sleep(0.05)
                continue
        budget[0] -= 1
        t0 = time.perf_counter()
        try:
            r = await _exchange(reader, writer, req, t0, timeout)
        except (
            TimeoutError,
            asyncio.IncompleteReadError,
            ConnectionError,
            ValueError,
            IndexError,
        ) as e:
            st.err(type(e).__name__)
            writer.close()
            reader = writer = None
            continue
        total = time.perf_counter() - t0
        if r.headers.get("connection", "").lower() == "close":
            writer.close()
            reader = writer = None
        if t0 < record_after:
            continue  # warm-up: not recorded
        problem = _problem(r, expect)
        if problem is not None:
            st.err(problem)
            continue
        st.ttfb.append(r.ttfb)
        st.total.append(total)
        st.events_seen.add(r.events)
        if expect.collect and (v := r.headers.get(expect.collect)):
            try:
                st.collected.append(float(v))
            except ValueError:
                st.err(f"header_{expect.collect}_not_a_number")
    if writer is not None:
        writer.close()


def _ms_percentiles(values: list[float], scale: float = 1000.0) -> dict[str, float | None]:
    vals = sorted(values)
    out: dict[str, float | None] = {}
    for p in (50, 95, 99):
        v = percentile(vals, p)
        out[f"p{p}"] = None if v is None else round(v * scale, 3)
    return out


async def load(
    url: str,
    *,
    connections: int,
    duration: float,
    warmup: float,
    stream: bool,
    expect: Expect,
    max_requests: int = 2_000_000,
    timeout: float = 30.0,
    body: bytes | None = None,
) -> dict[str, object]:
    """Run one closed-loop measurement and return its summary (what ``main`` prints)."""
    u = urlsplit(url)
    host, port = u.hostname or "", u.port or 80
    require_loopback(host)
    body = chat_body(stream) if body is None else body
    req = (
        f"POST {u.path or '/'} HTTP/1.1\r\nHost: {host}:{port}\r\n"
        f"Content-Type: application/json\r\nAuthorization: Bearer sk-bench\r\n"
        f"Accept: {'text/event-stream' if stream else 'application/json'}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    st = Stats()
    record_after = time.perf_counter() + warmup
    deadline = record_after + duration
    budget = [max_requests]
    await asyncio.gather(
        *(
            _connection(host, port, req, record_after, deadline, budget, expect, st, timeout)
            for _ in range(connections)
        )
    )
    elapsed = time.perf_counter() - record_after
    ok = len(st.total)
    return {
        "url": url,
        "stream": stream,
        "connections": connections,
        "duration_s": round(elapsed, 3),
        "ok": ok,
        "errors": st.errors,
        "rps": round(ok / elapsed, 1) if elapsed > 0 else None,
        "ttfb_ms": _ms_percentiles(st.ttfb),
        "total_ms": _ms_percentiles(st.total),
        "events": sorted(st.events_seen),
        "capped": budget[0] <= 0,
        "collected": (
            {"header": expect.collect, **_ms_percentiles(st.collected, 1.0)}
            if st.collected
            else None
        ),
    }


def _header_pair(s: str) -> tuple[str, str]:
    k, sep, v = s.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {s!r}")
    return k.strip().lower(), v.strip()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("url")
    ap.add_argument("-c", "--connections", type=int, default=1)
    ap.add_argument("-d", "--duration", type=float, default=3.0, help="measured seconds")
    ap.add_argument("-w", "--warmup", type=float, default=0.5, help="unrecorded seconds first")
    ap.add_argument(
        "-n", "--max-requests", type=int, default=2_000_000, help="hard cap, warm-up included"
    )
    ap.add_argument("--stream", action="store_true")
    ap.add_argument("--timeout", type=float, default=30.0, help="per read, seconds")
    ap.add_argument("--expect-events", type=int, default=None)
    ap.add_argument("--expect-header", type=_header_pair, action="append", default=[])
    ap.add_argument("--forbid-header", action="append", default=[])
    ap.add_argument("--collect-header", default=None)
    a = ap.parse_args(argv)
    expect = Expect(
        dict(a.expect_header),
        tuple(h.lower() for h in a.forbid_header),
        a.expect_events,
        a.collect_header and a.collect_header.lower(),
    )
    out = run(
        load(
            a.url,
            connections=a.connections,
            duration=a.duration,
            warmup=a.warmup,
            stream=a.stream,
            expect=expect,
            max_requests=a.max_requests,
            timeout=a.timeout,
        )
    )
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
