"""Shared fixtures: real processes on real sockets (fake engines, the gateway itself)."""

from __future__ import annotations

import asyncio
import hashlib
import os
import socket
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.waiting import WaitTimeout, wait_until

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "routing_rules.yaml"


_GIVEN: set[int] = set()  # ports handed out in this test run: never twice


def free_port() -> int:
    """A free port, never one handed out before in this run (two calls in a row could get
    the same port from the kernel: a gateway's data and admin listeners then collide)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in _GIVEN:
            _GIVEN.add(port)
            return port


class Proc:
    """A child process that is ready once ``ready_url`` answers 200.

    A gateway (``gateway.cli serve``) gets a free admin port unless ``env`` names one
    (``GATEWAY_ADMIN_PORT``): ``admin`` is its admin listener's URL.
    """

    admin: str = ""

    def __init__(
        self,
        argv: list[str],
        ready_url: str,
        env: dict[str, str] | None = None,
        timeout: float = 60.0,  # generous: a ready process is seen at once
    ):
        self.argv = argv  # the command line (Popen types its own copy loosely)
        self.url = ready_url
        env = dict(env or {})
        if argv[1:4] == ["-m", "gateway.cli", "serve"]:
            env.setdefault("GATEWAY_ADMIN_PORT", str(free_port()))
            self.admin = f"http://127.0.0.1:{env['GATEWAY_ADMIN_PORT']}"
        # a file, not a pipe: a chatty child never blocks; closed in stop()
        self._log = tempfile.TemporaryFile()  # noqa: SIM115
        self.p = subprocess.Popen(
            argv,
            env={**os.environ, **env},
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
        try:
            what = f"{ready_url} to answer 200"
            wait_until(self._ready, what, timeout=timeout, interval=0.05, ignore=(OSError,))
        except WaitTimeout as e:
            out = self.log()
            self.stop()
            raise RuntimeError(f"{argv} not ready ({e}):\n{out}") from None

    def _ready(self) -> bool:
        if self.p.poll() is not None:
            out = self.log()
            self._log.close()
            raise RuntimeError(f"{self.argv} exited with {self.p.returncode}:\n{out}")
        try:
            with urllib.request.urlopen(self.url, timeout=1) as r:
                return bool(r.status == 200)
        except urllib.error.HTTPError as e:  # not ready yet (a 503): its socket is closed here
            e.close()
            return False

    def stop(self) -> None:
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(5)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self._log.close()

    def log(self) -> str:
        """Everything the process printed so far."""
        self._log.seek(0)
        return self._log.read().decode(errors="replace")


def start_engine(name: str, *args: str) -> tuple[Proc, str]:
    """A fake engine (tests/fake_engine.py); ``args``: more of its flags (--model, --strict)."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = Proc(
        [
            sys.executable,
            str(ROOT / "tests" / "fake_engine.py"),
            "--name",
            name,
            "--port",
            str(port),
            *args,
        ],
        f"{base}/health",
    )
    return proc, base


def rules_for_tests(**tier_timeouts: float) -> dict[str, Any]:
    """The repository's rules with test-sized timeouts."""
    data: dict[str, Any] = yaml.safe_load(RULES.read_text())
    t = {"connect": 1.0, "ttft": 1.0, "total": 3.0, "stall": 1.0, **tier_timeouts}
    for route in (data["default"], *data["rules"]):
        route["hedge_after"] = None  # deterministic fallbacks; hedging has its own tests
    # the fake engines' directives ("[[highspeed: status=503]]") are not prompts: the learned
    # classifier has views on them (503 reads like arithmetic); it has its own tests
    data["classify"]["model"] = {"enabled": False}
    # every answer judged alone: a test's looping answers demote no tier for the next test
    # (the quality circuit has its own tests: tests/test_quality_circuit.py)
    data["quality"] = {"enabled": False}
    for tier in data["tiers"].values():
        tier["timeouts"] = dict(t)
        tier["circuit"] = {"failures": 1000, "cooldown": 1.0}
        tier.pop("request_defaults", None)  # the local model's max_tokens: not the fakes
    return data


def start_gateway(
    tmp: Path,
    rules: dict[str, Any],
    urls: dict[str, str],
    extra_env: dict[str, str] | None = None,
    timeout: float = 20.0,  # LiteLLM's import alone takes seconds
) -> tuple[Proc, str]:
    path = tmp / f"rules-{free_port()}.yaml"
    path.write_text(yaml.safe_dump(rules))
    port = free_port()
    env = {f"GATEWAY_POOL_{k.upper()}_URLS": v for k, v in urls.items()}
    if "GATEWAY_STORE_PATH" not in os.environ:  # a module's gateway, started before the
        env["GATEWAY_STORE_PATH"] = str(tmp / "gateway.db")  # test's own file is chosen
    env.update(extra_env or {})
    proc = Proc(  # with its own admin port: proc.admin
        [sys.executable, "-m", "gateway.cli", "serve", "--rules", str(path), "--port", str(port)],
        f"http://127.0.0.1:{port}/healthz",
        env=env,
        timeout=timeout,
    )
    return proc, f"http://127.0.0.1:{port}"


@pytest.fixture(scope="session")
def store_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("store")


@pytest.fixture(autouse=True)
def _store_file_of_the_test(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, store_files: Path
) -> None:
    """Every gateway a test starts (a process, or built in this one) keeps its embedded
    store in a file of the test's own, not in ``.gateway/`` of the repository: two gateways
    of one test share it (a restart finds its data), two tests never do."""
    if "GATEWAY_STORE_PATH" not in os.environ:
        name = hashlib.sha256(request.node.nodeid.encode()).hexdigest()[:16]
        monkeypatch.setenv("GATEWAY_STORE_PATH", str(store_files / name / "gateway.db"))


@pytest.fixture(scope="session")
def engines() -> Iterator[dict[str, str]]:
    # the tiers' models are discovered from these engines' /v1/models
    hs, hs_url = start_engine("highspeed", "--model", "fake-highspeed")
    st, st_url = start_engine("standard", "--model", "fake-standard")
    yield {"highspeed": hs_url, "standard": st_url}
    hs.stop()
    st.stop()


@pytest.fixture(scope="session")
def gateway_proc(
    engines: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Proc]:
    proc, _ = start_gateway(tmp_path_factory.mktemp("gw"), rules_for_tests(), engines)
    yield proc
    proc.stop()


@pytest.fixture(scope="session")
def gateway(gateway_proc: Proc) -> str:
    """The data port of a gateway without tenancy (no admin token)."""
    return gateway_proc.url.removesuffix("/healthz")


@pytest.fixture()
def client(gateway: str) -> Any:
    import openai

    c = openai.OpenAI(base_url=f"{gateway}/v1", api_key="unused", max_retries=0, timeout=20)
    yield c
    c.close()


REDIS = "redis://127.0.0.1:6379/0"


@pytest.fixture(scope="module")
def prefix() -> Iterator[str]:
    """A Redis key prefix of the test module's own, emptied afterwards."""
    from gateway.store.redis_store import RedisStore

    p = f"gwtest:{uuid.uuid4().hex[:8]}:"
    yield p

    async def clean() -> None:
        s = RedisStore(REDIS, p)
        await s.delete_prefix()
        await s.close()

    asyncio.run(clean())
