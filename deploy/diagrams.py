"""The documentation's diagrams, drawn once here so the docs site loads nothing to show
them: each ``docs/diagrams/NAME.mmd`` (Mermaid) becomes ``docs/img/NAME.svg``, rendered by
Mermaid in headless Chromium (the browser the console tests use) and committed.

``python -m deploy.diagrams`` redraws them. Mermaid comes from its npm package, fetched
once into ``.cache/mermaid/`` (``npm pack``); nothing else is fetched. Each SVG names the
SHA-256 of its source, so ``tests/test_docs.py`` knows, without a browser, when one is
stale.
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import tarfile
import tempfile
from pathlib import Path

from deploy.screenshots import chromium

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ROOT / "docs" / "diagrams"
OUT = ROOT / "docs" / "img"
MERMAID = "mermaid@11.17.2"
CACHE = ROOT / ".cache" / "mermaid"
# plain SVG text (no HTML labels): the drawing shows the same as an <img> in any browser
CONFIG = {
    "startOnLoad": False,
    "htmlLabels": False,
    "theme": "neutral",
    "flowchart": {"htmlLabels": False, "curve": "basis"},
    "fontFamily": "Helvetica, Arial, sans-serif",
}


def stamp(source: str) -> str:
    """The line an SVG carries to say which source it was drawn from."""
    return f"<!-- drawn from sha256:{hashlib.sha256(source.encode()).hexdigest()} -->"


def mermaid_js() -> Path:
    """``mermaid.min.js`` of the pinned npm package, fetched once (``npm pack``)."""
    js = CACHE / "package" / "dist" / "mermaid.min.js"
    if not js.is_file():
        CACHE.mkdir(parents=True, exist_ok=True)
        subprocess.run(["npm", "pack", MERMAID], cwd=CACHE, check=True, capture_output=True)
        tgz = next(CACHE.glob("mermaid-*.tgz"))
        with tarfile.open(tgz) as t:
            t.extract("package/dist/mermaid.min.js", CACHE, filter="data")
        tgz.unlink()
    return js


def draw(sources: list[Path]) -> None:
    import json

    js = mermaid_js()
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "draw.html"
        page.write_text(f'<!doctype html><script src="{js.as_uri()}"></script><body></body>')
        d = chromium(Path(tmp) / "profile")
        try:
            d.get(page.as_uri())
            d.execute_script(f"mermaid.initialize({json.dumps(CONFIG)})")
            for src in sources:
                text = src.read_text()
                svg = d.execute_async_script(
                    "const done = arguments[arguments.length - 1];"
                    "mermaid.render('d' + Date.now(), arguments[0]).then(r => {"
                    "  const doc = new DOMParser().parseFromString(r.svg, 'text/html');"
                    "  done(new XMLSerializer().serializeToString(doc.querySelector('svg')));"
                    "}, e => done('error: ' + e));",
                    text,
                )
                if svg.startswith("error: "):
                    raise SystemExit(f"{src}: {svg}")
                out = OUT / f"{src.stem}.svg"
                out.write_text(stamp(text) + "\n" + svg + "\n")
                print(f"drew {out.relative_to(ROOT)}")
        finally:
            d.quit()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("names", nargs="*", help="diagram names (default: all)")
    a = p.parse_args(argv)
    sources = sorted(SOURCES.glob("*.mmd"))
    if a.names:
        sources = [s for s in sources if s.stem in a.names]
    draw(sources)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
