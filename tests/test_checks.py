"""Tests for gateway.checks: every check passing and failing, table-driven."""

from __future__ import annotations

import copy
import urllib.request
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest
from pydantic import ValidationError

from gateway.checks.base import (
    MAX_REASON_CHARS,
    CheckResult,
    Output,
    RequestFacts,
    run_checks,
)
from gateway.checks.config import (
    DEFAULT_TEMPLATE_TOKENS,
    CheckSettings,
    RefusalSettings,
    RepetitionSettings,
    TemplateLeakSettings,
)
from gateway.checks.registry import CHECK_NAMES, PASS_CACHE, build_checks
from gateway.checks.repetition import RepetitionCheck, find_loop_start
from gateway.checks.structured import (
    JsonParseMemo,
    JsonSchemaCheck,
    SchemaValidators,
    ToolCallValidCheck,
)
from gateway.checks.text import RefusalCheck, TemplateLeakCheck

# --------------------------------------------------------------------------------------------
# Fixtures: texts
# --------------------------------------------------------------------------------------------

PROSE = (
    "Rivers shape the land in slow and patient ways. Over thousands of years, a stream "
    "carves a valley, carries sediment downstream, and builds fertile plains where it "
    "finally slows near the sea. Farmers have settled along these plains since the "
    "earliest days of agriculture, because the soil is rich and water is close at hand.\n\n"
    "Floods, however, are the price of that fertility. When heavy rain falls upstream, the "
    "river rises quickly and spills over its banks. Modern engineering tries to tame this "
    "with levees, reservoirs and spillways, but each solution moves the problem somewhere "
    "else: a levee that protects one town can push more water toward the next.\n\n"
    "Ecologists now argue for giving rivers room to move. Restored wetlands absorb surges "
    "like a sponge, side channels give fish places to spawn, and floodplain forests slow "
    "the current. The approach is cheaper than concrete in the long run, although it asks "
    "communities to accept that some fields will be under water for a few weeks each year."
)
assert len(PROSE) > 900

CODE = "\n".join(
    [
        "def configure(settings):",
        "    x = 1",
        "    y = 2",
        "    z = 3",
        "    width = settings.get('width', 80)",
        "    height = settings.get('height', 24)",
        "    depth = settings.get('depth', 8)",
        "    color = settings.get('color', 'blue')",
        "    font = settings.get('font', 'mono')",
        "    size = settings.get('size', 12)",
        "    self.assertEqual(width, 80)",
        "    self.assertEqual(height, 24)",
        "    self.assertEqual(depth, 8)",
        "    self.assertEqual(color, 'blue')",
        "    self.assertEqual(font, 'mono')",
        "    self.assertEqual(size, 12)",
        "    return {",
        "        'width': width,",
        "        'height': height,",
        "        'depth': depth,",
        "        'color': color,",
        "        'font': font,",
        "        'size': size,",
        "    }",
    ]
)

MARKDOWN_TABLE = (
    "| Feature | Free | Pro | Enterprise |\n|---|---|---|---|\n"
    + "".join(
        f"| {name} | Yes | Yes | Yes |\n"
        for name in ("Sync", "Backup", "Sharing", "Search", "Tags", "Export", "Import", "API")
    )
    + "| SSO | No | No | Yes |\n| Audit log | No | No | Yes |\n"
)

NUMBERED_LIST = "".join(f"{i}. Add item number {i} to the list.\n" for i in range(1, 31))
SAME_ITEM_NUMBERED = "".join(f"{i}. Yes\n" for i in range(1, 31))
ZERO_MATRIX = "\n".join(
    ["[[0. 0. 0. 0. 0. 0. 0. 0. 0. 0.]"] + [" [0. 0. 0. 0. 0. 0. 0. 0. 0. 0.]"] * 9
)
PADDED_TABLE = PROSE + "\n\n| a | b |\n|" + " " * 600 + "| x |\n| c | d |\n\n" + PROSE

SENTENCE = "I will now repeat the answer to make sure it is clear. "
CJK_UNIT = "我很好,谢谢你的关心。"
CLOSING = "\n\nI hope this helps! Let me know if you have any other questions about rivers."


def out(
    text: str = "", finish: str | None = "stop", tools: list[dict[str, Any]] | None = None
) -> Output:
    return Output(text=text, finish_reason=finish, tool_calls=tools or [])


def facts(
    *,
    max_tokens_set: bool = False,
    json_mode: bool = False,
    json_schema: dict[str, Any] | None = None,
    tools: dict[str, dict[str, Any] | None] | None = None,
) -> RequestFacts:
    return RequestFacts(
        max_tokens_set=max_tokens_set,
        json_mode=json_mode,
        json_schema=json_schema,
        tools=tools or {},
    )


def call(name: str, arguments: Any = "{}", **extra: Any) -> dict[str, Any]:
    base = {"id": "call_1", "type": "function", "function": {"name": name, "arguments": arguments}}
    return base | extra


PERSON_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
    "required": ["name", "age"],
    "additionalProperties": False,
}
WEATHER_PARAMS: dict[str, Any] = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
    "required": ["city"],
}
TOOLS: dict[str, dict[str, Any] | None] = {"get_weather": WEATHER_PARAMS, "ping": None}

CHECKS = build_checks(CheckSettings())


def assert_header_safe(result: CheckResult) -> None:
    assert result.reason, result
    assert result.reason.isascii(), result.reason
    assert result.reason.isprintable(), result.reason
    assert len(result.reason) <= MAX_REASON_CHARS, result.reason


# --------------------------------------------------------------------------------------------
# The main table: (check, output, request) -> ok, reason fragment
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    id: str
    check: str
    output: Output
    req: RequestFacts = field(default_factory=facts)
    ok: bool = True
    reason_has: str = ""


CASES: list[Case] = [
    # non_empty
    Case("text", "non_empty", out("Hello.")),
    Case("empty", "non_empty", out(""), ok=False, reason_has="empty"),
    Case("whitespace", "non_empty", out("  \n\t "), ok=False, reason_has="empty"),
    Case("tool-calls-only", "non_empty", out("", tools=[call("ping")])),
    # not_truncated
    Case("stop", "not_truncated", out("x", "stop")),
    Case("none", "not_truncated", out("x", None)),
    Case("tool_calls", "not_truncated", out("", "tool_calls", [call("ping")])),
    Case("length-unset", "not_truncated", out("x", "length"), ok=False, reason_has="length"),
    Case("length-client-set", "not_truncated", out("x", "length"), facts(max_tokens_set=True)),
    # repetition: must not flag
    Case("empty", "repetition", out("")),
    Case("short-ha", "repetition", out("ha ha ha ha ha ha ha ha")),
    Case("prose", "repetition", out(PROSE)),
    Case("code-similar-lines", "repetition", out(CODE)),
    Case("markdown-table", "repetition", out(MARKDOWN_TABLE)),
    Case("numbered-list-1-30", "repetition", out(NUMBERED_LIST)),
    Case("numbered-same-item", "repetition", out(SAME_ITEM_NUMBERED)),
    Case("zero-matrix-10x10", "repetition", out(ZERO_MATRIX)),
    Case("rule-80", "repetition", out(PROSE + "\n\n" + "-" * 80 + "\n\n" + PROSE[:300])),
    Case("padded-table-cell", "repetition", out(PADDED_TABLE)),
    Case("trailing-newlines", "repetition", out(PROSE + "\n" * 40)),
    Case("three-copies", "repetition", out(PROSE[:400] + SENTENCE * 3)),
    Case("prose-twice", "repetition", out(PROSE + "\n\n" + PROSE)),
    Case(
        "cjk-prose",
        "repetition",
        out("今天天气很好,我们去公园散步。公园里有很多人,孩子们在草地上玩耍。" * 2),
    ),
    # repetition: loops
    Case("sentence-loop", "repetition", out(SENTENCE * 30), ok=False, reason_has="repeat the"),
    Case("word-loop", "repetition", out("The answer is the " + "the " * 200), ok=False),
    Case("char-run", "repetition", out("Wow" + "!" * 500), ok=False, reason_has="'!'"),
    Case("cjk-loop", "repetition", out(CJK_UNIT * 40), ok=False, reason_has="\\u6211"),
    Case("loop-after-prose", "repetition", out(PROSE + "\n\n" + SENTENCE * 20), ok=False),
    Case("loop-then-closing", "repetition", out(PROSE + SENTENCE * 20 + CLOSING), ok=False),
    Case("loop-cut-mid-unit", "repetition", out(PROSE + SENTENCE * 20 + SENTENCE[:17]), ok=False),
    Case("loop-trailing-ws", "repetition", out(PROSE + SENTENCE * 20 + "\n \n"), ok=False),
    Case("newline-flood", "repetition", out(PROSE + "\n" * 1000), ok=False, reason_has="\\n"),
    Case("paragraph-loop", "repetition", out((PROSE[:450] + "\n\n") * 5), ok=False),
    # json_valid
    Case("off-garbage", "json_valid", out("not json at all")),
    Case("object", "json_valid", out('{"a": 1}'), facts(json_mode=True)),
    Case("ws-around", "json_valid", out('\n  {"a": [1, 2]}\n'), facts(json_mode=True)),
    Case("array", "json_valid", out("[1, 2, 3]"), facts(json_mode=True)),
    Case("tools-no-text", "json_valid", out("", tools=[call("ping")]), facts(json_mode=True)),
    Case(
        "fenced",
        "json_valid",
        out('```json\n{"a": 1}\n```'),
        facts(json_mode=True),
        ok=False,
        reason_has="not valid JSON: ",
    ),
    Case("truncated", "json_valid", out('{"a": [1, 2'), facts(json_mode=True), ok=False),
    Case("prose", "json_valid", out(PROSE), facts(json_mode=True), ok=False),
    Case("empty", "json_valid", out(""), facts(json_mode=True), ok=False),
    Case(
        "trailing-text",
        "json_valid",
        out('{"a": 1} Hope it helps'),
        facts(json_mode=True),
        ok=False,
    ),
    # json_schema
    Case("no-schema", "json_schema", out('{"x": 1}'), facts(json_mode=True)),
    Case(
        "valid",
        "json_schema",
        out('{"name": "Ada", "age": 36}'),
        facts(json_mode=True, json_schema=PERSON_SCHEMA),
    ),
    Case(
        "missing-required",
        "json_schema",
        out('{"name": "Ada"}'),
        facts(json_mode=True, json_schema=PERSON_SCHEMA),
        ok=False,
        reason_has="schema violation: ",
    ),
    Case(
        "wrong-type",
        "json_schema",
        out('{"name": "Ada", "age": "36"}'),
        facts(json_mode=True, json_schema=PERSON_SCHEMA),
        ok=False,
        reason_has="age",
    ),
    Case(
        "extra-property",
        "json_schema",
        out('{"name": "Ada", "age": 36, "x": 1}'),
        facts(json_mode=True, json_schema=PERSON_SCHEMA),
        ok=False,
    ),
    Case(
        "not-json-is-json_valid-job",
        "json_schema",
        out("Sure! Here it is"),
        facts(json_mode=True, json_schema=PERSON_SCHEMA),
    ),
    Case(
        "uncompilable-schema",
        "json_schema",
        out('{"name": 1}'),
        facts(json_mode=True, json_schema={"type": "no-such-type"}),
    ),
    Case(
        "uncompilable-keyword-value",
        "json_schema",
        out('"abc"'),
        facts(json_mode=True, json_schema={"maxLength": "three"}),
    ),
    Case(
        "local-ref-valid",
        "json_schema",
        out('{"p": {"name": "Ada", "age": 1}}'),
        facts(
            json_mode=True,
            json_schema={
                "definitions": {"person": PERSON_SCHEMA},
                "properties": {"p": {"$ref": "#/definitions/person"}},
            },
        ),
    ),
    Case(
        "local-ref-invalid",
        "json_schema",
        out('{"p": {"name": "Ada", "age": -1}}'),
        facts(
            json_mode=True,
            json_schema={
                "definitions": {"person": PERSON_SCHEMA},
                "properties": {"p": {"$ref": "#/definitions/person"}},
            },
        ),
        ok=False,
    ),
    # tool_call_valid
    Case("no-calls", "tool_call_valid", out("Hello"), facts(tools=TOOLS)),
    Case(
        "valid",
        "tool_call_valid",
        out("", tools=[call("get_weather", '{"city": "Oslo", "unit": "c"}')]),
        facts(tools=TOOLS),
    ),
    Case(
        "no-params-schema",
        "tool_call_valid",
        out("", tools=[call("ping", '{"any": [1]}')]),
        facts(tools=TOOLS),
    ),
    Case(
        "type-missing-ok",
        "tool_call_valid",
        out("", tools=[{"id": "c", "function": {"name": "ping", "arguments": "{}"}}]),
        facts(tools=TOOLS),
    ),
    Case(
        "unknown-function",
        "tool_call_valid",
        out("", tools=[call("get_stock_price", "{}")]),
        facts(tools=TOOLS),
        ok=False,
        reason_has="unknown function 'get_stock_price'",
    ),
    Case(
        "no-tools-offered",
        "tool_call_valid",
        out("", tools=[call("ping")]),
        facts(),
        ok=False,
        reason_has="unknown function",
    ),
    Case(
        "bad-json-args",
        "tool_call_valid",
        out("", tools=[call("get_weather", '{"city": "Oslo"')]),
        facts(tools=TOOLS),
        ok=False,
        reason_has="not valid JSON",
    ),
    Case(
        "empty-args",
        "tool_call_valid",
        out("", tools=[call("ping", "")]),
        facts(tools=TOOLS),
        ok=False,
        reason_has="not valid JSON",
    ),
    Case(
        "args-not-object",
        "tool_call_valid",
        out("", tools=[call("ping", "[1, 2]")]),
        facts(tools=TOOLS),
        ok=False,
        reason_has="not a JSON object",
    ),
    Case(
        "args-not-string",
        "tool_call_valid",
        out("", tools=[call("ping", {"city": "Oslo"})]),
        facts(tools=TOOLS),
        ok=False,
        reason_has="not a JSON string",
    ),
    Case(
        "args-violate-schema",
        "tool_call_valid",
        out("", tools=[call("get_weather", '{"unit": "k"}')]),
        facts(tools=TOOLS),
        ok=False,
        reason_has="'get_weather' arguments: ",
    ),
    Case(
        "args-bad-enum",
        "tool_call_valid",
        out("", tools=[call("get_weather", '{"city": "Oslo", "unit": "k"}')]),
        facts(tools=TOOLS),
        ok=False,
    ),
    Case(
        "wrong-type",
        "tool_call_valid",
        out("", tools=[call("ping", type="custom")]),
        facts(tools=TOOLS),
        ok=False,
        reason_has="not 'function'",
    ),
    Case(
        "no-function-object",
        "tool_call_valid",
        out("", tools=[{"id": "c", "type": "function"}]),
        facts(tools=TOOLS),
        ok=False,
        reason_has="no function object",
    ),
    Case(
        "second-call-bad",
        "tool_call_valid",
        out("", tools=[call("ping"), call("nope")]),
        facts(tools=TOOLS),
        ok=False,
        reason_has="tool_calls[1]",
    ),
    Case(
        "uncompilable-params",
        "tool_call_valid",
        out("", tools=[call("odd", '{"a": 1}')]),
        facts(tools={"odd": {"type": "no-such-type"}}),
    ),
    # template_leak
    Case("prose", "template_leak", out(PROSE)),
    Case("angle-and-brackets", "template_leak", out("if a < b and xs[0] > c: print('<s>')")),
    Case("html-ish", "template_leak", out("<b>bold</b> [link](x) <|not a token")),
    Case("im_end", "template_leak", out("Done.<|im_end|>"), ok=False, reason_has="'<|im_end|>'"),
    Case("eos", "template_leak", out("Done.</s>"), ok=False, reason_has="'</s>'"),
    Case("inst", "template_leak", out("Sure [/INST] ok"), ok=False, reason_has="[/INST]"),
    # refusal
    Case("normal", "refusal", out(PROSE)),
    Case("cant-help-but", "refusal", out("I can't help but notice the river is rising.")),
    Case("empty", "refusal", out("")),
    Case("late-quote", "refusal", out(PROSE + ' He said "I cannot assist with that."')),
    Case("cant-help", "refusal", out("I can't help with that request."), ok=False),
    Case("cannot-assist", "refusal", out("I cannot assist with this."), ok=False),
    Case("wont-fulfill", "refusal", out("Sorry, I won't fulfill that request."), ok=False),
    Case("helpful", "refusal", out("I can't helpfully summarize a blank page, but here goes.")),
    Case("curly-apostrophe", "refusal", out("I can\u2019t help with that."), ok=False),
    Case("sorry-but", "refusal", out("I'm sorry, but I can't do that."), ok=False),
    Case("unable", "refusal", out("Unfortunately I am unable to help with that."), ok=False),
    # a disclaimer, usually followed by a real answer: not a refusal by itself
    Case("as-an-ai", "refusal", out("As an AI language model, I do not have opinions."), ok=True),
    Case("upper-case", "refusal", out("SORRY, I CAN'T DO THAT."), ok=False),
    Case("cannot-provide", "refusal", out("I can't provide guidance on that."), ok=False),
]


@pytest.mark.parametrize("case", CASES, ids=[f"{c.check}-{c.id}" for c in CASES])
def test_check(case: Case) -> None:
    result = CHECKS[case.check].run(case.output, case.req)
    assert result.check == case.check
    assert result.ok is case.ok, result
    if case.ok:
        assert result.reason == ""
    else:
        assert_header_safe(result)
        assert case.reason_has in result.reason


def test_case_table_covers_every_check_both_ways() -> None:
    outcomes = {(c.check, c.ok) for c in CASES}
    assert outcomes == {(name, ok) for name in CHECK_NAMES for ok in (True, False)}


@pytest.mark.parametrize("token", DEFAULT_TEMPLATE_TOKENS)
def test_template_leak_every_default_token(token: str) -> None:
    result = CHECKS["template_leak"].run(out(f"{PROSE}\n{token}\n"), facts())
    assert (result.ok, result.check) == (False, "template_leak")
    assert ascii(token) in result.reason


# --------------------------------------------------------------------------------------------
# Repetition: find_loop_start and reasons
# --------------------------------------------------------------------------------------------

LOOPS: list[tuple[str, str, str, int, str]] = [
    # id, clean prefix, unit, copies, suffix
    ("sentence-at-start", "", SENTENCE, 30, ""),
    ("sentence-after-prose", PROSE + "\n\n", SENTENCE, 25, ""),
    ("word", PROSE + " and then ", "the ", 150, ""),
    ("char-run", "Wow", "!", 600, ""),
    ("cjk", "你好!", CJK_UNIT, 50, ""),
    ("partial-last-copy", PROSE, SENTENCE, 12, SENTENCE[:20]),
    ("closing-after-loop", PROSE, SENTENCE, 20, CLOSING),
    ("code-lines", CODE + "\n", "    self.assertEqual(x, 1)\n", 20, ""),
]


@pytest.mark.parametrize(
    ("prefix", "unit", "copies", "suffix"), [row[1:] for row in LOOPS], ids=[r[0] for r in LOOPS]
)
def test_find_loop_start(prefix: str, unit: str, copies: int, suffix: str) -> None:
    settings = RepetitionSettings()
    text = prefix + unit * copies + suffix
    true_start = len(prefix)
    index = find_loop_start(text, settings)
    assert index is not None
    assert true_start - len(unit) <= index <= true_start
    assert find_loop_start(text[:index], settings) is None
    assert CHECKS["repetition"].run(out(text[:index]), facts()).ok


@pytest.mark.parametrize(
    "text",
    [PROSE, CODE, MARKDOWN_TABLE, NUMBERED_LIST, ZERO_MATRIX, "ha ha ha", "", "x" * 47],
    ids=["prose", "code", "table", "list", "zeros", "ha", "empty", "short"],
)
def test_find_loop_start_none(text: str) -> None:
    assert find_loop_start(text, RepetitionSettings()) is None


def test_repetition_reason_names_unit() -> None:
    result = CHECKS["repetition"].run(out(PROSE + "\n\n" + SENTENCE * 20), facts())
    assert not result.ok
    assert_header_safe(result)
    assert "period 55" in result.reason
    assert f"from char {len(PROSE) + 2}" in result.reason
    assert "repeated 20x" in result.reason


def test_repetition_reason_truncates_long_unit() -> None:
    unit = "é" + PROSE[:300] + " "
    result = CHECKS["repetition"].run(out(unit * 8), facts())
    assert not result.ok
    assert_header_safe(result)
    assert "..." in result.reason


@pytest.mark.parametrize(
    ("settings", "text", "ok"),
    [
        (RepetitionSettings(min_span_chars=48), "ha " * 20, False),
        (RepetitionSettings(), "ha " * 20, True),
        (RepetitionSettings(min_repeats=2), PROSE[:300] + PROSE[300:450] * 3, False),
        (RepetitionSettings(), PROSE[:300] + PROSE[300:450] * 3, True),
        (RepetitionSettings(), PROSE[:300] + PROSE[300:450] * 4, False),
        (RepetitionSettings(max_period=40), PROSE[:300] + SENTENCE * 30, True),
    ],
    ids=[
        "low-span-flags",
        "default-ignores",
        "two-repeats",
        "default-three",
        "default-four",
        "short-max-period",
    ],
)
def test_repetition_settings(settings: RepetitionSettings, text: str, ok: bool) -> None:
    result = RepetitionCheck(settings).run(out(text), facts())
    assert (result.ok, result.check) == (ok, "repetition")


def test_repetition_long_text_is_bounded() -> None:
    # Many probe points would be needed at the default stride; max_probes widens the stride,
    # and a loop reaching the end is still found.
    long_text = "".join(f"Line {i}: {PROSE[i % 500 : i % 500 + 60]}\n" for i in range(2000))
    assert find_loop_start(long_text, RepetitionSettings()) is None
    looped = long_text + SENTENCE * 10
    index = find_loop_start(looped, RepetitionSettings())
    assert index is not None
    assert len(long_text) - len(SENTENCE) <= index <= len(long_text)


# --------------------------------------------------------------------------------------------
# JSON schema cache and safety
# --------------------------------------------------------------------------------------------


def test_schema_compiled_once_per_distinct_schema() -> None:
    validators = SchemaValidators()
    check = JsonSchemaCheck(validators)
    reordered = {k: PERSON_SCHEMA[k] for k in reversed(list(PERSON_SCHEMA))}
    for schema in (PERSON_SCHEMA, reordered, copy.deepcopy(PERSON_SCHEMA)):
        assert check.run(out('{"name": "x", "age": 1}'), facts(json_schema=schema)).ok
    assert len(validators) == 1
    assert validators.get(PERSON_SCHEMA) is validators.get(reordered)


def test_schema_cache_is_bounded() -> None:
    validators = SchemaValidators(max_entries=2)
    for n in range(5):
        assert validators.get({"type": "array", "maxItems": n}) is not None
    assert len(validators) == 2


def test_uncompilable_schema_is_cached_as_none() -> None:
    validators = SchemaValidators()
    assert validators.get({"type": "no-such-type"}) is None
    assert validators.get({"type": "no-such-type"}) is None
    assert len(validators) == 1


def test_schema_not_mutated_by_compile() -> None:
    schema = {
        "$id": "https://example.com/person.json",
        "definitions": {"person": PERSON_SCHEMA},
        "properties": {"p": {"$ref": "#/definitions/person"}},
    }
    before = copy.deepcopy(schema)
    result = JsonSchemaCheck().run(out('{"p": {"name": 1, "age": 1}}'), facts(json_schema=schema))
    assert (result.ok, result.check) == (False, "json_schema")
    assert schema == before


@pytest.mark.parametrize(
    "ref",
    [
        "http://127.0.0.1:9/evil.json",
        "file:///etc/passwd",
        "other.json#/a",
        "urn:x:y",
        "gopher://127.0.0.1/x",
        "custom-scheme:thing",
    ],
)
def test_remote_refs_never_fetched(monkeypatch: pytest.MonkeyPatch, ref: str) -> None:
    fetched: list[Any] = []

    def no_network(*args: Any, **kwargs: Any) -> Any:
        fetched.append(args)
        raise OSError("network access attempted")

    monkeypatch.setattr(urllib.request, "urlopen", no_network)
    schema = {"type": "object", "properties": {"a": {"$ref": ref}}}
    result = JsonSchemaCheck().run(out('{"a": 1}'), facts(json_schema=schema))
    assert (result.ok, result.check) == (True, "json_schema")
    tool_result = ToolCallValidCheck().run(
        out("", tools=[call("f", '{"a": 1}')]), facts(tools={"f": schema})
    )
    assert tool_result.ok
    assert fetched == []


def test_json_parse_memo_shared_by_identity() -> None:
    memo = JsonParseMemo()
    text = '{"name": "Ada", "age": 3}'
    first = memo.parse(text)
    assert memo.parse(text)[0] is first[0]
    assert memo.parse("nope")[1] is not None
    assert memo.parse(text) == ({"name": "Ada", "age": 3}, None)


def test_json_error_reason_is_header_safe() -> None:
    result = CHECKS["json_valid"].run(out("{\u00e9\u4e2d\n" + "x" * 500), facts(json_mode=True))
    assert (result.ok, result.check) == (False, "json_valid")
    assert_header_safe(result)


def test_tool_reason_escapes_odd_names() -> None:
    name = "w\u00e9ird\nname" * 20
    result = ToolCallValidCheck().run(out("", tools=[call(name)]), facts(tools=TOOLS))
    assert (result.ok, result.check) == (False, "tool_call_valid")
    assert_header_safe(result)


# --------------------------------------------------------------------------------------------
# Configurable text checks
# --------------------------------------------------------------------------------------------


def test_template_leak_custom_tokens() -> None:
    check = TemplateLeakCheck(TemplateLeakSettings(tokens=("<<END>>",)))
    assert check.run(out("a <|im_end|> b"), facts()).ok
    result = check.run(out("a <<END>> b"), facts())
    assert (result.ok, result.check) == (False, "template_leak")


def test_refusal_custom_patterns_and_scan_window() -> None:
    check = RefusalCheck(RefusalSettings(patterns=(r"no can do",), scan_chars=20))
    assert not check.run(out("Well, no can do."), facts()).ok
    assert check.run(out("Well, well, well, well: no can do."), facts()).ok
    assert check.run(out("I cannot assist with that."), facts()).ok
    assert RefusalCheck(RefusalSettings(patterns=())).run(out("I cannot assist."), facts()).ok


# --------------------------------------------------------------------------------------------
# Registry, run_checks, settings
# --------------------------------------------------------------------------------------------


def test_build_checks_registry() -> None:
    checks = build_checks(CheckSettings())
    assert tuple(checks) == CHECK_NAMES
    for name, check in checks.items():
        assert check.name == name
        assert PASS_CACHE[name] == CheckResult(True, name)


def test_all_pass_returns_none_and_uses_pass_cache() -> None:
    checks = build_checks(CheckSettings())
    answer = out(PROSE)
    assert run_checks(list(checks.values()), answer, facts()) is None
    assert all(c.run(answer, facts()) is PASS_CACHE[c.name] for c in checks.values())
    assert run_checks([], answer, facts()) is None


@pytest.mark.parametrize(
    ("order", "text", "finish", "expected"),
    [
        (CHECK_NAMES, "", "length", "non_empty"),
        (CHECK_NAMES, SENTENCE * 30 + "<|im_end|>", "stop", "repetition"),
        (("template_leak", "repetition"), SENTENCE * 30 + "<|im_end|>", "stop", "template_leak"),
        (("refusal", "template_leak"), "I cannot assist. <|eot_id|>", "stop", "refusal"),
        (
            ("non_empty", "template_leak", "refusal"),
            "I cannot assist. <|eot_id|>",
            "stop",
            "template_leak",
        ),
        (("non_empty", "not_truncated", "json_valid"), "{", "length", "not_truncated"),
        (("non_empty", "not_truncated", "json_valid"), "{", "stop", "json_valid"),
        (CHECK_NAMES, '{"a": 1}<|im_end|>', "stop", "json_valid"),
    ],
    ids=[
        "empty-first",
        "repetition-before-leak",
        "leak-first",
        "refusal-first",
        "leak",
        "truncated",
        "json",
        "json-before-leak",
    ],
)
def test_run_checks_returns_first_failure(
    order: tuple[str, ...], text: str, finish: str, expected: str
) -> None:
    checks = [CHECKS[name] for name in order]
    result = run_checks(checks, out(text, finish), facts(json_mode=True))
    assert result is not None
    assert (result.ok, result.check) == (False, expected)


@pytest.mark.parametrize(
    "data",
    [
        {"nope": 1},
        {"repetition": {"min_repeat": 3}},
        {"template_leak": {"tokens": ["<x>"], "extra": True}},
        {"refusal": {"patterns": ["("]}},
        {"refusal": {"scan_chars": 0}},
        {"repetition": {"min_span_chars": 10}},
        {"template_leak": {"tokens": [""]}},
    ],
    ids=["top-level", "nested", "nested-extra", "bad-regex", "scan-zero", "tiny-span", "empty-tok"],
)
def test_settings_reject_bad_input(data: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        CheckSettings.model_validate(data)


def test_settings_accept_overrides_and_are_frozen() -> None:
    settings = CheckSettings.model_validate(
        {"repetition": {"min_repeats": 3}, "template_leak": {"tokens": ["<x>"]}}
    )
    assert settings.repetition.min_repeats == 3
    assert settings.template_leak.tokens == ("<x>",)
    assert settings.refusal == RefusalSettings()
    with pytest.raises(ValidationError):
        settings.repetition.min_repeats = 5
    assert orjson.loads(settings.model_dump_json())["repetition"]["min_span_chars"] == 200


@pytest.mark.parametrize(
    "schema",
    [
        {
            "$id": "gopher://127.0.0.1/#frag",
            "properties": {"a": {"$ref": "#/definitions/x"}},
            "definitions": {"x": {"type": "string"}},
        },
        {
            "properties": {
                "a": {"$id": "http://127.0.0.1:9/n#frag", "properties": {"b": {"$ref": "#/x"}}}
            }
        },
    ],
    ids=["root-id-with-fragment", "nested-id-with-fragment"],
)
def test_local_looking_refs_never_fetched(
    monkeypatch: pytest.MonkeyPatch, schema: dict[str, Any]
) -> None:
    fetched: list[Any] = []

    def no_network(*args: Any, **kwargs: Any) -> Any:
        fetched.append(args)
        raise OSError("network access attempted")

    monkeypatch.setattr(urllib.request, "urlopen", no_network)
    result = JsonSchemaCheck().run(out('{"a": 1}'), facts(json_schema=schema))
    assert (result.ok, result.check) == (True, "json_schema")
    assert fetched == []


def numbered(n: int, item: str = "Restart the build server.", start: int = 1) -> str:
    return "Ways to speed it up:\n" + "".join(f"{i}. {item}\n" for i in range(start, start + n))


@pytest.mark.parametrize(
    ("text", "finish", "ok"),
    [
        (numbered(45), "stop", False),  # a model stuck counting the same item
        (numbered(8, start=10), "length", False),  # ... stopped by the token limit
        (numbered(20, "I will not waste chalk."), "stop", True),  # asked for, and it ended
        (numbered(20, "I will not waste chalk."), None, True),  # live: not yet a loop
        ("".join(f"word{i} " for i in range(80)), "length", True),  # a counter, no item
        ("".join(f"| {i} | {i * i} |\n" for i in range(10, 90)), "length", True),  # data
        (numbered(3) + "".join(f"Step {i}: check the cable.\n" for i in range(40)), "stop", False),
    ],
    ids=["45-copies", "at-limit", "chalkboard", "chalkboard-live", "counter", "table", "steps"],
)
def test_numbered_loops(text: str, finish: str | None, ok: bool) -> None:
    assert CHECKS["repetition"].run(out(text, finish), facts()).ok is ok


def test_a_numbered_loop_starts_where_its_copies_do() -> None:
    text = "Tips:\n1. Use a cache.\n2. Pin versions.\n" + "".join(
        f"{i}. Restart the build server.\n" for i in range(10, 60)
    )
    start = find_loop_start(text, RepetitionSettings())
    # where periodicity starts: up to a period early when the clean text ends like a copy
    assert start is not None and "Pin versions" in text[:start]
    assert start <= text.index("10. Restart")


@pytest.mark.parametrize(
    ("text", "at"),
    [
        ("clean text", None),
        ("Answer.<|im_end|><|im_start|>user", 7),
        ("a <|im_start|> b <|im_end|>", 2),  # the first one, whichever token it is
        ("<|im_end|>", 0),
    ],
)
def test_where_a_template_leak_begins(text: str, at: int | None) -> None:
    from gateway.checks.config import TemplateLeakSettings
    from gateway.checks.text import TemplateLeakCheck

    assert TemplateLeakCheck(TemplateLeakSettings()).first_at(text) == at
