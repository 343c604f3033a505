"""One ``/metrics`` for every worker process.

With ``--workers N`` the worker processes share one port, so a scrape reaches one of them
at random. Each worker writes its own exposition to a shared folder every second
(:func:`write_snapshot`); the worker that is scraped answers with all of them
(:func:`merge`), each sample labelled ``worker="<index>"``, families kept together as
the text format requires. Sum over ``worker`` in PromQL for the gateway-wide figure.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

STALE_S = 30.0  # a worker that has not written for this long is gone


def write_snapshot(folder: Path, worker: str, text: bytes) -> None:
    """Atomically replace this worker's exposition file."""
    tmp = folder / f".worker-{worker}.{os.getpid()}.tmp"
    tmp.write_bytes(text)
    tmp.replace(folder / f"worker-{worker}.prom")


def read_snapshots(folder: Path, own: str, own_text: bytes) -> dict[str, bytes]:
    """Every live worker's latest exposition; this worker's own is fresh."""
    out = {own: own_text}
    now = time.time()
    for f in sorted(folder.glob("worker-*.prom")):
        worker = f.stem[len("worker-") :]
        if worker == own:
            continue
        with contextlib.suppress(OSError):
            if now - f.stat().st_mtime <= STALE_S:
                out[worker] = f.read_bytes()
    return out


def _label(line: bytes, worker: bytes) -> bytes:
    name, sep, rest = line.partition(b"{")
    if sep:
        return name + b'{worker="' + worker + b'",' + rest
    name, _, value = line.partition(b" ")
    return name + b'{worker="' + worker + b'"} ' + value


def merge(texts: dict[str, bytes]) -> bytes:
    """Prometheus text expositions of several workers as one, samples labelled by worker."""
    heads: dict[bytes, list[bytes]] = {}
    samples: dict[bytes, list[bytes]] = {}
    for worker, text in texts.items():
        w = worker.encode()
        family = b""
        for line in text.splitlines():
            if line.startswith(b"# HELP ") or line.startswith(b"# TYPE "):
                family = line.split(b" ", 3)[2]
                head = heads.setdefault(family, [])
                if line not in head:
                    head.append(line)
                samples.setdefault(family, [])
            elif line and not line.startswith(b"#"):
                samples.setdefault(family, []).append(_label(line, w))
    out: list[bytes] = []
    for family, lines in samples.items():
        out += heads.get(family, [])
        out += lines
    return b"\n".join(out) + b"\n"
