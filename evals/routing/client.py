"""The client of ``python -m evals routing``: sessions started on their planned clock,
each turn one streamed request through a router, its figures recorded.

Sessions start open-loop (their planned times, whatever the fleet's state) and each waits
for its previous answer and its pause before the next turn. With several entry URLs (the
gateway's replicas) every request goes to the next one in turn, as a load balancer without
stickiness would send it, so the turns of one chat meet different gateway replicas.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

from evals.routing.workloads import Session

_HEADERS = {"Content-Type": "application/json"}


@dataclass(slots=True)
class Record:
    session: int
    turn: int
    sent_s: float  # wall seconds after the cell's start
    ok: bool
    client_ttft_ms: float | None = None  # wall: request sent -> first content byte
    e2e_ms: float = 0.0  # wall: request sent -> [DONE]
    engine_ttft_ms: float | None = None  # the simulator's own figure (model ms)
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    error: str | None = None


class Client:
    """One cell's requests: ``entries`` taken in turn, ``time_scale`` wall s per model s."""

    def __init__(self, entries: list[str], model: str, time_scale: float, timeout_s: float):
        self.entries = entries
        self.model = model
        self.time_scale = time_scale
        self.timeout = aiohttp.ClientTimeout(total=timeout_s)
        self.turn = itertools.count()
        self.records: list[Record] = []
        self.t0 = 0.0

    async def run(self, sessions: list[Session]) -> list[Record]:
        self.t0 = time.perf_counter()
        conn = aiohttp.TCPConnector(limit=0, force_close=False)
        async with aiohttp.ClientSession(connector=conn, timeout=self.timeout) as http:
            await asyncio.gather(*(self._session(http, i, s) for i, s in enumerate(sessions)))
        return self.records

    async def _session(self, http: aiohttp.ClientSession, i: int, s: Session) -> None:
        await self._sleep_until(s.start_s * self.time_scale)
        messages: list[dict[str, str]] = [{"role": r, "content": c} for r, c in s.prefix]
        for k, turn in enumerate(s.turns):
            if turn.think_s:
                await asyncio.sleep(turn.think_s * self.time_scale)
            messages.append({"role": turn.role, "content": turn.content})
            rec, answer = await self._one(http, i, k, messages, s.max_tokens)
            self.records.append(rec)
            if not rec.ok:
                return  # a broken history is not sent on
            messages.append({"role": "assistant", "content": answer})

    async def _sleep_until(self, wall_s: float) -> None:
        delay = self.t0 + wall_s - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)

    async def _one(
        self,
        http: aiohttp.ClientSession,
        session: int,
        turn: int,
        messages: list[dict[str, str]],
        max_tokens: int,
    ) -> tuple[Record, str]:
        body = {
            "model": self.model,
            "messages": messages,
            "max_tokens": max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        url = self.entries[next(self.turn) % len(self.entries)] + "/v1/chat/completions"
        t = time.perf_counter()
        rec = Record(session, turn, t - self.t0, ok=False)
        parts: list[str] = []
        try:
            async with http.post(url, data=orjson.dumps(body), headers=_HEADERS) as r:
                if r.status != 200:
                    rec.error = f"HTTP {r.status}: {(await r.text())[:200]}"
                    return rec, ""
                async for line in r.content:
                    if line.startswith(b"data: {"):
                        _event(rec, orjson.loads(line[6:]), parts, t)
                    elif line.startswith(b"data: [DONE]"):
                        rec.ok = True
        except (aiohttp.ClientError, TimeoutError, ValueError) as e:
            rec.error = f"{type(e).__name__}: {e}"[:200]
        rec.e2e_ms = (time.perf_counter() - t) * 1000
        rec.ok = rec.ok and rec.error is None
        if rec.ok and rec.engine_ttft_ms is None:
            rec.ok, rec.error = False, "no engine figures in the stream"
        return rec, "".join(parts)


def _event(rec: Record, ev: dict[str, Any], parts: list[str], t: float) -> None:
    if "error" in ev:
        rec.error = str(ev["error"])[:200]
        return
    for choice in ev.get("choices") or ():
        text = (choice.get("delta") or {}).get("content")
        if text:
            if rec.client_ttft_ms is None:
                rec.client_ttft_ms = (time.perf_counter() - t) * 1000
            parts.append(text)
    sim = ev.get("sim")
    if isinstance(sim, dict):
        rec.engine_ttft_ms = float(sim["ttft_ms"])
    usage = ev.get("usage")
    if isinstance(usage, dict):
        rec.prompt_tokens = int(usage.get("prompt_tokens") or 0)
        rec.completion_tokens = int(usage.get("completion_tokens") or 0)
        details = usage.get("prompt_tokens_details") or {}
        rec.cached_tokens = int(details.get("cached_tokens") or 0)
