"""Rewrite the generated block of docs/failures.md from the gateway's failure tables.

``python docs/gen_failures.py`` replaces each block between the page's
``<!-- failures/<name>: begin ...`` and ``<!-- failures/<name>: end -->`` markers with
:func:`gateway.dispatch.failures_doc.render`'s; the prose around them is kept.
``tests/test_failures_doc.py`` fails while the committed page differs.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gateway.dispatch.failures_doc import splice  # noqa: E402

PAGE = ROOT / "docs" / "failures.md"


def main() -> None:
    text = PAGE.read_text()
    fresh = splice(text)
    if fresh != text:
        PAGE.write_text(fresh)
    print(f"{PAGE.relative_to(ROOT)}: {'rewritten' if fresh != text else 'unchanged'}")


if __name__ == "__main__":
    main()
