"""The inputs of ``python -m evals speed``: targets, concurrency levels, prompt sets and
recorded traffic.
"""

from __future__ import annotations

import argparse
import copy
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Body = dict[str, Any]


@dataclass(frozen=True)
class Target:
    """An OpenAI-compatible base URL and the extra headers sent to it."""

    name: str
    base_url: str
    headers: tuple[tuple[str, str], ...] = ()

    def url(self, body: Body) -> str:
        path = "completions" if "prompt" in body and "messages" not in body else "chat/completions"
        return f"{self.base_url.rstrip('/')}/{path}"


def parse_target(spec: str) -> Target:
    """``NAME=BASE_URL[,header:value...]``."""
    name, sep, rest = spec.partition("=")
    parts = rest.split(",")
    if not sep or not name or not parts[0].startswith(("http://", "https://")):
        raise argparse.ArgumentTypeError(f"expected NAME=BASE_URL[,header:value...], got {spec!r}")
    headers = []
    for part in parts[1:]:
        key, colon, value = part.partition(":")
        if not colon or not key.strip():
            raise argparse.ArgumentTypeError(f"bad header {part!r} in {spec!r} (header:value)")
        headers.append((key.strip(), value.strip()))
    return Target(name, parts[0], tuple(headers))


def parse_concurrency(text: str) -> list[int]:
    try:
        levels = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected e.g. 1,4,16, got {text!r}") from None
    if not levels or min(levels) < 1:
        raise argparse.ArgumentTypeError("concurrency levels must be >= 1")
    return levels


def _jsonl(path: Path) -> Iterator[Any]:
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            yield json.loads(line)


def streamed(body: Body, model: str | None) -> Body:
    """A copy of ``body`` asking for a stream with a usage chunk (model set if given)."""
    out = copy.deepcopy(body)
    if model is not None or "model" not in out:
        out["model"] = model or "auto"
    out["stream"] = True
    out["stream_options"] = {**(out.get("stream_options") or {}), "include_usage": True}
    return out


def load_prompts(path: Path, model: str | None) -> list[Body]:
    bodies = [streamed(p, model or "auto") for p in _jsonl(path)]
    if not bodies:
        raise SystemExit(f"no prompts in {path}")
    return bodies


def load_replay(path: Path, model: str | None) -> list[tuple[float, Body]]:
    """(offset in seconds, body) sorted by offset, starting at 0."""
    entries = sorted((float(e["t"]), streamed(e["body"], model)) for e in _jsonl(path))
    if not entries:
        raise SystemExit(f"no entries in {path}")
    first = entries[0][0]
    return [(t - first, body) for t, body in entries]
