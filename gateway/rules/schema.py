"""The schema of ``routing_rules.yaml`` and its loader.

Parsing is strict: unknown keys are errors, cross references (tiers named by rules,
tasks named by the classifier, checks named by rules) are checked, and every problem
is reported with its YAML path, all at once. A file that fails never yields a
:class:`Rules`, so a bad file can never half-replace a good one.

The sections' models live by responsibility: :mod:`~gateway.rules.tiers` (tiers and their
pools' settings), :mod:`~gateway.rules.classification` (SLA and task classes, the
classifier's cues), :mod:`~gateway.rules.routes` (rules, routes and their guards),
:mod:`~gateway.rules.dispatching` (the attempt loop). They are importable from here too.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, ValidationError

from gateway.checks.config import NAMED, CheckSettings
from gateway.checks.kinds import KINDS
from gateway.checks.registry import CHECK_NAMES
from gateway.rules.analysis import Analysis, analysis_errors
from gateway.rules.base import Strict
from gateway.rules.classification import (
    Classify,
    CodeCues,
    ModelSettings,
    ReasoningCues,
    SlaClass,
    SummarizationCues,
    TaskClass,
)
from gateway.rules.dispatching import Dispatch
from gateway.rules.quality import QualitySettings
from gateway.rules.review import ReviewSettings
from gateway.rules.routes import GUARDS, Arm, Route, Rule, When
from gateway.rules.tiers import (
    Circuit,
    Continuation,
    Health,
    Price,
    Provider,
    StreamSettings,
    Tier,
    Timeouts,
)

__all__ = (
    "GUARDS",
    "Analysis",
    "Arm",
    "Circuit",
    "Classify",
    "CodeCues",
    "Continuation",
    "Dispatch",
    "Health",
    "ModelSettings",
    "Price",
    "Provider",
    "QualitySettings",
    "ReasoningCues",
    "Route",
    "Rule",
    "Rules",
    "RulesError",
    "SlaClass",
    "StreamSettings",
    "SummarizationCues",
    "TaskClass",
    "Tier",
    "Timeouts",
    "When",
    "cross_check",
    "load_rules",
    "parse_rules",
)


def _auto_only() -> dict[str, str | None]:
    return {"auto": None}


class Rules(Strict):
    version: int = 1
    tiers: dict[str, Tier] = Field(min_length=1)
    aliases: dict[str, str | None] = Field(default_factory=_auto_only)
    sla_classes: dict[str, SlaClass] = Field(min_length=1)
    default_sla: str
    tasks: dict[str, TaskClass] = Field(min_length=1)
    classify: Classify = Classify()
    rules: tuple[Rule, ...] = ()
    default: Route
    checks: CheckSettings = CheckSettings()
    dispatch: Dispatch = Dispatch()
    quality: QualitySettings = QualitySettings()
    review: ReviewSettings = ReviewSettings()

    def quality_of(self, route: Route) -> QualitySettings:
        """The quality circuit's settings of one rule (the top-level section, with the
        fields the rule's own ``quality:`` names)."""
        return self.quality.over(route.quality)

    def with_endpoints(self, overrides: dict[str, tuple[str, ...]]) -> Rules:
        """A copy whose tiers use ``overrides`` (tier name -> URLs) as endpoints."""
        tiers = dict(self.tiers)
        for name, urls in overrides.items():
            if name in tiers:
                tiers[name] = tiers[name].model_copy(update={"endpoints": urls})
        return self.model_copy(update={"tiers": tiers})

    def with_models(self, models: dict[str, str]) -> Rules:
        """A copy whose tiers send ``models`` (tier name -> model name) to their engines."""
        if not models:
            return self
        tiers = dict(self.tiers)
        for name, model in models.items():
            if name in tiers:
                tiers[name] = tiers[name].model_copy(update={"model": model})
        return self.model_copy(update={"tiers": tiers})


class RulesError(Exception):
    """A rules file that cannot be used; ``errors`` holds one "path: message" per problem."""

    def __init__(self, source: str, errors: list[str]):
        self.source = source
        self.errors = errors
        super().__init__(f"{source}: {len(errors)} error(s):\n  " + "\n  ".join(errors))


def _loc(loc: Iterable[int | str]) -> str:
    """A pydantic error's location as a YAML path; a check users write is
    ``checks.<name>.<field>`` (without the model's ``named`` and the union's ``<kind>``)."""
    out = ""
    for part in loc:
        if out == "checks" and part == NAMED:
            continue
        if out.startswith("checks.") and out.count(".") == 1 and part in KINDS:
            continue
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "<root>"


def _split_errors(path: str, rt: Route, r: Rules) -> list[str]:
    errs: list[str] = []
    labels: set[str] = set()
    for i, arm in enumerate(rt.split):
        if arm.tier not in r.tiers:
            errs.append(
                f"{path}.split[{i}].tier: unknown tier {arm.tier!r} (tiers: {', '.join(r.tiers)})"
            )
        if arm.label in labels:
            errs.append(f"{path}.split[{i}]: duplicate arm {arm.label!r} (name the arms)")
        labels.add(arm.label)
    if rt.split and not any(arm.weight > 0 for arm in rt.split):
        errs.append(f"{path}.split: every arm's weight is 0 (one needs a share)")
    errs.extend(analysis_errors(path, tuple(a.label for a in rt.split), rt.analysis))
    return errs


def _check_errors(path: str, rt: Route, r: Rules) -> list[str]:
    errs: list[str] = []
    names = (*CHECK_NAMES, *r.checks.named)
    for i, c in enumerate(rt.checks):
        if c not in names:
            errs.append(f"{path}.checks[{i}]: unknown check {c!r} ({', '.join(names)})")
    for i, c in enumerate(rt.checks_drop):
        if c not in GUARDS:
            errs.append(f"{path}.checks_drop[{i}]: {c!r} is not a guard ({', '.join(GUARDS)})")
        elif c in rt.checks:
            errs.append(f"{path}.checks_drop[{i}]: {c!r} is in the rule's own checks")
    return errs


def cross_check(r: Rules) -> list[str]:
    errs: list[str] = []

    def tier(path: str, name: str) -> None:
        if name not in r.tiers:
            errs.append(f"{path}: unknown tier {name!r} (tiers: {', '.join(r.tiers)})")

    def task(path: str, name: str) -> None:
        if name not in r.tasks:
            errs.append(f"{path}: unknown task {name!r} (tasks: {', '.join(r.tasks)})")

    def sla(path: str, name: str) -> None:
        if name not in r.sla_classes:
            errs.append(f"{path}: unknown SLA class {name!r} (classes: {', '.join(r.sla_classes)})")

    def route(path: str, rt: Route) -> None:
        tier(f"{path}.tier", rt.tier)
        errs.extend(_split_errors(path, rt, r))
        if rt.sla is not None:
            sla(f"{path}.sla", rt.sla)
        for i, t in enumerate(rt.fallback):
            tier(f"{path}.fallback[{i}]", t)
        errs.extend(_check_errors(path, rt, r))

    for alias, t in r.aliases.items():
        if t is not None:
            tier(f"aliases.{alias}", t)
    sla("default_sla", r.default_sla)
    for name, tc in r.tasks.items():
        sla(f"tasks.{name}.default_sla", tc.default_sla)
    c = r.classify
    for path, name in (
        ("classify.tools_task", c.tools_task),
        ("classify.json_task", c.json_task),
        ("classify.default_task", c.default_task),
        ("classify.code.task", c.code.task),
        ("classify.summarization.task", c.summarization.task),
        ("classify.reasoning.task", c.reasoning.task),
        ("classify.model.uncertain_task", c.model.uncertain_task or c.default_task),
    ):
        task(path, name)
    names: set[str] = set()
    for i, rule in enumerate(r.rules):
        path = f"rules[{i}]"
        if rule.name in names:
            errs.append(f"{path}.name: duplicate rule name {rule.name!r}")
        names.add(rule.name)
        route(path, rule)
        w = rule.when
        for j, t in enumerate(w.task or ()):
            task(f"{path}.when.task[{j}]", t)
        for j, s in enumerate(w.sla or ()):
            sla(f"{path}.when.sla[{j}]", s)
        for j, t in enumerate(w.tier_hint or ()):
            tier(f"{path}.when.tier_hint[{j}]", t)
    route("default", r.default)
    errs.extend(_user_check_errors(r))
    errs.extend(_quality_errors(r))
    return errs


def _quality_errors(r: Rules) -> list[str]:
    """The quality circuit's settings, and each rule's (merged with them), are usable."""
    routes: list[tuple[str, Route | None]] = [("quality", None), ("default.quality", r.default)]
    routes += [(f"rules[{i}].quality", x) for i, x in enumerate(r.rules)]
    errs = []
    for path, route in routes:
        bad = (r.quality if route is None else r.quality_of(route)).problem()
        if bad is not None and (route is None or route.quality is not None):
            errs.append(f"{path}: {bad}")
    return errs


def _user_check_errors(r: Rules) -> list[str]:
    """A judge names a tier of the rules; a plugin imports and builds (the user's code
    runs here, at validation, not first on a request)."""
    return [e for name, spec in r.checks.named.items() for e in spec.problems(name, r.tiers)]


# libyaml's parser when PyYAML was built with it (its wheels are): about 4x faster than the
# pure-Python one on a large rules document, with the same safe constructors
_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def parse_rules(text: str, source: str = "<rules>") -> Rules:
    """Parse and validate YAML text; raise :class:`RulesError` listing every problem."""
    try:
        data: Any = yaml.load(text, Loader=_LOADER)
    except yaml.YAMLError as e:
        raise RulesError(source, [f"YAML syntax: {e}".replace("\n", " ")]) from None
    except RecursionError:
        raise RulesError(source, ["YAML nested too deep"]) from None
    if not isinstance(data, dict):
        raise RulesError(source, ["<root>: expected a mapping at the top level"])
    try:
        rules = Rules.model_validate(data)
    except RecursionError:
        raise RulesError(source, ["<root>: nested too deep"]) from None
    except ValidationError as e:
        msgs = [f"{_loc(err['loc'])}: {err['msg']}" for err in e.errors()]
        raise RulesError(source, msgs) from None
    errs = cross_check(rules)
    if errs:
        raise RulesError(source, errs)
    return rules


def load_rules(path: Path) -> Rules:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise RulesError(str(path), [f"cannot read: {e.strerror}"]) from None
    return parse_rules(text, str(path))
