"""Registry: every check of ``CHECK_NAMES``, configured once at start-up."""

from __future__ import annotations

from gateway.checks.base import CHECK_NAMES, Check
from gateway.checks.config import CheckSettings
from gateway.checks.repetition import RepetitionCheck
from gateway.checks.structured import (
    JsonParseMemo,
    JsonSchemaCheck,
    JsonValidCheck,
    SchemaValidators,
    ToolCallValidCheck,
)
from gateway.checks.text import NonEmptyCheck, NotTruncatedCheck, RefusalCheck, TemplateLeakCheck

__all__ = ("CHECK_NAMES", "build_checks")


def build_checks(settings: CheckSettings) -> dict[str, Check]:
    """Registry: every check in CHECK_NAMES (in that order), configured once at start-up.

    ``json_schema`` and ``tool_call_valid`` share one compiled-validator cache, and
    ``json_valid`` and ``json_schema`` one parse memo.
    """
    validators = SchemaValidators()
    memo = JsonParseMemo()
    checks: dict[str, Check] = {
        "non_empty": NonEmptyCheck(),
        "not_truncated": NotTruncatedCheck(),
        "repetition": RepetitionCheck(settings.repetition),
        "json_valid": JsonValidCheck(memo),
        "json_schema": JsonSchemaCheck(validators, memo),
        "tool_call_valid": ToolCallValidCheck(validators),
        "template_leak": TemplateLeakCheck(settings.template_leak),
        "refusal": RefusalCheck(settings.refusal),
    }
    return checks
