"""CPU accounting from /proc for the proxy benchmark (Linux).

For every measured run: how busy each CPU was, and how much CPU processes *outside* the
harness took meanwhile (all task time on the machine minus that of the harness, its servers
and its load generator), so that a run disturbed by other work on a shared machine can be
flagged and redone. Same method as the team's peer harness.
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")
CLK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class CpuLine:
    task: int  # user + nice + system jiffies
    idle: int  # idle + iowait
    total: int


def cpu_lines() -> dict[str, CpuLine]:
    """/proc/stat's ``cpu`` (all CPUs) and ``cpuN`` lines."""
    out = {}
    with open("/proc/stat") as f:
        for line in f:
            if not line.startswith("cpu"):
                break
            name, *fields = line.split()
            v = [*map(int, fields), 0, 0, 0, 0, 0, 0, 0, 0][:8]
            out[name] = CpuLine(v[0] + v[1] + v[2], v[3] + v[4], sum(v))
    return out


def process_cpu_s(pids: Collection[int]) -> float:
    """User + system CPU seconds of live processes (gone ones count 0)."""
    tot = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                s = f.read()
        except OSError:
            continue
        fields = s[s.rindex(")") + 2 :].split()
        tot += int(fields[11]) + int(fields[12])
    return tot / CLK


def children_cpu_s() -> float:
    """CPU seconds of this process's waited-for children (the finished load generators)."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def machine_busy_pct(seconds: float) -> float:
    """Task CPU of the whole machine over ``seconds``, in % of one core."""
    a = cpu_lines()["cpu"]
    time.sleep(seconds)
    b = cpu_lines()["cpu"]
    ncpu = os.cpu_count() or 1
    return 100.0 * (b.task - a.task) / max(1, b.total - a.total) * ncpu


def measured(pids: Collection[int], fn: Callable[[], T]) -> tuple[T, dict[str, Any]]:
    """Run ``fn`` and return its result with CPU figures for the time it took.

    ``pids`` are the harness's long-lived processes (itself and its servers); the load
    generator, a child that ``fn`` waits for, is counted through RUSAGE_CHILDREN.
    """
    own = [os.getpid(), *pids]
    s0, p0, c0, t0 = cpu_lines(), process_cpu_s(own), children_cpu_s(), time.monotonic()
    result = fn()
    s1, p1, c1, wall = cpu_lines(), process_cpu_s(own), children_cpu_s(), time.monotonic() - t0
    busy = {
        name: round(
            100.0 * (1 - (s1[name].idle - s0[name].idle) / max(1, s1[name].total - s0[name].total)),
            1,
        )
        for name in s0
        if name != "cpu"
    }
    task_s = (s1["cpu"].task - s0["cpu"].task) / CLK
    ours_s = (p1 - p0) + (c1 - c0)
    return result, {
        "cpu_busy_pct": busy,
        "foreign_cpu_pct": round(100.0 * max(0.0, task_s - ours_s) / wall, 1),
        "wall_s": round(wall, 2),
    }
