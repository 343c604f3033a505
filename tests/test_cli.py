"""The ``gateway`` command as a user runs it: validate, explain, serve with a broken file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.processes


def gateway(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway.cli", *args],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=ROOT,
        env=env,
    )


def test_validate_ok() -> None:
    r = gateway("validate", "routing_rules.yaml")
    assert r.returncode == 0
    assert r.stdout.startswith("ok: routing_rules.yaml: 2 tiers")


def test_validate_prints_every_error_with_its_path(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    text = (ROOT / "routing_rules.yaml").read_text()
    text = text.replace("default_sla: standard", "default_sla: asap")
    text = text.replace("ttft: 5.0      #", "ttft: -5.0     #")
    bad.write_text(text)
    r = gateway("validate", str(bad))
    assert r.returncode == 2
    assert "tiers.highspeed.timeouts.ttft: Input should be greater than 0" in r.stderr
    r2 = gateway("validate", str(bad).replace("bad", "missing"))
    assert r2.returncode == 2 and "cannot read" in r2.stderr


def test_serve_refuses_a_broken_rules_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("tiers: {highspeed: {model: m, endpoints: [http://x], colour: red}}\n")
    r = gateway("serve", "--rules", str(bad), "--port", "0")
    assert r.returncode == 2
    assert "tiers.highspeed.colour: Extra inputs are not permitted" in r.stderr
    assert "sla_classes: Field required" in r.stderr


def test_serve_refuses_an_unknown_gateway_variable_with_the_nearest_name() -> None:
    env = {**os.environ, "GATEWAY_REDIS_URLL": "redis://127.0.0.1:1/0"}
    r = gateway("serve", "--port", "0", env=env)
    assert r.returncode == 2
    assert r.stderr == (
        "error: bad settings: GATEWAY_REDIS_URLL is not a setting "
        "(did you mean GATEWAY_REDIS_URL?)\n"
    )


def test_validate_and_serve_refuse_rules_naming_a_file_that_is_not_a_model(tmp_path: Path) -> None:
    model = tmp_path / "model.json"
    model.write_text('{"labels": ["chat"]}')
    rules = tmp_path / "rules.yaml"
    data = yaml.safe_load((ROOT / "routing_rules.yaml").read_text())
    data["classify"].setdefault("model", {})["path"] = str(model)
    rules.write_text(yaml.safe_dump(data))
    for args in (("validate", str(rules)), ("serve", "--rules", str(rules), "--port", "0")):
        r = gateway(*args)
        assert r.returncode == 2, r.stderr
        assert f"classify.model.path: {model}: not a model" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr


def test_explain_prints_the_decision(tmp_path: Path) -> None:
    req = tmp_path / "req.json"
    req.write_text(
        json.dumps(
            {
                "headers": {"x-gateway-sla": "batch"},
                "body": {"model": "auto", "messages": [{"role": "user", "content": "hello"}]},
            }
        )
    )
    r = gateway("explain", "routing_rules.yaml", str(req))
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["rule"] == "batch-to-standard"
    assert out["tiers"] == ["standard"]
    assert out["cls"]["sla_source"] == "header"
    req.write_text(json.dumps({"model": "nope", "messages": [{"role": "user", "content": "x"}]}))
    r = gateway("explain", "routing_rules.yaml", str(req))  # any name: the "*" alias
    assert r.returncode == 0 and json.loads(r.stdout)["cls"]["alias"] == "*"
    strict = yaml.safe_load((ROOT / "routing_rules.yaml").read_text())
    del strict["aliases"]["*"]  # the strict choice: an unknown name is a 404
    (tmp_path / "strict.yaml").write_text(yaml.safe_dump(strict))
    r = gateway("explain", str(tmp_path / "strict.yaml"), str(req))
    assert r.returncode == 1 and "404 model_not_found" in r.stderr


def test_explain_with_policies_says_which_level_decided(tmp_path: Path) -> None:
    req = tmp_path / "req.json"
    req.write_text(json.dumps({"model": "auto", "messages": [{"role": "user", "content": "hi"}]}))
    r = gateway(
        "explain",
        "routing_rules.yaml",
        str(req),
        "--tenant-policy",
        '{"forced_tier": "standard", "default_sla": "batch"}',
        "--key-policy",
        '{"forced_tier": "highspeed"}',
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["tiers"] == ["highspeed", "standard"]
    assert out["policy"]["forced_tier"] == {"value": "highspeed", "level": "key"}
    assert out["policy"]["default_sla"] == {"value": "batch", "level": "tenant"}
    assert "pinned by forced_tier (key)" in out["reason"]
    bad = gateway("explain", "routing_rules.yaml", str(req), "--key-policy", '{"rpm": 1}')
    assert bad.returncode == 2 and "bad policy" in bad.stderr


def test_serving_collects_the_young_generation_after_10k_allocations_not_700() -> None:
    """The start-up hook of ``gateway serve``: start-up objects frozen out of the collector,
    and the young generation collected after 10,000 net container allocations (64 requests
    in flight hold a few thousand objects; at CPython's 700 a collection walked them every
    few requests)."""
    code = (
        "import asyncio, gc\n"
        "from gateway.cli import _tune_gc\n"
        "before = gc.get_threshold()\n"
        "asyncio.run(_tune_gc(None))\n"
        "print(gc.get_threshold()[0], gc.get_threshold()[1:] == before[1:],"
        " gc.get_freeze_count() > 0)\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=30, cwd=ROOT
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["10000", "True", "True"]
