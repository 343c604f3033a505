"""SGLang launch profiles for the production GPU tiers, and the launcher that renders them.

A *profile* (``engines/profiles/<tier>.yaml``) names the model, the draft model and every
SGLang server flag that makes a tier what it is. It is structured YAML, validated strictly
by the pydantic models below (unknown keys and wrong types are errors reported with their
YAML path). Every setting is a ``{value, why}`` pair: ``why`` is the one-line reason for the
choice, with the published figure behind it where one exists.

Setting names are SGLang's own server-argument names (``ServerArgs`` fields), so the flag
is always ``"--" + name.replace("_", "-")``: ``kv_cache_dtype`` -> ``--kv-cache-dtype``.
A ``true`` boolean renders as the bare flag, a ``false`` one renders nothing, a ``null`` or
absent optional setting renders nothing (SGLang's default applies).

:func:`render_argv` is the single source of truth for the server command line: the
Kubernetes manifests reuse it. Its first three words are ``python3 -m sglang.launch_server``:
``python3`` rather than ``sys.executable`` because the argv is meant for containers, whose
interpreter path differs from the machine that renders it. :func:`launch_main` (``gateway
engines launch TIER``) execs the same argv with this interpreter instead, having checked that
*this* interpreter can import SGLang.

The flags were checked against the parser of the SGLang release named by the profile's
``sglang_version`` (see ``tests/test_sglang_profiles.py``). SGLang renames flags between
0.5.x releases (``--cuda-graph-max-bs`` became ``--cuda-graph-max-bs-decode`` in 0.5.14 and
the old spelling was removed in 0.5.21), so a version bump means re-running that test.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import os
import shlex
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Annotated, Any, Generic, Literal, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

#: Where the tier profiles live.
PROFILES_DIR = Path(__file__).resolve().parent / "profiles"

#: The first words of every rendered command line (portable: no absolute interpreter path).
LAUNCH_PREFIX: tuple[str, ...] = ("python3", "-m", "sglang.launch_server")

#: ``--speculative-algorithm`` names SGLang 0.5.23 accepts (``SpeculativeAlgorithm`` members
#: in ``sglang/srt/speculative/spec_info.py`` plus the ``NEXTN`` alias of ``EAGLE``). Its
#: argument parser takes any string and only fails when the server starts, so we check here.
#: ``NONE`` (also an enum member) is left out: a profile without speculation omits the section.
#: Plugin-registered algorithms (``SpeculativeAlgorithm.register``) are not supported.
SPECULATIVE_ALGORITHMS: frozenset[str] = frozenset(
    {"EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK", "UNO", "FROZEN_KV_MTP"}
)

# Allowed values: subsets of SGLang 0.5.23's argparse choices (the sglang-marked test checks
# that each one is still accepted by the pinned release's parser).
Dtype = Literal["auto", "half", "float16", "bfloat16", "float", "float32"]
Quantization = Literal["fp8", "w8a8_fp8", "modelopt_fp8", "compressed-tensors", "mxfp8"]
DraftQuantization = Literal["fp8", "w8a8_fp8", "modelopt_fp8", "compressed-tensors", "unquant"]
KvCacheDtype = Literal["auto", "fp8_e4m3", "fp8_e5m2", "bf16", "bfloat16"]
SchedulePolicy = Literal["lpm", "random", "fcfs", "dfs-weight", "lof", "priority"]
AttentionBackend = Literal["fa3", "flashinfer", "triton", "trtllm_mha"]
PositiveInt = Annotated[int, Field(ge=1)]
Port = Annotated[int, Field(ge=1, le=65535)]
Fraction = Annotated[float, Field(gt=0.0, lt=1.0)]
NonEmpty = Annotated[str, Field(min_length=1, pattern=r"^\S+$")]

T = TypeVar("T")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Setting(_Strict, Generic[T]):
    """One SGLang server argument: its value and the one-line reason for it."""

    value: T
    why: str = Field(min_length=10, pattern=r"^[^\n]+$")


class ModelSection(_Strict):
    model_path: Setting[NonEmpty]
    served_model_name: Setting[NonEmpty]


class ServerSection(_Strict):
    host: Setting[NonEmpty]
    port: Setting[Port]


class PrecisionSection(_Strict):
    dtype: Setting[Dtype]
    quantization: Setting[Quantization] | None = None
    kv_cache_dtype: Setting[KvCacheDtype]


class SpeculativeSection(_Strict):
    speculative_algorithm: Setting[str]
    speculative_draft_model_path: Setting[NonEmpty]
    speculative_num_steps: Setting[PositiveInt]
    speculative_eagle_topk: Setting[PositiveInt]
    speculative_num_draft_tokens: Setting[PositiveInt]
    speculative_draft_model_quantization: Setting[DraftQuantization] | None = None

    @field_validator("speculative_algorithm")
    @classmethod
    def _known_algorithm(cls, v: Setting[str]) -> Setting[str]:
        return v.model_copy(update={"value": check_speculative_algorithm(v.value)})

    @model_validator(mode="after")
    def _chain_length(self) -> SpeculativeSection:
        # SGLang silently rewrites num_draft_tokens to num_steps + 1 when topk == 1: make
        # the profile say what will actually run.
        steps = self.speculative_num_steps.value
        if self.speculative_eagle_topk.value == 1 and (
            self.speculative_num_draft_tokens.value != steps + 1
        ):
            raise ValueError(
                "with speculative_eagle_topk 1, speculative_num_draft_tokens must be "
                f"speculative_num_steps + 1 = {steps + 1} (SGLang would override it)"
            )
        return self


class CacheSection(_Strict):
    disable_radix_cache: Setting[bool]
    schedule_policy: Setting[SchedulePolicy]

    @model_validator(mode="after")
    def _lpm_needs_radix(self) -> CacheSection:
        if self.disable_radix_cache.value and self.schedule_policy.value in ("lpm", "dfs-weight"):
            raise ValueError(
                f"schedule_policy {self.schedule_policy.value} needs the radix cache "
                "(SGLang falls back to fcfs when disable_radix_cache is true)"
            )
        return self


class MemorySection(_Strict):
    mem_fraction_static: Setting[Fraction]
    max_running_requests: Setting[PositiveInt] | None = None


class KernelsSection(_Strict):
    attention_backend: Setting[AttentionBackend] | None = None
    cuda_graph_max_bs_decode: Setting[PositiveInt]


class ObservabilitySection(_Strict):
    enable_metrics: Setting[bool]
    enable_cache_report: Setting[bool] | None = None


class Profile(_Strict):
    """A validated tier profile. Sections render in declaration order."""

    tier: NonEmpty
    description: str = Field(min_length=1)
    sglang_version: str = Field(pattern=r"^\d+\.\d+\.\d+(\.post\d+)?$")
    model: ModelSection
    server: ServerSection
    precision: PrecisionSection
    speculative: SpeculativeSection | None = None
    cache: CacheSection
    memory: MemorySection
    kernels: KernelsSection
    observability: ObservabilitySection


#: Profile sections in rendering order.
SECTIONS: tuple[str, ...] = (
    "model",
    "server",
    "precision",
    "speculative",
    "cache",
    "memory",
    "kernels",
    "observability",
)


class ProfileError(Exception):
    """A profile that cannot be used; ``errors`` holds one "path: message" per problem."""

    def __init__(self, source: str, errors: list[str]):
        self.source = source
        self.errors = errors
        super().__init__(f"{source}: {len(errors)} error(s):\n  " + "\n  ".join(errors))


def check_speculative_algorithm(name: str) -> str:
    """Return the canonical (upper-case) name of a speculative algorithm SGLang accepts.

    SGLang matches names case-insensitively but its argument parser does not restrict them
    (``--speculative-algorithm EAGLE4`` parses and only fails at server start), so profiles
    are checked against :data:`SPECULATIVE_ALGORITHMS`. Raises :class:`ValueError` otherwise.
    """
    canonical = name.strip().upper()
    if canonical not in SPECULATIVE_ALGORITHMS:
        raise ValueError(
            f"unknown speculative algorithm {name!r}; SGLang accepts: "
            + ", ".join(sorted(SPECULATIVE_ALGORITHMS))
        )
    return canonical


def _loc(loc: Iterable[int | str]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "<root>"


def parse_profile(text: str, source: str = "<profile>") -> Profile:
    """Parse and validate profile YAML; raise :class:`ProfileError` listing every problem."""
    try:
        data: Any = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ProfileError(source, [f"YAML syntax: {e}".replace("\n", " ")]) from None
    if not isinstance(data, dict):
        raise ProfileError(source, ["<root>: expected a mapping at the top level"])
    try:
        return Profile.model_validate(data)
    except ValidationError as e:
        msgs = [f"{_loc(err['loc'])}: {err['msg']}" for err in e.errors()]
        raise ProfileError(source, msgs) from None


def known_tiers(profiles_dir: Path = PROFILES_DIR) -> list[str]:
    """The tiers that have a profile (``<tier>.yaml``) in ``profiles_dir``, sorted."""
    return sorted(p.stem for p in profiles_dir.glob("*.yaml") if p.is_file())


def load_profile(tier: str, profiles_dir: Path = PROFILES_DIR) -> Profile:
    """Load and validate ``profiles_dir/<tier>.yaml``.

    Raises :class:`ProfileError` for an unknown tier (listing the known ones), an unreadable
    file, invalid YAML, a validation error (each with its YAML path) or a ``tier`` field that
    does not match the file name.
    """
    tiers = known_tiers(profiles_dir)
    if tier not in tiers:
        raise ProfileError(
            str(profiles_dir),
            [f"unknown tier {tier!r}; known tiers: {', '.join(tiers) or '(none)'}"],
        )
    path = profiles_dir / f"{tier}.yaml"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ProfileError(str(path), [f"cannot read: {e.strerror}"]) from None
    profile = parse_profile(text, str(path))
    if profile.tier != tier:
        raise ProfileError(
            str(path), [f"tier: {profile.tier!r} does not match the file name {path.name!r}"]
        )
    return profile


def _flag_groups(
    profile: Profile, *, host: str | None = None, port: int | None = None
) -> list[list[str]]:
    """The server flags, one group per flag: ``[flag]`` or ``[flag, value]``."""
    overrides: dict[str, object] = {}
    if host is not None:
        overrides["host"] = host
    if port is not None:
        if not 1 <= port <= 65535:
            raise ValueError(f"port {port} is outside 1..65535")
        overrides["port"] = port
    groups: list[list[str]] = []
    for section_name in SECTIONS:
        section = getattr(profile, section_name)
        if section is None:
            continue
        for name in type(section).model_fields:
            setting = getattr(section, name)
            if setting is None:
                continue
            value = overrides.get(name, setting.value)
            flag = "--" + name.replace("_", "-")
            if isinstance(value, bool):
                if value:
                    groups.append([flag])
            else:
                groups.append([flag, str(value)])
    return groups


def render_argv(profile: Profile, *, host: str | None = None, port: int | None = None) -> list[str]:
    """The exact server command line, ``python3 -m sglang.launch_server`` first.

    Deterministic: sections in :class:`Profile` order, settings in section order. ``host``
    and ``port`` override the profile's (e.g. a pod binding ``0.0.0.0:$PORT``).
    """
    argv = list(LAUNCH_PREFIX)
    for group in _flag_groups(profile, host=host, port=port):
        argv.extend(group)
    return argv


def format_dry_run(profile: Profile, *, host: str | None = None, port: int | None = None) -> str:
    """``render_argv`` one flag per line (a flag and its value share a line), shell-quoted."""
    lines = [shlex.join(LAUNCH_PREFIX)]
    lines += [shlex.join(g) for g in _flag_groups(profile, host=host, port=port)]
    return "\n".join(lines)


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port {value} is outside 1..65535")
    return value


def _sglang_importable() -> bool:
    spec = importlib.util.find_spec("sglang")
    if spec is None:
        return False
    # Run as a script (python engines/sglang.py), this very file would be found as "sglang".
    return spec.origin is None or Path(spec.origin).resolve() != Path(__file__).resolve()


def launch_main(argv: Sequence[str] | None = None) -> int:
    """``gateway engines launch TIER [--dry-run] [--host H] [--port P]``; returns an exit code.

    ``--dry-run`` prints the command line (one flag per line) and returns 0. Otherwise the
    process is replaced (``os.execvp``) by the SGLang server, run by this interpreter
    (``sys.executable``); if this interpreter cannot import ``sglang`` it says so and
    returns 2. A bad profile or unknown tier also returns 2, with each problem listed.
    """
    parser = argparse.ArgumentParser(
        prog="gateway engines launch",
        description="Start the SGLang server of a tier from engines/profiles/TIER.yaml.",
    )
    parser.add_argument("tier", metavar="TIER", help="profile name, e.g. highspeed, standard")
    parser.add_argument("--dry-run", action="store_true", help="print the command, do not run")
    parser.add_argument("--host", help="override the profile's --host")
    parser.add_argument("--port", type=_port, help="override the profile's --port")
    parser.add_argument(
        "--profiles-dir", type=Path, default=PROFILES_DIR, help="where TIER.yaml lives"
    )
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)

    try:
        profile = load_profile(args.tier, args.profiles_dir)
    except ProfileError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

    if args.dry_run:
        print(format_dry_run(profile, host=args.host, port=args.port))
        return 0

    if not _sglang_importable():
        print(
            f"error: SGLang is not installed for {sys.executable}: cannot launch tier "
            f"{profile.tier!r}. On a GPU node: pip install 'sglang=={profile.sglang_version}'. "
            "Use --dry-run to print the command instead.",
            file=sys.stderr,
        )
        return 2
    try:
        installed = importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        installed = "unknown"
    if installed != profile.sglang_version:
        print(
            f"warning: sglang {installed} is installed; profile {profile.tier!r} was checked "
            f"against {profile.sglang_version}: flags may have been renamed",
            file=sys.stderr,
        )

    cmd = render_argv(profile, host=args.host, port=args.port)
    cmd[0] = sys.executable
    print("exec: " + shlex.join(cmd), file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvp(cmd[0], cmd)
    except OSError as e:
        print(f"error: cannot exec {cmd[0]}: {e.strerror}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(launch_main())
