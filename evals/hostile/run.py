"""``python -m evals hostile``: hostile input and engine faults against a real gateway.

    python -m evals hostile [--clients 4] [--out DIR] [--quick]

Starts a faulty fast-tier engine and a healthy standard one (``evals.hostile.engine``) and
a gateway with tenancy (the in-process store) in front, then:

1. **hostile input** — every case of :mod:`evals.hostile.cases`, as raw HTTP bytes;
2. **engine faults** — every fault of the fast tier, plain and streamed, ``--clients`` at a
   time, each answered by the gateway (fallback, continuation or a clear error);
3. **slots** — as many concurrent requests as the tenant's concurrency limit: a slot any
   earlier request leaked shows as a 429.

Prints, per part: tried / precise / 500 / hang / silent / leaked / exposed, where *precise*
is the right status with an OpenAI error envelope (or a complete answer), *silent* a stream
that ended without ``[DONE]`` or without a finish or an error event, *leaked* a
concurrency slot never given back, *exposed* an answer that shows an engine's address or
error body. Exit status 1 when any of 500 / hang / silent / leaked / exposed is not zero.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from evals.bench.common import free_port, tenant_key
from evals.bench.procs import Service, wait_ready
from evals.hostile.cases import CASES, Case
from evals.hostile.engine import FAULTS
from gateway.settings import REPO_RULES

ADMIN = "hostile-admin-token-0123456789"
SLOTS = 24  # the tenant's concurrency limit
HANG_S = 30.0  # an answer slower than this is a hang
SECRETS = ("10.9.8.7", "secret")  # what the fault engine puts in its error bodies


@dataclass
class Tally:
    tried: int = 0
    precise: int = 0
    e500: int = 0
    hang: int = 0
    silent: int = 0
    leaked: int = 0
    exposed: int = 0
    fell_back: int = 0  # answered after a fallback, continuation or hedge (the fault was met)
    misses: list[str] = field(default_factory=list)

    def row(self, name: str) -> str:
        return (
            f"| {name} | {self.tried} | {self.precise} | {self.e500} | {self.hang} | "
            f"{self.silent} | {self.leaked} | {self.exposed} | {self.fell_back} |"
        )


# -- processes -------------------------------------------------------------------------------
def _rules(out: Path) -> Path:
    data: dict[str, Any] = yaml.safe_load(REPO_RULES.read_text())
    for tier in data["tiers"].values():
        tier["timeouts"] = {"connect": 1.0, "ttft": 1.5, "total": 20.0, "stall": 1.5}
        tier["circuit"] = {"failures": 100000, "cooldown": 1.0}  # every request meets its fault
        tier["health"] = {"enabled": False}
    data["quality"] = {"enabled": False}  # every request meets its fault: no tier demoted
    path = out / "rules.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def start(out: Path, services: list[Service]) -> tuple[str, str]:
    """The engines and the gateway: (data URL, admin URL)."""
    urls = {}
    for tier in ("highspeed", "standard"):
        port = free_port()
        argv = [sys.executable, "-m", "evals.hostile.engine", "--port", str(port)]
        argv += ["--faulty"] if tier == "highspeed" else []
        services.append(Service(f"engine-{tier}", argv, cpus=None, nice=False, logdir=out))
        urls[tier] = f"http://127.0.0.1:{port}"
        wait_ready(urls[tier] + "/health", services[-1])
    port, admin = free_port(), free_port()
    env = {
        "GATEWAY_STORE_PATH": ":memory:",  # a fresh store each run, not .gateway/ of the user
        **os.environ,
        "GATEWAY_LOCAL_ENGINES": "off",
        "GATEWAY_ADMIN_TOKEN": ADMIN,
        "GATEWAY_ADMIN_PORT": str(admin),
        "GATEWAY_METRICS_TOKEN": "hostile-metrics-token",
        "GATEWAY_BODY_TIMEOUT": "1",
        **{f"GATEWAY_POOL_{t.upper()}_URLS": u for t, u in urls.items()},
    }
    argv = [sys.executable, "-m", "gateway.cli", "serve", "--rules", str(_rules(out))]
    services.append(
        Service("gateway", [*argv, "--port", str(port)], cpus=None, nice=False, logdir=out, env=env)
    )
    wait_ready(f"http://127.0.0.1:{port}/healthz", services[-1])
    return f"http://127.0.0.1:{port}", f"http://127.0.0.1:{admin}"


# -- part 1: hostile input -----------------------------------------------------------------------
async def send_raw(port: int, data: bytes) -> tuple[int | None, bytes]:
    """(status, body) of one raw request; (None, b"") when no answer came in time."""
    writer = None
    try:
        async with asyncio.timeout(HANG_S):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(data)
            await writer.drain()
            head = await reader.readuntil(b"\r\n\r\n")
            length = _content_length(head)
            body = await (reader.readexactly(length) if length is not None else reader.read())
    except TimeoutError:
        return None, b""
    except (OSError, asyncio.IncompleteReadError) as e:
        return 0, str(e).encode()
    finally:
        if writer is not None:
            writer.close()
    return int(head.split(b" ", 2)[1]), body


def _content_length(head: bytes) -> int | None:
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value.strip())
    return None


def judge_case(case: Case, status: int | None, body: bytes, t: Tally) -> None:
    t.tried += 1
    if status is None:
        t.hang += 1
    elif status >= 500:
        t.e500 += 1
    t.exposed += any(s.encode() in body for s in SECRETS)
    ok = status == case.status
    if ok and status is not None and status >= 400:
        try:
            err = json.loads(body)["error"]
            ok = set(err) == {"message", "type", "param", "code"}
            ok = ok and (case.code is None or err["code"] == case.code)
        except (ValueError, KeyError, TypeError):
            ok = False
    t.precise += ok
    if not ok:
        t.misses.append(f"{case.name}: {status} {body[:120]!r}")


async def hostile_input(port: int, key: str) -> Tally:
    t = Tally()
    for case in CASES:
        status, body = await send_raw(port, case.build(key))
        judge_case(case, status, body, t)
    return t


# -- part 2: engine faults -----------------------------------------------------------------------
@dataclass
class Answer:
    status: int | None  # None: a hang
    body: bytes = b""
    done: bool = False  # a stream ended with data: [DONE]
    finished: bool = False  # a finish_reason, or an error event, came
    text: str = ""


async def ask(
    http: aiohttp.ClientSession, url: str, key: str, content: str, stream: bool
) -> Answer:
    body = {"model": "auto", "messages": [{"role": "user", "content": content}], "stream": stream}
    headers = {"Authorization": f"Bearer {key}"}
    try:
        async with asyncio.timeout(HANG_S):
            async with http.post(f"{url}/v1/chat/completions", json=body, headers=headers) as r:
                raw = await r.read()
                a = Answer(r.status, raw + json.dumps(dict(r.headers)).encode())
    except TimeoutError:
        return Answer(None)
    except aiohttp.ClientError as e:  # the connection broke: a silent end
        return Answer(200, str(e).encode())
    if stream and a.status == 200:
        _read_stream(a, raw)
    elif a.status == 200:
        msg = json.loads(raw)["choices"][0]["message"]
        a.text, a.finished, a.done = msg.get("content") or "", True, True
    return a


def _read_stream(a: Answer, raw: bytes) -> None:
    for line in raw.split(b"\n"):
        if not line.startswith(b"data: "):
            continue
        if line == b"data: [DONE]":
            a.done = True
            continue
        ev = json.loads(line[6:])
        if "error" in ev:
            a.finished = True
        for ch in ev.get("choices") or ():
            a.text += (ch.get("delta") or {}).get("content") or ""
            a.finished = a.finished or bool(ch.get("finish_reason"))


def judge_answer(a: Answer, t: Tally, what: str) -> None:
    t.tried += 1
    t.exposed += any(s.encode() in a.body for s in SECRETS)
    low = a.body.lower()
    t.fell_back += b"x-gateway-fallback" in low or b"standard won" in low
    if a.status is None:
        t.hang += 1
    elif a.status >= 500 and a.status not in (502, 504):
        t.e500 += 1
    elif a.status == 200 and not (a.done and a.finished):
        t.silent += 1
    ok = a.status == 200 and a.done and a.finished
    t.precise += ok
    if not ok:
        t.misses.append(f"{what}: {a.status} done={a.done} finished={a.finished}")


async def engine_faults(url: str, key: str, clients: int, faults: tuple[str, ...]) -> Tally:
    t = Tally()
    timeout = aiohttp.ClientTimeout(total=None)
    async with aiohttp.ClientSession(timeout=timeout) as http:
        for fault in faults:
            for stream in (False, True):
                content = f"Tell me a story. [[fault: {fault}]]"
                answers = await asyncio.gather(
                    *(ask(http, url, key, content, stream) for _ in range(clients))
                )
                for a in answers:
                    judge_answer(a, t, f"{fault} stream={stream}")
    return t


async def slots_taken(url: str, key: str) -> int:
    """How many of the tenant's slots are taken now (nothing should be in flight)."""
    async with aiohttp.ClientSession() as http:
        answers = await asyncio.gather(
            *(ask(http, url, key, "[[fault: slow_first]] hi", False) for _ in range(SLOTS))
        )
    return sum(a.status == 429 for a in answers)


# -- the command -------------------------------------------------------------------------------
async def run(url: str, admin: str, a: argparse.Namespace) -> dict[str, Tally]:
    async with aiohttp.ClientSession() as http:
        key = await tenant_key(http, admin, ADMIN, {"max_concurrent_requests": SLOTS})
    port = int(url.rsplit(":", 1)[1])
    faults = FAULTS[:6] if a.quick else FAULTS
    parts = {
        "hostile input": await hostile_input(port, key),
        "engine faults": await engine_faults(url, key, a.clients, faults),
    }
    await asyncio.sleep(1.0)  # answers are accounted (slots freed) just after they are sent
    leaked = await slots_taken(url, key)
    parts["slots afterwards"] = Tally(tried=SLOTS, precise=SLOTS - leaked, leaked=leaked)
    return parts


def report(parts: dict[str, Tally]) -> str:
    lines = [
        "| part | tried | precise | 500 | hang | silent | leaked | exposed | fell back |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [t.row(name) for name, t in parts.items()]
    for name, t in parts.items():
        lines += [f"* {name}, not precise: {m}" for m in t.misses]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m evals hostile", description=__doc__.splitlines()[0])
    p.add_argument("--clients", type=int, default=8, help="concurrent requests per fault")
    p.add_argument("--out", type=Path, default=None, help="where the logs and report go")
    p.add_argument("--quick", action="store_true", help="the first six faults only")
    a = p.parse_args(argv)
    out = a.out or Path(tempfile.mkdtemp(prefix="evals-hostile-"))
    out.mkdir(parents=True, exist_ok=True)
    services: list[Service] = []
    t0 = time.monotonic()
    try:
        url, admin = start(out, services)
        parts = asyncio.run(run(url, admin, a))
    finally:
        for s in reversed(services):
            s.stop()
    text = report(parts)
    (out / "hostile.md").write_text(text + "\n")
    print(text)
    print(f"({time.monotonic() - t0:.0f}s; logs and report in {out})")
    bad = sum(t.e500 + t.hang + t.silent + t.leaked + t.exposed for t in parts.values())
    return 1 if bad else 0
