"""The local engines' settings that need no engine installed."""

from __future__ import annotations

import os

import pytest

from engines import local


@pytest.mark.parametrize(
    ("cpus", "threads"),
    [(1, 1), (2, 1), (3, 1), (4, 1), (5, 2), (8, 3), (16, 7), (64, 31)],
)
def test_both_servers_together_leave_a_cpu_for_the_gateway(cpus: int, threads: int) -> None:
    assert local.default_threads(cpus) == threads
    assert 2 * threads <= max(2, cpus - 1)  # both servers' threads, one CPU kept from 3 up


@pytest.mark.parametrize(("env", "threads"), [("3", 3), ("0", 1), (None, None)])
def test_the_thread_count_can_be_set(
    monkeypatch: pytest.MonkeyPatch, env: str | None, threads: int | None
) -> None:
    if env is None:
        monkeypatch.delenv("LOCAL_LLM_THREADS", raising=False)
        # the os module engines.local asks
        monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(range(8)))
        threads = 3
    else:
        monkeypatch.setenv("LOCAL_LLM_THREADS", env)
    assert local.configured_threads() == threads
