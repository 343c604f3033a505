"""A rules change parses off the event loop, and one replica applies its changes in order.

* While an upload, a validation or an adopted version parses, the loop keeps running
  tasks (a parse of a large document takes a second or more, and every replica parses
  each new version).
* Two uploads close together end with the later one, though the earlier parses longer.
* An upload while another replica's version is being adopted: the replica ends at the
  upload, the store's current version, not back at the adopted one.
* libyaml's loader and the pure-Python one read the shipped rules the same.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

import gateway.rules.control as control_mod
from gateway.rules.control import RulesControl
from gateway.rules.schema import Rules, parse_rules
from gateway.store.memory_store import MemoryStore
from tests.conftest import rules_for_tests

ROOT = Path(__file__).resolve().parent.parent


def _text(**changes: Any) -> str:
    data = rules_for_tests()
    data["default"].update(changes)
    return yaml.safe_dump(data)


class _LoopWatch:
    """Ticks on the loop; a parse that waits for ticks tells whether the loop ran meanwhile."""

    def __init__(self) -> None:
        self.ticks = 0
        self.ran_during_parse: list[bool] = []
        self.threads: list[threading.Thread] = []

    async def tick(self) -> None:
        while True:
            self.ticks += 1
            await asyncio.sleep(0)

    def parse(self, text: str, source: str = "<rules>") -> Rules:
        self.threads.append(threading.current_thread())
        start, deadline = self.ticks, time.monotonic() + 3.0
        while self.ticks < start + 20 and time.monotonic() < deadline:
            time.sleep(0.001)  # on the loop's thread no tick can come: it waits out 3 s
        self.ran_during_parse.append(self.ticks >= start + 20)
        return parse_rules(text, source)


@pytest.mark.parametrize("path", ["submit", "adopt", "validate"])
def test_the_loop_runs_while_rules_parse(
    path: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    watch = _LoopWatch()
    monkeypatch.setattr(control_mod, "parse_rules", watch.parse)
    text = _text()
    file = tmp_path / "rules.yaml"
    file.write_text(text)
    applied: list[Rules] = []

    async def scenario() -> None:
        store = MemoryStore() if path == "adopt" else None
        control = RulesControl(store, file, text, applied.append, None, 0)
        ticker = asyncio.get_running_loop().create_task(watch.tick())
        try:
            if path == "submit":
                await control.submit(_text(checks=["non_empty"]), "test", "tester")
            elif path == "validate":
                await control.parse_off_loop(text, "validate")
            else:  # another replica stored a version: this one adopts it
                assert store is not None
                v = await store.save_rules(_text(checks=["non_empty"]), {})
                await store.set_current_rules(v)
                await control.resync()
                assert control.version == v
        finally:
            ticker.cancel()

    asyncio.run(scenario())
    assert watch.ran_during_parse == [True]
    assert watch.threads[0] is not threading.main_thread()
    assert len(applied) == (0 if path == "validate" else 1)


def test_two_uploads_close_together_end_with_the_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    slow, fast = _text(checks=["non_empty"]), _text(checks=["non_empty", "not_truncated"])

    def parse(text: str, source: str = "<rules>") -> Rules:
        if text == slow:
            time.sleep(0.3)  # the first upload is the larger document
        return parse_rules(text, source)

    monkeypatch.setattr(control_mod, "parse_rules", parse)
    text = _text()
    file = tmp_path / "rules.yaml"
    file.write_text(text)
    applied: list[tuple[str, ...]] = []

    async def scenario() -> tuple[int, str, str | None]:
        store = MemoryStore()
        control = RulesControl(
            store, file, text, lambda r: applied.append(r.default.checks), None, 0
        )
        await control.start()
        first = asyncio.get_running_loop().create_task(control.submit(slow, "a", "tester"))
        await asyncio.sleep(0.05)  # the first is parsing
        await asyncio.gather(first, control.submit(fast, "b", "tester"))
        cur = await store.current_rules()
        return control.version, control.text, None if cur is None else cur[1]

    version, running, stored = asyncio.run(scenario())
    assert applied == [("non_empty",), ("non_empty", "not_truncated")]
    assert running == stored == fast and version == 3


def test_an_upload_during_an_adoption_stays_the_running_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another replica's version 2 is being adopted (a slow parse) when this replica
    uploads version 3: the replica ends at 3, the store's current, not back at 2."""
    older = _text(checks=["non_empty"])
    started = threading.Event()

    def parse(text: str, source: str = "<rules>") -> Rules:
        if text == older:
            started.set()
            time.sleep(0.3)
        return parse_rules(text, source)

    monkeypatch.setattr(control_mod, "parse_rules", parse)
    text, newer = _text(), _text(checks=["non_empty", "not_truncated"])
    file = tmp_path / "rules.yaml"
    file.write_text(text)

    async def scenario() -> tuple[int, str, int | None]:
        store = MemoryStore()
        control = RulesControl(store, file, text, lambda _: None, None, 0)
        await control.start()
        other = await store.save_rules(older, {})  # another replica's upload
        await store.set_current_rules(other)
        adopting = asyncio.get_running_loop().create_task(control.resync())
        while not started.is_set():
            await asyncio.sleep(0.005)
        await asyncio.gather(adopting, control.submit(newer, "a", "tester"))
        cur = await store.current_rules()
        return control.version, control.text, None if cur is None else cur[0]

    version, running, current = asyncio.run(scenario())
    assert (version, running, current) == (3, newer, 3)


@pytest.mark.skipif(not yaml.__with_libyaml__, reason="PyYAML without libyaml")
@pytest.mark.parametrize("path", ["routing_rules.yaml", "gateway/routing_rules.yaml"])
def test_libyaml_reads_the_shipped_rules_as_the_python_loader_does(path: str) -> None:
    text = (ROOT / path).read_text()
    assert yaml.load(text, Loader=yaml.CSafeLoader) == yaml.load(text, Loader=yaml.SafeLoader)
