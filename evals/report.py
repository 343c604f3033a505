"""Report helpers shared by the evaluation harnesses (speed, quality, checks, classify, ...).

Output folders (``results/<kind>-<UTC stamp>/``), number formatting, Markdown tables,
percentiles, writing ``report.md`` + ``raw.json``, progress bars (tqdm) and matplotlib on the
non-interactive Agg backend. Nothing here knows what is being measured.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from evals.bench.common import percentile as _nearest_rank

ROOT = Path(__file__).resolve().parent.parent
TIMES = "\N{MULTIPLICATION SIGN}"


def utc_stamp() -> str:
    """Now in UTC as ``20240501T120000Z`` (sortable, safe in file names)."""
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")


def default_out(kind: str) -> Path:
    """``results/<kind>-<UTC stamp>/`` under the repository root (an installed package: under
    the working directory)."""
    base = ROOT if (ROOT / "pyproject.toml").is_file() else Path.cwd()
    return base / "results" / f"{kind}-{utc_stamp()}"


def shown_path(path: Path) -> str:
    """``path`` relative to the repository root when it is inside it."""
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def percentile(values: Iterable[float], p: float) -> float | None:
    """Nearest-rank percentile (the benchmark's definition); None without values."""
    return _nearest_rank(sorted(values), p)


def fmt_num(value: float | None, unit: str = "") -> str:
    """About three significant digits without scientific notation; "-" for None/NaN."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    size = abs(value)
    if size >= 100 or (value == int(value) and size >= 1):
        text = f"{value:,.0f}"
    elif size >= 10:
        text = f"{value:.1f}"
    elif size >= 1:
        text = f"{value:.2f}"
    elif size >= 0.001:
        text = f"{value:.3g}"
    else:
        text = "0" if value == 0 else f"{value:.2g}"
    return text + unit


def fmt_ratio(num: float | None, den: float | None) -> str:
    """``num/den`` as "0.42" plus ``TIMES``; "-" when either is missing or ``den`` is 0."""
    if num is None or den is None or den == 0:
        return "-"
    return f"{num / den:.2f}{TIMES}"


def fmt_frac(value: float | None) -> str:
    """A ratio in [0, 1] with three decimals, "-" when undefined."""
    return "-" if value is None else f"{value:.3f}"


def md_table(headers: Sequence[str], rows: Iterable[Sequence[object]], align: str = "") -> str:
    """A GitHub Markdown table. ``align`` has one letter per column (l, r or c; default l)."""
    marks = {"l": "---", "r": "--:", "c": ":-:"}
    spec = align.ljust(len(headers), "l")
    lines = [
        "| " + " | ".join(headers) + " |",
        "|" + "|".join(marks[a] for a in spec) + "|",
    ]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def _cell(value: object) -> str:
    text = fmt_num(value) if isinstance(value, float) else str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def write_outputs(out: Path, markdown: str, raw: dict[str, Any]) -> None:
    """``report.md`` and ``raw.json`` in ``out`` (created when missing)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.md").write_text(markdown, encoding="utf-8")
    (out / "raw.json").write_text(
        json.dumps(raw, indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
    )


def progress(total: int | None, desc: str, enabled: bool) -> Any:
    """A tqdm bar on stderr (a no-op object when ``enabled`` is false)."""
    from tqdm import tqdm

    return tqdm(
        total=total,
        desc=desc,
        unit="req",
        disable=not enabled,
        file=sys.stderr,
        dynamic_ncols=True,
        leave=False,
    )


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, path: Path) -> None:
    """Write ``fig`` as a PNG and free it."""
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    pyplot().close(fig)
