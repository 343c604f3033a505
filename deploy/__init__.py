"""Deployment artefacts of the gateway, generated from the project's own sources.

The Helm chart ``deploy/helm/llm-gateway`` is the one source of the Kubernetes objects.
``python -m deploy.render`` writes the chart's inputs that come from Python (the cluster's
rules and the tiers' SGLang command lines, under ``files/``), ``python -m
deploy.grafana.build_dashboard`` the Grafana dashboard (``deploy/grafana/gateway-dashboard.json``)
and ``python -m deploy.k8s_tools`` installs the helm and kubectl binaries the chart's tests
use. The generated files are committed; ``tests/test_deploy.py`` re-renders them and fails
when they have drifted, ``tests/test_helm.py`` renders and validates the chart.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path


def write_files(files: Mapping[str, str], out: Path) -> None:
    """Write ``files`` (name -> text) into ``out``, creating the directory."""
    out.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (out / name).write_text(text, encoding="utf-8")


def stale_files(files: Mapping[str, str], out: Path) -> list[str]:
    """The names of ``files`` whose copy in ``out`` is missing or differs."""
    return [
        name
        for name, text in files.items()
        if not (out / name).is_file() or (out / name).read_text(encoding="utf-8") != text
    ]


def generator_main(
    prog: str,
    description: str,
    render: Callable[[], Mapping[str, str]],
    default_out: Path,
    argv: Sequence[str] | None = None,
) -> int:
    """The command line shared by the generators: ``[--out DIR] [--check]``."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--out", type=Path, default=default_out, help=f"default: {default_out}")
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if DIR is out of date"
    )
    args = parser.parse_args(argv)
    files = render()
    if args.check:
        stale = stale_files(files, args.out)
        for name in stale:
            print(f"out of date: {args.out / name}", file=sys.stderr)
        return 1 if stale else 0
    write_files(files, args.out)
    for name in files:
        print(args.out / name)
    return 0
