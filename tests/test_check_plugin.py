"""A ``python`` check from an installed package, found by name: the worked example in
``docs/examples/polite-check`` (its own ``pyproject.toml``, an ``llm_gateway.checks``
entry point) is installed with pip, and a real gateway uses it by name — a rude fast answer
is never shown, non-streamed or streamed (stopped at its good prefix mid-stream)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import ROOT, rules_for_tests, start_gateway

pytestmark = pytest.mark.processes

EXAMPLE = ROOT / "docs" / "examples" / "polite-check"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example package, installed by pip into a folder of its own."""
    tmp = tmp_path_factory.mktemp("plugin")
    src = tmp / "src"
    shutil.copytree(EXAMPLE, src)  # pip builds in the source tree: not in the repository's
    target = tmp / "site"
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target)]
    done = subprocess.run([*pip, str(src)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    return target


@pytest.fixture(scope="module")
def gw(
    engines: dict[str, str], site: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    rules = rules_for_tests()
    rules["checks"] = {
        "polite": {"kind": "python", "entry_point": "polite", "options": {"strict": True}}
    }
    rules["default"]["checks"] = [*rules["default"]["checks"], "polite"]
    path = os.pathsep.join([str(site), str(ROOT)])
    proc, url = start_gateway(tmp_path_factory.mktemp("gw"), rules, engines, {"PYTHONPATH": path})
    yield url
    proc.stop()


def _ask(gw: str, fast: str, std: str, stream: bool) -> tuple[httpx.Response, str]:
    directives = f"[[highspeed: text={fast}; chunks=10]] [[standard: text={std}; chunks=4]]"
    body = {
        "model": "auto",
        "stream": stream,
        "messages": [{"role": "system", "content": directives}, {"role": "user", "content": "Hi"}],
    }
    r = httpx.post(f"{gw}/v1/chat/completions", json=body, timeout=20)
    assert r.status_code == 200, r.text
    if not stream:
        return r, r.json()["choices"][0]["message"]["content"]
    text = "".join(
        (c.get("delta") or {}).get("content") or ""
        for line in r.text.splitlines()
        if line.startswith("data: ") and line != "data: [DONE]"
        for c in json.loads(line[6:]).get("choices") or []
    )
    return r, text


def test_the_installed_plugin_is_found_by_its_entry_point(site: Path) -> None:
    code = (
        "from gateway.checks.kinds import PythonSpec\n"
        "from gateway.checks.plugin import load_plugin\n"
        "c = load_plugin('polite', PythonSpec(kind='python', entry_point='polite'))\n"
        "print(type(c).__module__, c.name, c.abilities.describe())\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[:2] == ["polite_check", "polite"]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_a_rude_fast_answer_is_never_shown(gw: str, stream: bool) -> None:
    fast = "Sure. Dumb question, but here is the answer anyway."
    std = "Sure. Here is the answer, gladly."
    r, text = _ask(gw, fast, std, stream)
    assert "umb" not in r.text
    assert text == std  # streamed: the standard tier continued "Sure. "


def test_a_polite_fast_answer_passes(gw: str) -> None:
    r, text = _ask(gw, "Here is the answer, gladly.", "unused", False)
    assert text == "Here is the answer, gladly." and r.headers["x-gateway-tier"] == "highspeed"
