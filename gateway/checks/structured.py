"""Checks of structured answers: JSON mode, JSON schema and tool calls.

``SchemaValidators`` (compiled JSON-schema validators, RE2 for client patterns) and
``JsonParseMemo`` (the parse of the last text) live in :mod:`gateway.checks.schemas` and
are shared between these checks of one build (``BaseCheck.build``'s context).
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.checks.base import (
    Abilities,
    BaseCheck,
    BuildContext,
    CheckResult,
    Output,
    RequestFacts,
    Scan,
    fail,
    is_blank,
    snippet,
)
from gateway.checks.schemas import (
    SCHEMA_CACHE_SIZE,
    SCHEMA_MAX_BYTES,
    JsonParseMemo,
    SchemaValidators,
)

__all__ = (
    "SCHEMA_CACHE_SIZE",
    "SCHEMA_MAX_BYTES",
    "JsonParseMemo",
    "JsonSchemaCheck",
    "JsonValidCheck",
    "SchemaValidators",
    "ToolCallValidCheck",
)


class JsonValidCheck(BaseCheck):
    """In JSON mode the text must be raw JSON (any JSON value; a ```json fence fails).

    Passes outside JSON mode, and when the answer is tool calls with no text. On a stream
    the first characters decide already: JSON begins with ``{`` or ``[`` (a Markdown fence
    or a sentence in front is not JSON, however it goes on).
    """

    __slots__ = ("_memo",)
    catalogue = 40
    name: str = "json_valid"
    abilities = Abilities(partial=True, scan=Scan.HEAD, needs_request=True)

    @classmethod
    def build(cls, ctx: BuildContext) -> JsonValidCheck:
        return cls(ctx.shared("json_memo", JsonParseMemo))

    def __init__(self, memo: JsonParseMemo | None = None) -> None:
        self._memo = JsonParseMemo() if memo is None else memo

    def run(self, out: Output, req: RequestFacts) -> CheckResult:
        if not req.json_mode or (out.tool_calls and is_blank(out.text)):
            return self.passed
        _, error = self._memo.parse(out.text)
        if error is not None:
            return fail(self.name, f"not valid JSON: {error}")
        return self.passed

    def run_partial(self, text: str, req: RequestFacts) -> CheckResult:
        head = text.lstrip()
        if not req.json_mode or not head or head[0] in "{[":
            return self.passed
        return fail(self.name, f"JSON mode, and the answer begins with {snippet(head, 24)}")


class JsonSchemaCheck(BaseCheck):
    """The JSON answer must match ``req.json_schema``.

    Passes when there is no schema, when the text is not JSON (``json_valid``'s job) and when
    the schema cannot be compiled (see ``SchemaValidators``).
    """

    __slots__ = ("_memo", "_validators")
    catalogue = 50
    name: str = "json_schema"
    abilities = Abilities(needs_request=True)

    @classmethod
    def build(cls, ctx: BuildContext) -> JsonSchemaCheck:
        return cls(
            ctx.shared("validators", SchemaValidators), ctx.shared("json_memo", JsonParseMemo)
        )

    def __init__(
        self, validators: SchemaValidators | None = None, memo: JsonParseMemo | None = None
    ) -> None:
        self._validators = SchemaValidators() if validators is None else validators
        self._memo = JsonParseMemo() if memo is None else memo

    def run(self, out: Output, req: RequestFacts) -> CheckResult:
        schema = req.json_schema
        if schema is None:
            return self.passed
        data, parse_error = self._memo.parse(out.text)
        if parse_error is not None:
            return self.passed
        error = self._validators.error(schema, data)
        if error is None:
            return self.passed
        return fail(self.name, f"schema violation: {error}")


class ToolCallValidCheck(BaseCheck):
    """Every tool call must be a function call to a function the client offered, with
    arguments that are a JSON object string matching the function's parameter schema.

    A missing "type" is accepted (clients read only "function"); a call of another tool
    type the client offered (e.g. "custom") passes unjudged; any other type fails.
    Passes when there are no tool calls.
    """

    __slots__ = ("_validators",)
    catalogue = 60
    name: str = "tool_call_valid"
    abilities = Abilities(needs_request=True)

    @classmethod
    def build(cls, ctx: BuildContext) -> ToolCallValidCheck:
        return cls(ctx.shared("validators", SchemaValidators))

    def __init__(self, validators: SchemaValidators | None = None) -> None:
        self._validators = SchemaValidators() if validators is None else validators

    def run(self, out: Output, req: RequestFacts) -> CheckResult:
        for index, call in enumerate(out.tool_calls):
            error = self._call_error(call, req)
            if error is not None:
                return fail(self.name, f"tool_calls[{index}]: {error}")
        return self.passed

    def _call_error(self, call: dict[str, Any], req: RequestFacts) -> str | None:
        kind = call.get("type", "function")
        if kind in req.other_tools:
            return None  # a kind of tool the client offered that we cannot judge ("custom")
        if kind != "function":
            return f"type {snippet(kind)} is not 'function'"
        function = call.get("function")
        if not isinstance(function, dict):
            return "no function object"
        name = function.get("name")
        if not isinstance(name, str) or name not in req.tools:
            return f"unknown function {snippet(name)}"
        arguments = function.get("arguments")
        if not isinstance(arguments, str):
            return f"{snippet(name)} arguments are not a JSON string"
        try:
            args = orjson.loads(arguments)
        except orjson.JSONDecodeError as exc:
            return f"{snippet(name)} arguments are not valid JSON: {exc}"
        if not isinstance(args, dict):
            return f"{snippet(name)} arguments are not a JSON object"
        schema = req.tools[name]
        if schema is None:
            return None
        error = self._validators.error(schema, args)
        return None if error is None else f"{snippet(name)} arguments: {error}"
