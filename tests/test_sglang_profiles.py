"""SGLang tier profiles (engines/profiles/*.yaml) and their launcher (engines/sglang.py).

The tests without a marker need nothing beyond the project's own dependencies. Those
marked ``sglang`` parse the rendered command lines with the argument parser of the pinned
SGLang release (``sglang_version`` in the profiles) and skip when it is not importable; set
``REQUIRE_SGLANG=1`` to make that a failure instead. A CPU-only environment for them
(about 1 minute to install, torch from the machine's local CPU wheel)::

    python3 -m venv /tmp/sglang-parser
    /tmp/sglang-parser/bin/pip install torch==2.13.0
    /tmp/sglang-parser/bin/pip install --no-deps sglang==0.5.23
    /tmp/sglang-parser/bin/pip install numpy orjson psutil pybase64 requests packaging \
        pillow starlette msgspec pydantic pyzmq tqdm ipython aiohttp triton pyyaml pytest
    /tmp/sglang-parser/bin/python -m pytest -m sglang tests/test_sglang_profiles.py

``triton`` (about 1 GB installed) is only imported incidentally by SGLang's utilities; when
it is missing an empty stand-in module is used for the import, which is enough to parse.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import types
import typing
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from engines import sglang as eng

PROFILES = eng.PROFILES_DIR
TIERS = ["highspeed", "standard"]


def flags(argv: list[str]) -> dict[str, str | None]:
    """``--flag value`` / ``--flag`` pairs of a rendered argv (prefix skipped)."""
    out: dict[str, str | None] = {}
    rest = argv[len(eng.LAUNCH_PREFIX) :]
    i = 0
    while i < len(rest):
        flag = rest[i]
        assert flag.startswith("--"), f"expected a flag at {i}: {rest}"
        assert flag not in out, f"duplicate flag {flag}"
        if i + 1 < len(rest) and not rest[i + 1].startswith("--"):
            out[flag] = rest[i + 1]
            i += 2
        else:
            out[flag] = None
            i += 1
    return out


def raw(tier: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((PROFILES / f"{tier}.yaml").read_text())
    return data


def write(tmp_path: Path, data: dict[str, Any], tier: str = "highspeed") -> Path:
    (tmp_path / f"{tier}.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return tmp_path


def errors_of(tmp_path: Path, data: dict[str, Any]) -> list[str]:
    with pytest.raises(eng.ProfileError) as ei:
        eng.load_profile("highspeed", write(tmp_path, data))
    return ei.value.errors


# --------------------------------------------------------------------------- always on


def test_known_tiers() -> None:
    assert eng.known_tiers() == TIERS


def test_every_section_renders() -> None:
    scalars = {"tier", "description", "sglang_version"}
    assert list(eng.SECTIONS) == [f for f in eng.Profile.model_fields if f not in scalars]


@pytest.mark.parametrize("tier", TIERS)
def test_profile_loads_and_renders_deterministically(tier: str) -> None:
    p = eng.load_profile(tier)
    assert p.tier == tier
    argv = eng.render_argv(p)
    assert argv[:3] == ["python3", "-m", "sglang.launch_server"]
    assert argv == eng.render_argv(eng.load_profile(tier))
    f = flags(argv)
    assert f["--model-path"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert f["--host"] == "0.0.0.0" and f["--port"] == "30000"
    assert "--enable-metrics" in f and f["--enable-metrics"] is None
    assert "--disable-radix-cache" not in f
    assert f["--served-model-name"]


def test_tiers_share_the_model_and_differ_in_name() -> None:
    hs, st = (eng.load_profile(t) for t in TIERS)
    assert hs.model.model_path.value == st.model.model_path.value
    assert hs.model.served_model_name.value != st.model.served_model_name.value


def test_highspeed_flags() -> None:
    f = flags(eng.render_argv(eng.load_profile("highspeed")))
    assert f["--speculative-algorithm"] == "EAGLE3"
    assert f["--speculative-draft-model-path"] == "lmsys/sglang-EAGLE3-LLaMA3.1-Instruct-8B"
    for k in (
        "--speculative-num-steps",
        "--speculative-eagle-topk",
        "--speculative-num-draft-tokens",
    ):
        assert int(f[k] or "0") >= 1
    assert f["--quantization"] == "fp8"
    assert f["--kv-cache-dtype"] == "fp8_e4m3"
    assert "--disable-radix-cache" not in f
    assert f["--schedule-policy"] == "lpm"
    assert int(f["--cuda-graph-max-bs-decode"] or "0") >= 1
    assert 0 < float(f["--mem-fraction-static"] or "0") < 1
    assert "--enable-metrics" in f


def test_standard_flags() -> None:
    f = flags(eng.render_argv(eng.load_profile("standard")))
    assert f["--dtype"] == "bfloat16"
    assert not [k for k in f if k.startswith("--speculative")]
    assert "--quantization" not in f
    assert not (f.get("--kv-cache-dtype") or "").startswith("fp8")
    assert "--disable-radix-cache" not in f
    assert "--enable-metrics" in f


def test_host_port_override() -> None:
    p = eng.load_profile("standard")
    f = flags(eng.render_argv(p, host="127.0.0.1", port=8102))
    assert f["--host"] == "127.0.0.1" and f["--port"] == "8102"
    with pytest.raises(ValueError, match="outside"):
        eng.render_argv(p, port=70000)


def test_dry_run_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert eng.launch_main(["highspeed", "--dry-run", "--port", "31000"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "python3 -m sglang.launch_server"
    for line in lines[1:]:
        words = line.split(" ")
        assert words[0].startswith("--") and len(words) in (1, 2), line
    assert "--kv-cache-dtype fp8_e4m3" in lines
    assert "--speculative-algorithm EAGLE3" in lines
    assert "--port 31000" in lines
    assert "--enable-metrics" in lines
    expected = eng.render_argv(eng.load_profile("highspeed"), port=31000)
    assert " ".join(lines).split(" ") == expected


def test_unknown_tier(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(eng.ProfileError, match="known tiers: highspeed, standard"):
        eng.load_profile("turbo")
    assert eng.launch_main(["turbo", "--dry-run"]) == 2
    assert "unknown tier 'turbo'; known tiers: highspeed, standard" in capsys.readouterr().err


def test_unknown_key_names_its_path(tmp_path: Path) -> None:
    data = raw("highspeed")
    data["speculative"]["speculative_num_stepz"] = {"value": 3, "why": "a typo of num_steps"}
    data["bogus"] = 1
    errs = errors_of(tmp_path, data)
    assert "speculative.speculative_num_stepz: Extra inputs are not permitted" in errs
    assert "bogus: Extra inputs are not permitted" in errs


def test_wrong_type_names_its_path(tmp_path: Path) -> None:
    data = raw("highspeed")
    data["memory"]["mem_fraction_static"]["value"] = "most of it"
    data["server"]["port"]["value"] = 0
    errs = errors_of(tmp_path, data)
    assert any(
        e.startswith("memory.mem_fraction_static.value: Input should be a valid number")
        for e in errs
    )
    assert any(
        e.startswith("server.port.value: Input should be greater than or equal to 1") for e in errs
    )


def test_bad_choices_and_missing_why(tmp_path: Path) -> None:
    data = raw("highspeed")
    data["precision"]["kv_cache_dtype"]["value"] = "fp8_e4m4"
    data["precision"]["quantization"]["value"] = "fp9"
    del data["cache"]["schedule_policy"]["why"]
    data["model"]["model_path"]["why"] = "two\nlines of reasons"
    errs = "\n".join(errors_of(tmp_path, data))
    assert "precision.kv_cache_dtype.value: Input should be 'auto', 'fp8_e4m3'" in errs
    assert "precision.quantization.value: Input should be 'fp8'" in errs
    assert "cache.schedule_policy.why: Field required" in errs
    assert "model.model_path.why: String should match pattern" in errs


def test_semantic_checks(tmp_path: Path) -> None:
    data = raw("highspeed")
    data["speculative"]["speculative_algorithm"]["value"] = "EAGLE4"
    errs = "\n".join(errors_of(tmp_path, data))
    assert (
        "speculative.speculative_algorithm: Value error, unknown speculative algorithm 'EAGLE4'"
        in errs
    )

    data = raw("highspeed")
    data["speculative"]["speculative_eagle_topk"]["value"] = 1
    errs = "\n".join(errors_of(tmp_path, data))
    assert "speculative: Value error, with speculative_eagle_topk 1" in errs

    data = raw("highspeed")
    data["cache"]["disable_radix_cache"]["value"] = True
    errs = "\n".join(errors_of(tmp_path, data))
    assert "cache: Value error, schedule_policy lpm needs the radix cache" in errs

    data = raw("highspeed")
    data["tier"] = "standard"
    assert errors_of(tmp_path, data) == [
        "tier: 'standard' does not match the file name 'highspeed.yaml'"
    ]


def test_bad_profile_via_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = raw("highspeed")
    data["observability"]["enable_metrics"]["value"] = "sometimes"
    d = write(tmp_path, data)
    assert eng.launch_main(["highspeed", "--dry-run", "--profiles-dir", str(d)]) == 2
    assert "observability.enable_metrics.value: Input should be a valid boolean" in (
        capsys.readouterr().err
    )
    (tmp_path / "highspeed.yaml").write_text("model: [unclosed\n")
    with pytest.raises(eng.ProfileError, match="YAML syntax"):
        eng.load_profile("highspeed", tmp_path)


def test_check_speculative_algorithm() -> None:
    assert eng.check_speculative_algorithm("eagle3") == "EAGLE3"
    assert eng.check_speculative_algorithm("NEXTN") == "NEXTN"
    for bad in ("EAGLE4", "NONE", "", "medusa"):
        with pytest.raises(ValueError, match="SGLang accepts: "):
            eng.check_speculative_algorithm(bad)


def test_launch_without_sglang(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(eng, "_sglang_importable", lambda: False)
    monkeypatch.setattr(os, "execvp", pytest.fail)  # the os module engines.sglang calls
    assert eng.launch_main(["highspeed"]) == 2
    err = capsys.readouterr().err
    assert "SGLang is not installed" in err and "sglang==0.5.23" in err


def test_launch_execs_this_interpreter(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: list[list[str]] = []

    class Exec(Exception):
        pass

    def fake_execvp(file: str, args: list[str]) -> None:
        seen.append([file, *args])
        raise Exec

    monkeypatch.setattr(eng, "_sglang_importable", lambda: True)
    monkeypatch.setattr(os, "execvp", fake_execvp)
    with pytest.raises(Exec):
        eng.launch_main(["standard", "--host", "127.0.0.1"])
    rendered = eng.render_argv(eng.load_profile("standard"), host="127.0.0.1")
    assert seen == [[sys.executable, sys.executable, *rendered[1:]]]
    assert "exec: " in capsys.readouterr().err


# --------------------------------------------------------------------------- sglang parser

with warnings.catch_warnings():
    # The marker is registered in pyproject.toml; tolerate a checkout where it is not yet.
    warnings.simplefilter("ignore", pytest.PytestUnknownMarkWarning)
    needs_sglang = pytest.mark.sglang


def unavailable(reason: str) -> typing.NoReturn:
    """Skip, or fail where REQUIRE_SGLANG=1 (a CI job that installed the parser env)."""
    if os.environ.get("REQUIRE_SGLANG") == "1":
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def sglang_parser() -> Iterator[tuple[argparse.ArgumentParser, types.ModuleType]]:
    """SGLang's own server-argument parser (``allow_abbrev=False``: no prefix matching)."""
    stub = None
    env = dict(os.environ)
    try:
        if importlib.util.find_spec("sglang") is None:
            raise ImportError("No module named 'sglang'")
        if importlib.util.find_spec("triton") is None:
            stub = sys.modules["triton"] = types.ModuleType("triton")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import sglang.srt.server_args as server_args
    except ImportError as e:
        unavailable(f"SGLang's parser is not importable ({e}); see this file's docstring")
    finally:
        if stub is not None and sys.modules.get("triton") is stub:
            del sys.modules["triton"]
        os.environ.clear()  # importing sglang redirects cache directories via os.environ
        os.environ.update(env)
    parser = argparse.ArgumentParser(prog="sglang", allow_abbrev=False)
    server_args.ServerArgs.add_cli_args(parser)
    yield parser, server_args


@needs_sglang
def test_sglang_version_matches_profiles() -> None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        installed = version("sglang")
    except PackageNotFoundError:
        unavailable("sglang is not installed; see this file's docstring")
    for tier in TIERS:
        assert eng.load_profile(tier).sglang_version == installed


@needs_sglang
@pytest.mark.parametrize("tier", TIERS)
def test_sglang_parses_rendered_argv(
    tier: str, sglang_parser: tuple[argparse.ArgumentParser, types.ModuleType]
) -> None:
    parser, server_args = sglang_parser
    profile = eng.load_profile(tier)
    args = eng.render_argv(profile)[len(eng.LAUNCH_PREFIX) :]
    ns = parser.parse_args(args)
    # No flag of ours is a deprecated alias that a later release may remove.
    actions = parser._option_string_actions
    deprecated = [
        a for a in args if a.startswith("--") and "Deprecated" in type(actions[a]).__name__
    ]
    assert deprecated == []
    # Every setting arrived under the dest of the same name, with the profile's value.
    for section_name in eng.SECTIONS:
        section = getattr(profile, section_name)
        if section is None:
            continue
        for name in type(section).model_fields:
            setting = getattr(section, name)
            if setting is not None:
                assert getattr(ns, name) == setting.value, name
    server_args.ServerArgs.from_cli_args(ns)  # builds the dataclass (no GPU, no download)


@needs_sglang
@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--no-such-flag", "1"], "unrecognized arguments: --no-such-flag"),
        (["--quantization", "fp9"], "argument --quantization: invalid choice: 'fp9'"),
        (["--kv-cache-dtype", "fp8_e4m4"], "argument --kv-cache-dtype: invalid choice"),
        (["--schedule-policy", "sjf"], "argument --schedule-policy: invalid choice"),
        # The pre-0.5.14 spelling, removed in 0.5.21 (still shown in SGLang's docs).
        (["--cuda-graph-max-bs", "32"], "unrecognized arguments: --cuda-graph-max-bs"),
    ],
)
def test_sglang_rejects_bad_flags(
    extra: list[str],
    message: str,
    sglang_parser: tuple[argparse.ArgumentParser, types.ModuleType],
    capsys: pytest.CaptureFixture[str],
) -> None:
    parser, _ = sglang_parser
    base = eng.render_argv(eng.load_profile("highspeed"))[len(eng.LAUNCH_PREFIX) :]
    with pytest.raises(SystemExit) as ei:
        parser.parse_args([*base, *extra])
    assert ei.value.code == 2
    assert message in capsys.readouterr().err


@needs_sglang
def test_schema_choices_are_sglang_choices(
    sglang_parser: tuple[argparse.ArgumentParser, types.ModuleType],
) -> None:
    parser, _ = sglang_parser
    by_dest = {a.dest: a for a in parser._actions}
    ours = {
        "dtype": eng.Dtype,
        "quantization": eng.Quantization,
        "speculative_draft_model_quantization": eng.DraftQuantization,
        "kv_cache_dtype": eng.KvCacheDtype,
        "schedule_policy": eng.SchedulePolicy,
        "attention_backend": eng.AttentionBackend,
    }
    for dest, literal in ours.items():
        choices = by_dest[dest].choices
        assert choices is not None, dest
        missing = set(typing.get_args(literal)) - set(choices)
        assert not missing, f"{dest}: {sorted(missing)} not accepted by SGLang"


@needs_sglang
def test_speculative_algorithm_names_match_sglang(
    sglang_parser: tuple[argparse.ArgumentParser, types.ModuleType],
) -> None:
    parser, _ = sglang_parser
    # SGLang's parser does not restrict the name: it only fails when the server starts.
    ns = parser.parse_args(["--model-path", "m", "--speculative-algorithm", "EAGLE4"])
    assert ns.speculative_algorithm == "EAGLE4"
    with pytest.raises(ValueError):
        eng.check_speculative_algorithm("EAGLE4")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
        except ImportError as e:  # needs torch
            unavailable(f"sglang.srt.speculative.spec_info not importable: {e}")
    builtin = {m.name for m in SpeculativeAlgorithm} - {"NONE"}
    assert builtin <= eng.SPECULATIVE_ALGORITHMS
    for name in eng.SPECULATIVE_ALGORITHMS:
        SpeculativeAlgorithm.from_string(name)  # raises ValueError if SGLang dropped it
    with pytest.raises(ValueError):
        SpeculativeAlgorithm.from_string("EAGLE4")
