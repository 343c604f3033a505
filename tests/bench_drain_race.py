"""What a stream pays for the drain: a race of two tasks per stream against a set add and
discard (python tests/bench_drain_race.py; CPU time per stream, a sleep(0) of work included)."""

import asyncio
import time
from collections.abc import Coroutine
from typing import Any


async def work() -> None:
    await asyncio.sleep(0)


async def cut_at(w: Coroutine[Any, Any, None], deadline: asyncio.Event) -> None:
    task = asyncio.ensure_future(w)
    stop = asyncio.ensure_future(deadline.wait())
    try:
        await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop.cancel()
    task.result()


async def main() -> None:
    ev = asyncio.Event()
    s: set[asyncio.Task[Any] | None] = set()
    N = 20000
    for name in (
        "race (two tasks + wait)",
        "set add/discard",
        "race (two tasks + wait)",
        "set add/discard",
    ):
        t0 = time.process_time()
        for _ in range(N):
            if name.startswith("race"):
                await cut_at(work(), ev)
            else:
                t = asyncio.current_task()
                s.add(t)
                try:
                    await work()
                finally:
                    s.discard(t)
        print(f"{name}: {(time.process_time() - t0) / N * 1e6:.1f} us per stream")


asyncio.run(main())
