"""Real Anthropic clients, unchanged but for their base URL, through the gateway.

* Anthropic's TypeScript SDK (``@anthropic-ai/sdk`` from npm), in a node script
  (``tests/anthropic_sdk_check.mjs``): create, stream, tool use and its result,
  ``countTokens``, errors as the SDK's own classes;
* LiteLLM's ``anthropic/`` provider pointed at the gateway (create, stream, tool calls, an
  error);
* Claude Code's CLI (``@anthropic-ai/claude-code``) in headless mode, ``claude -p`` with
  ``ANTHROPIC_BASE_URL`` at the gateway and the SGLang simulator behind it, with one
  read-only tool: the simulator calls it, Claude Code runs it and sends its result back.

The npm packages are installed on first use into ``.cache/anthropic-node`` (pinned
versions); without node and npm, or when the install fails (no registry), these tests skip,
and with ``REQUIRE_NODE_CLIENTS=1`` they fail instead.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest

from tests.conftest import Proc, free_port, rules_for_tests, start_gateway
from tests.waiting import wait_until

pytestmark = [pytest.mark.processes]

ROOT = Path(__file__).resolve().parent.parent
NODE_DIR = ROOT / ".cache" / "anthropic-node"
PACKAGES = {"@anthropic-ai/sdk": "1.17.0", "@anthropic-ai/claude-code": "2.1.332"}


def _unavailable(reason: str) -> NoReturn:
    if os.environ.get("REQUIRE_NODE_CLIENTS") == "1":
        pytest.fail(reason)
    pytest.skip(reason)


def _installed(package: str) -> Path:
    """``node_modules`` holding ``package`` at its pinned version (installed once, by npm)."""
    modules = NODE_DIR / "node_modules"
    manifest = modules / package / "package.json"
    want = PACKAGES[package]
    if manifest.exists() and json.loads(manifest.read_text()).get("version") == want:
        return modules
    npm = shutil.which("npm")
    if shutil.which("node") is None or npm is None:
        _unavailable("node and npm are needed for the Anthropic npm clients")
    NODE_DIR.mkdir(parents=True, exist_ok=True)
    specs = [f"{name}@{version}" for name, version in PACKAGES.items()]
    try:
        proc = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--prefix", str(NODE_DIR), *specs],
            capture_output=True,
            text=True,
            timeout=300,
        )
    except subprocess.TimeoutExpired:
        _unavailable("npm install timed out")
    if proc.returncode != 0 or not manifest.exists():
        _unavailable(f"npm install failed: {proc.stderr[-500:]}")
    return modules


def test_the_typescript_sdk(gateway: str) -> None:
    modules = _installed("@anthropic-ai/sdk")
    script = ROOT / "tests" / "anthropic_sdk_check.mjs"
    proc = subprocess.run(
        ["node", str(script), str(modules), gateway], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert got["create"]["text"] == "Echo (highspeed): Hello there"
    assert got["create"]["stop_reason"] == "end_turn" and got["create"]["usage"]["input_tokens"] > 0
    assert got["stream"] == {
        "text": "Echo (highspeed): stream me",
        "final": "Echo (highspeed): stream me",
        "stop_reason": "end_turn",
    }
    ts = got["tool_stream"]
    assert ts["stop_reason"] == "tool_use" and ts["input"] == {"city": "Paris"}
    assert ts["events"][0] == "message_start" and ts["events"][-1] == "message_stop"
    assert "content_block_delta" in ts["events"]
    assert got["tool_result"] == {"text": "It is sunny.", "stop_reason": "end_turn"}
    assert got["count_tokens"] == len("count these words please") // 4
    assert got["error"] == {
        "bad_request": True,
        "status": 400,
        "type": "invalid_request_error",
        "message": "highspeed says 400",
    }
    assert got["server_error"] == {"internal": True, "status": 502}


def test_litellms_anthropic_provider(gateway: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no fetch of the price map
    import litellm
    from litellm.exceptions import BadRequestError

    kw: dict[str, Any] = {"api_base": gateway, "api_key": "unused", "max_tokens": 50}
    r = litellm.completion(
        model="anthropic/claude-sonnet-4-5", messages=[{"role": "user", "content": "Hello"}], **kw
    )
    assert r.choices[0].message.content == "Echo (highspeed): Hello"
    assert r.usage.prompt_tokens == 10
    chunks = litellm.completion(
        model="anthropic/claude-sonnet-4-5",
        messages=[{"role": "user", "content": "Hi stream"}],
        stream=True,
        **kw,
    )
    assert (
        "".join(c.choices[0].delta.content or "" for c in chunks) == "Echo (highspeed): Hi stream"
    )
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ]
    content = 'weather? [[*: tool=get_weather; args={"city": "Paris"}]]'
    r = litellm.completion(
        model="anthropic/claude-x",
        messages=[{"role": "user", "content": content}],
        tools=tools,
        **kw,
    )
    call = r.choices[0].message.tool_calls[0]
    assert r.choices[0].finish_reason == "tool_calls"
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {
        "city": "Paris"
    }
    with pytest.raises(BadRequestError) as e:
        litellm.completion(
            model="anthropic/claude-x",
            messages=[{"role": "user", "content": "[[highspeed: status=400]]"}],
            **kw,
        )
    assert "highspeed says 400" in str(e.value)


# --- Claude Code --------------------------------------------------------------------------------


def _sim(tier: str) -> Proc:
    port = free_port()
    argv = [sys.executable, "-m", "engines.sim", "--port", str(port), "--profile", tier]
    argv += ["--time-scale", "0.01", "--model", f"sim-{tier}"]
    return Proc(argv, f"http://127.0.0.1:{port}/health")


@pytest.fixture(scope="module")
def simulated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Proc, str]]:
    """A gateway on the repository's rules (access log on) with the simulator's two tiers."""
    sims = {tier: _sim(tier) for tier in ("highspeed", "standard")}
    urls = {tier: p.url.removesuffix("/health") for tier, p in sims.items()}
    rules = rules_for_tests(ttft=5.0, total=30.0, stall=5.0)
    env = {"GATEWAY_ACCESS_LOG": "true"}
    proc, url = start_gateway(tmp_path_factory.mktemp("gw"), rules, urls, env)
    yield proc, url
    proc.stop()
    for p in sims.values():
        p.stop()


def test_claude_code_headless(simulated: tuple[Proc, str], tmp_path: Path) -> None:
    modules = _installed("@anthropic-ai/claude-code")
    claude = modules / ".bin" / "claude"
    proc, url = simulated
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    (work / "notes.txt").write_text("hello from the notes file\n")
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(home),  # none of the user's settings, sessions or keys
        "ANTHROPIC_BASE_URL": url,
        "ANTHROPIC_API_KEY": "sk-gateway-test",
        "CLAUDE_CODE_MAX_OUTPUT_TOKENS": "8192",  # its default (128k) and the prompt: > 131k
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }
    argv = [str(claude), "-p", "Read notes.txt and say hello.", "--output-format", "json"]
    argv += ["--tools", "Read"]  # one read-only tool: the simulator will call it
    try:
        run = subprocess.run(
            argv,
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
        )
    except OSError as e:  # a binary for another platform
        _unavailable(f"claude does not run here: {e}")
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    result = json.loads(run.stdout)
    assert result["is_error"] is False and result["subtype"] == "success"
    assert result["result"]  # the simulator's text, after the tool's turn
    assert result["num_turns"] >= 2  # a tool_use answered, run, and its tool_result sent back

    def sent() -> list[dict[str, Any]]:
        lines = [json.loads(x) for x in proc.log().splitlines() if '"gateway.access"' in x]
        fields = [x.get("fields", x) for x in lines]
        return [f for f in fields if f.get("kind") == "messages"]

    calls = wait_until(lambda: len(sent()) >= result["num_turns"] and sent(), "its requests")
    assert all(f["status"] == 200 for f in calls)
    assert all(f["stream"] for f in calls)  # Claude Code streams
    assert all(f["model"].startswith("claude-") for f in calls)  # its own names, taken by "*"
    assert {f["served_model"] for f in calls} <= {"sim-highspeed", "sim-standard"}
