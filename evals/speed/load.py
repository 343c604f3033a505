"""The load shapes of ``python -m evals speed``: closed-loop cells split into rounds that
alternate between the targets, and open-loop replay of recorded traffic.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from evals.speed.stream import Sample, send
from evals.speed.targets import Body, Target


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
