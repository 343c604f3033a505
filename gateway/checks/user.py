"""The checks users write, built from the rules' ``checks:`` map by their ``kind``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Final

from gateway.checks.base import Check
from gateway.checks.declarative import ContainsCheck, JsonAssertCheck, LengthCheck, RegexCheck
from gateway.checks.kinds import UserCheckSpec
from gateway.checks.language import LanguageCheck
from gateway.checks.plugin import load_plugin
from gateway.checks.remote import CheckServices, JudgeCheck, WebhookCheck

__all__ = ("BUILDERS", "build_user_checks")

Builder = Callable[[str, Any, "CheckServices | None"], Check]

BUILDERS: Final[Mapping[str, Builder]] = MappingProxyType(
    {
        "regex": lambda name, spec, io: RegexCheck(name, spec),
        "contains": lambda name, spec, io: ContainsCheck(name, spec),
        "length": lambda name, spec, io: LengthCheck(name, spec),
        "language": lambda name, spec, io: LanguageCheck(name, spec),
        "json_assert": lambda name, spec, io: JsonAssertCheck(name, spec),
        "python": lambda name, spec, io: load_plugin(name, spec),
        "webhook": lambda name, spec, io: WebhookCheck(name, spec, io),
        "judge": lambda name, spec, io: JudgeCheck(name, spec, io),
    }
)


def build_user_checks(
    named: Mapping[str, UserCheckSpec], io: CheckServices | None = None
) -> dict[str, Check]:
    """Each check the rules name, built by its kind (``ValueError`` for a plugin that
    cannot be built: the rules are refused before any of them is used)."""
    return {name: BUILDERS[spec.kind](name, spec, io) for name, spec in named.items()}
