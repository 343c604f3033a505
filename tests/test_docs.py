"""The documentation site builds (``mkdocs build --strict``, offline) and loads nothing from
another machine, its diagrams are drawn from their current sources, its generated reference
pages match the models they are generated from, and no development history is written
into the README or into comments under ``gateway/``."""

from __future__ import annotations

import importlib.util
import io
import re
import subprocess
import sys
import tokenize
import types
from pathlib import Path

import pytest

from tests.offline import css_loads, html_loads

ROOT = Path(__file__).resolve().parent.parent

# Phrases that narrate the project's past rather than describe what the code does now.
HISTORY = re.compile(
    r"\bround\s+\d+\b|\buntil now\b|\bused to\b|\bthe floor until\b|\bno longer\s+\w+s since\b",
    re.IGNORECASE,
)


def _gen_refs() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("gen_refs", ROOT / "docs" / "gen_refs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.processes
def test_mkdocs_build_strict(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert (tmp_path / "index.html").is_file()
    assert (tmp_path / "reference" / "rules" / "index.html").is_file()
    # no page of the site loads anything from another machine: no web font, no CDN script,
    # no Mermaid block (the theme would fetch Mermaid to draw it; diagrams are drawn ahead)
    found = {
        str(p.relative_to(tmp_path)): html_loads(p.read_text(encoding="utf-8"))
        for p in tmp_path.rglob("*.html")
    }
    found |= {
        str(p.relative_to(tmp_path)): css_loads(p.read_text(encoding="utf-8"))
        for p in tmp_path.rglob("*.css")
    }
    assert {page: urls for page, urls in found.items() if urls} == {}


def test_every_diagram_is_drawn_from_its_current_source() -> None:
    """``docs/diagrams/NAME.mmd`` -> ``docs/img/NAME.svg`` (``python -m deploy.diagrams``)."""
    from deploy.diagrams import stamp

    sources = sorted((ROOT / "docs" / "diagrams").glob("*.mmd"))
    assert sources
    for src in sources:
        svg = ROOT / "docs" / "img" / f"{src.stem}.svg"
        assert svg.is_file() and svg.read_text().startswith(stamp(src.read_text())), (
            f"{svg} is stale: python -m deploy.diagrams {src.stem}"
        )


@pytest.mark.parametrize(
    "page",
    [
        "reference/rules.md",
        "reference/env.md",
        "reference/headers.md",
        "reference/admin-api.md",
        "reference/admin-openapi.json",
    ],
)
def test_generated_reference_is_current(page: str) -> None:
    gen = _gen_refs()
    fresh = gen.PAGES[page]()
    committed = (ROOT / "docs" / page).read_text()
    assert committed == fresh, f"docs/{page} is stale: run `python docs/gen_refs.py`"


def test_env_reference_names_every_setting() -> None:
    from gateway.settings import known_variables

    text = (ROOT / "docs" / "reference" / "env.md").read_text()
    for name in known_variables():
        assert f"`{name}`" in text


@pytest.mark.parametrize(
    ("text", "is_history"),
    [
        ("the floor until round 6", True),
        ("Round 8: a hedge is handed back", True),
        ("until now the cache was cold", True),
        ("this used to take 50 ms", True),
        ("a round trip to Redis", False),
        ("rounded to 2 decimals", False),
        ("the first round of retries", False),
    ],
)
def test_history_pattern(text: str, is_history: bool) -> None:
    assert bool(HISTORY.search(text)) is is_history


def _comments_and_docstrings(path: Path) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    tokens = tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
    for tok in tokens:
        if tok.type == tokenize.COMMENT or (
            tok.type == tokenize.STRING and tok.string.lstrip("rbuRBU").startswith(('"""', "'''"))
        ):
            found.append((tok.start[0], tok.string))
    return found


def test_no_history_in_readme() -> None:
    hits = [
        f"README.md:{n}: {line.strip()}"
        for n, line in enumerate((ROOT / "README.md").read_text().splitlines(), 1)
        if HISTORY.search(line)
    ]
    assert not hits, "development history belongs in CHANGELOG.md:\n" + "\n".join(hits)


def test_no_history_in_gateway_comments() -> None:
    hits = [
        f"{path.relative_to(ROOT)}:{line}: {found.group(0)}"
        for path in sorted((ROOT / "gateway").rglob("*.py"))
        for line, text in _comments_and_docstrings(path)
        if (found := HISTORY.search(text))
    ]
    assert not hits, "comments describe the code as it is:\n" + "\n".join(hits)


def test_readme_quick_start_on_first_screen() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert "make serve" in "\n".join(lines[:40])
    assert "make test" in "\n".join(lines[:40])
    assert len(lines) <= 250
