"""The embedded default: start the local CPU engines behind the default tiers.

``gateway serve`` with the repository's rules points its tiers at ``127.0.0.1:8101``
(high-speed) and ``127.0.0.1:8102`` (standard). When nothing answers there and the
local engine is installed (llama.cpp's ``llama-server`` and the SmolLM2 weights, see
``engines/LOCAL.md``), the gateway starts one engine per tier as child processes and
stops them when it exits. Once it listens, it asks itself one real question and prints
the answer, so the first command of the quick start shows a real answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import subprocess
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp
from aiohttp import web

log = logging.getLogger("engines.launcher")
SELF_CHECK_PROMPT = "Name three primary colors."


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/health", timeout=1.0) as r:
            return bool(r.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


def plan(tiers: Mapping[str, Sequence[str]]) -> list[tuple[str, int]]:
    """(tier, port) of every tier served by one local engine port that nothing answers on;
    ``tiers`` maps a tier's name to its endpoint URLs (the rules' ``tiers.<t>.endpoints``)."""
    from engines.local import LOCAL_TIERS

    out = []
    for name, endpoints in tiers.items():
        if name not in LOCAL_TIERS or len(endpoints) != 1:
            continue
        u = urlsplit(endpoints[0])
        if u.hostname in ("127.0.0.1", "localhost") and u.port and not _answers(endpoints[0]):
            out.append((name, u.port))
    return out


class LocalEngines:
    """Child llama-server processes, one per local tier."""

    def __init__(self, log_dir: Path):
        self.log_dir = log_dir
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, wanted: list[tuple[str, int]], timeout: float = 120.0) -> None:
        from engines.local import start_local_engine, wait_ready

        self.log_dir.mkdir(parents=True, exist_ok=True)
        for tier, port in wanted:
            with (self.log_dir / f"engine-{tier}.log").open("ab") as logf:
                proc = start_local_engine(tier, port, log=logf)
            self.procs.append(proc)
            took = wait_ready(f"http://127.0.0.1:{port}", timeout=timeout, proc=proc)
            print(
                f"gateway: local engine for tier {tier} ready on :{port} ({took:.1f}s; "
                f"log {self.log_dir / f'engine-{tier}.log'})",
                flush=True,
            )

    def stop(self) -> None:
        from engines.local import stop_local_engine

        for p in self.procs:
            with contextlib.suppress(Exception):
                stop_local_engine(p)
        self.procs.clear()


def installed() -> str | None:
    """None when the local engine can run here, else what to do about it."""
    from engines.local import LocalEngineError, find_model_path, find_server

    try:
        find_server()
        find_model_path()
    except LocalEngineError as e:
        return str(e)
    return None


def self_check_hook(
    host: str, port: int, out: Callable[[str], None]
) -> Callable[[web.Application], Awaitable[None]]:
    """An on_startup hook: once listening, ask the gateway one question, print the answer."""

    async def ask() -> None:
        await asyncio.sleep(0.3)  # run_app starts listening right after on_startup
        url = f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{port}"
        body = {
            "model": "auto",
            "max_tokens": 64,
            "temperature": 0,
            "messages": [{"role": "user", "content": SELF_CHECK_PROMPT}],
        }
        try:
            async with (
                aiohttp.ClientSession() as s,
                s.post(
                    f"{url}/v1/chat/completions", json=body, timeout=aiohttp.ClientTimeout(total=60)
                ) as r,
            ):
                data = await r.json()
                tier = r.headers.get("x-gateway-tier", "?")
                fb = r.headers.get("x-gateway-fallback")
            text = data["choices"][0]["message"]["content"].strip().replace("\n", " ")
            out(
                f"gateway: self-check {SELF_CHECK_PROMPT!r} -> [{tier}] {text}"
                + (f"  (fallback: {fb})" if fb else "")
            )
            out(
                f"gateway: ready. Try: curl {url}/v1/chat/completions -H 'Content-Type: "
                'application/json\' -d \'{"model": "auto", "messages": [{"role": '
                '"user", "content": "Hello!"}]}\''
            )
        except (aiohttp.ClientError, TimeoutError, KeyError, IndexError, TypeError) as e:
            out(f"gateway: self-check failed: {e!r}")

    tasks: list[asyncio.Task[None]] = []  # a reference, so the task is not collected

    async def hook(app: web.Application) -> None:
        tasks.append(asyncio.get_running_loop().create_task(ask()))

    return hook
