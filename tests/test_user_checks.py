"""The checks users write, unit by unit (no servers): the expression language of
``json_assert``, each declarative kind, the language check (CLD2), the kinds' validation,
loading ``python`` plugins, and the remote checks (webhook, judge) against an in-memory
:class:`~gateway.checks.remote.CheckServices`: budgets, the concurrency cap, circuits."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

import orjson
import pytest
from pydantic import TypeAdapter, ValidationError

from gateway.checks.base import (
    Abilities,
    BaseCheck,
    CheckContext,
    CheckResult,
    Cost,
    Output,
    RequestFacts,
    Scan,
    StreamGuard,
)
from gateway.checks.declarative import (
    ContainsCheck,
    JsonAssertCheck,
    LengthCheck,
    RegexCheck,
    compile_re2,
)
from gateway.checks.expr import evaluate, parse, parse_path
from gateway.checks.kinds import (
    ContainsSpec,
    JsonAssertSpec,
    JudgeSpec,
    LanguageSpec,
    LengthSpec,
    PythonSpec,
    RegexSpec,
    UserCheckSpec,
    WebhookSpec,
)
from gateway.checks.language import LanguageCheck
from gateway.checks.plugin import load_plugin
from gateway.checks.remote import JudgeCheck, WebhookCheck
from gateway.checks.user import build_user_checks

FACTS = RequestFacts(max_tokens_set=False, json_mode=False, json_schema=None, tools={})
SPECS: TypeAdapter[Any] = TypeAdapter(UserCheckSpec)


def _out(text: str, tool_calls: list[dict[str, Any]] | None = None) -> Output:
    return Output(text, "stop", tool_calls or [])


def _facts(last_user: str) -> RequestFacts:
    return RequestFacts(False, False, None, {}, last_user=last_user)


def _run(check: BaseCheck, text: str) -> tuple[bool, str]:
    result = check.run(_out(text), FACTS)
    return result.ok, result.reason


# --- the expression language ------------------------------------------------------------------

DOC: dict[str, Any] = {
    "total": 6.6,
    "id": "A-1",
    "tags": ["new", "vip"],
    "zero": 0,
    "nothing": None,
    "items": [
        {"sku": "a", "price": 1.1, "qty": 2},
        {"sku": "b", "price": 2.2, "qty": 1},
        {"sku": "c", "price": 3.3, "qty": 0},
    ],
    "orders": [{"lines": [{"n": 1}, {"n": 2}]}, {"lines": [{"n": 3}]}],
    "meta": {"a": 1},
}

EXPRESSIONS = [
    # paths: [n], [-n], [*], nested [*], $, missing
    ("items[0].sku == 'a'", True),
    ("items[-1].sku == 'c'", True),
    ("items[3].sku == null", True),
    ("items[*].sku == ['a', 'b', 'c']", True),
    ("orders[*].lines[*].n == [1, 2, 3]", True),
    ("missing[*] == []", True),
    ("$.id == 'A-1'", True),
    ("$.items[1].qty == 1", True),
    ("meta.a == 1 and meta.b == null", True),
    # every function
    ("exists(id) and exists(zero) and exists(meta.a)", True),
    ("exists(nothing) or exists(missing) or exists(meta.b)", False),
    ("len(items) == 3 and len(id) == 3 and len(meta) == 1 and len([]) == 0", True),
    ("sum(items[*].qty) == 3", True),
    ("total == sum(items[*].price)", True),
    ("min(items[*].price) == 1.1 and max(items[*].qty) == 2", True),
    ("min(3, 1, 2) == 1 and max('a', 'b') == 'b'", True),
    ("abs(-2) == 2 and abs(0 - total) == total", True),
    ("round(2.567, 2) == 2.57 and round(total) == 7", True),
    ("round(1234, -2) == 1200", True),
    ("count(items[*].qty) == 2", True),
    ("count([true, false, 1, 0, 'x', '']) == 3", True),
    # arithmetic and precedence; subtraction without spaces
    ("1 + 2 * 3 == 7 and (1 + 2) * 3 == 9", True),
    ("10 % 3 == 1 and 7 / 2 == 3.5", True),
    ("-2 * -3 == 6 and 2 - 3 - 1 == -2", True),
    ("len(items)-1 == 2 and total-0.6 == 6", True),
    ("'a' + 'b' == 'ab'", True),
    # chained comparisons hold pairwise, as in Python
    ("0 < zero + 1 < 2", True),
    ("1 < 2 < 2", False),
    ("3 > 2 > 1 and 1 < 3 > 2", True),
    ("0 <= len(tags) <= 2", True),
    ("1 == 1.0 == 1", True),
    ("id < 'B' and id >= 'A'", True),
    # in / not in: lists, substrings, keys
    ("'vip' in tags", True),
    ("'old' in tags", False),
    ("'old' not in tags and 'new' in tags", True),
    ("'A' in id and 'a' in meta and 'x' not in meta", True),
    ("1 in [1, 2]", True),
    # not / and / or
    ("not exists(missing) and exists(id)", True),
    ("false or true and false", False),
    ("not false == true", True),
    ("true and null", False),
    ("null == nothing", True),
    # an expression that errors is false, even under "not"
    ("sum(tags) > 0", False),
    ("nothing < 1", False),
    ("id < 1", False),
    ("total / zero == 1", False),
    ("not (total / zero == 1)", False),
    ("10 % zero == 1", False),
    ("-id == 1", False),
    ("id + 1 == 2", False),
    ("len(zero) == 1", False),
    ("abs('x') == 1", False),
    ("round('x') == 1", False),
    ("min([]) == 0", False),
    ("min(1, 'a') == 1", False),
    ("count(total) == 0", False),
    ("1 in total", False),
    ("items[*].price * 2 == 1", False),
    # a path reads JSON keys, never Python attributes
    ("meta.__class__ == null and items.pop == null", True),
]


@pytest.mark.parametrize(("text", "expected"), EXPRESSIONS, ids=[t for t, _ in EXPRESSIONS])
def test_expressions_evaluate_on_json(text: str, expected: bool) -> None:
    assert evaluate(parse(text), DOC) is expected


PARSE_ERRORS = [
    ("", "ends too soon"),
    ("total ==", "ends too soon"),
    ("(total == 1", "ends too soon"),
    ("total == 1)", "unexpected ')'"),
    ("total = 1", "cannot read ' = 1'"),
    ("a; b", "cannot read '; b'"),
    ("`ls`", "cannot read '`ls`'"),
    ("'open", "cannot read"),
    ("and", "unexpected 'and'"),
    ("a ** 2", "unexpected '*'"),
    ("a.1", "a name after '.', not '1'"),
    ("meta['a']", "unexpected '['"),
    ("items[1.5]", "unexpected '['"),
    ("len(1, 2)", "len() takes 1-1 arguments"),
    ("round()", "round() takes 1-2 arguments"),
    ("x" * 1001, "longer than 1000 characters"),
    ("(" * 33 + "1" + ")" * 33, "nested too deep"),
    ("-" * 33 + "1", "nested too deep"),
    ("-" * 990 + "1", "nested too deep"),
    # what would run code is refused when the rules load
    ("__import__('os')", "unexpected '('"),
    ("open('/etc/passwd')", "unexpected '('"),
    ("getattr(meta, 'a')", "unexpected '('"),
    ("items.pop()", "unexpected '('"),
    ("total.__class__.__mro__()", "unexpected '('"),
    ("true(1)", "unexpected '('"),
    ("lambda: 1", "cannot read ': 1'"),
    ("lambda x: x", "cannot read ': x'"),
    ("x if y else z", "unexpected 'if'"),
    ("[x for x in items]", "expected ']', found 'for'"),
]


@pytest.mark.parametrize(("text", "message"), PARSE_ERRORS, ids=[t[:40] for t, _ in PARSE_ERRORS])
def test_parse_errors_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ValueError) as e:
        parse(text)
    assert message in str(e.value)


def test_a_path_is_only_a_path() -> None:
    assert parse_path("items[-1].sku").steps == ("items", -1, "sku")
    assert parse_path("$[*].a").steps == (None, "a")
    with pytest.raises(ValueError, match="is not a path"):
        parse_path("total == 1")


@pytest.mark.parametrize(
    ("text", "doc", "tolerance", "expected"),
    [
        ("total == 0.1 + 0.2", {"total": 0.3}, 1e-9, True),
        ("total == 0.1 + 0.2", {"total": 0.3}, 0.0, False),
        ("total != 0.1 + 0.2", {"total": 0.3}, 1e-9, False),
        ("a == 100.5", {"a": 100}, 0.01, True),  # relative: 0.5 <= 0.01 * 100.5
        ("a == 100.5", {"a": 100}, 1e-9, False),
        ("a == 1", {"a": 1.0}, 0.0, True),
        ("a == '1'", {"a": 1}, 0.5, False),  # tolerance is for numbers only
    ],
)
def test_equality_between_numbers_allows_the_tolerance(
    text: str, doc: Any, tolerance: float, expected: bool
) -> None:
    assert evaluate(parse(text), doc, tolerance) is expected


# --- regex ------------------------------------------------------------------------------------


def _regex(**kw: Any) -> RegexCheck:
    return RegexCheck("rx", RegexSpec(kind="regex", **kw))


REGEX = [
    ({"must_match": "TCK-[0-9]{6}"}, "Your ticket is TCK-123456.", True, ""),
    ({"must_match": "TCK-[0-9]{6}"}, "Your ticket is TCK-12345.", False, "does not match"),
    ({"must_match": "TCK-[0-9]{6}"}, "Your ticket is tck-123456.", False, "does not match"),
    ({"must_match": "TCK-[0-9]{6}", "ignore_case": True}, "ticket tck-123456", True, ""),
    ({"must_not_match": r"password:\s*\S+"}, "Use password: hunter2", False, "hunter2"),
    ({"must_not_match": r"password:\s*\S+"}, "Never share a password.", True, ""),
    ({"must_not_match": "secret", "ignore_case": True}, "A SECRET plan", False, "SECRET"),
    ({"must_match": "^ok", "must_not_match": "bad"}, "ok, not bad", False, "must_not_match"),
    ({"must_match": "^ok", "must_not_match": "bad"}, "ok, fine", True, ""),
    # a path into a JSON answer: the string there (other values as JSON)
    (
        {"must_match": "^TCK-[0-9]{6}$", "path": "ticket.id"},
        '{"ticket": {"id": "TCK-000001"}}',
        True,
        "",
    ),
    (
        {"must_match": "^TCK-[0-9]{6}$", "path": "ticket.id"},
        '{"ticket": {"id": "x TCK-000001"}}',
        False,
        "does not match",
    ),
    ({"must_match": "^TCK", "path": "ticket.id"}, "TCK-000001", False, "no string at ticket.id"),
    ({"must_match": "^TCK", "path": "ticket.id"}, '{"ticket": {}}', False, "no string at"),
    (
        {"must_match": "^[0-9]+$", "path": "items[-1].n"},
        '{"items": [{"n": 1}, {"n": 42}]}',
        True,
        "",
    ),
    (
        {"must_not_match": "@", "path": "items[*].mail"},
        '{"items": [{"mail": "a@b.c"}]}',
        False,
        "must_not_match",
    ),
]


@pytest.mark.parametrize(("spec", "text", "ok", "reason"), REGEX)
def test_regex_verdicts(spec: dict[str, Any], text: str, ok: bool, reason: str) -> None:
    got_ok, got_reason = _run(_regex(**spec), text)
    assert got_ok is ok
    assert reason in got_reason


def test_regex_abilities_and_good_prefix() -> None:
    must_not = _regex(must_not_match="bad", max_match_chars=64)
    a = must_not.abilities
    assert (a.partial, a.scan, a.overlap, a.hold_stream) == (True, Scan.DELTA, 64, False)
    text = "héllo wörld — bad"  # non-ASCII before: offsets are characters, not bytes
    assert must_not.good_prefix(text, "stop") == text.index("bad")
    assert must_not.good_prefix("all good", "stop") is None
    must = _regex(must_match="ok")
    assert not must.abilities.partial and must.abilities.hold_stream
    assert must.good_prefix("bad", "stop") is None
    on_path = _regex(must_not_match="bad", path="a")
    assert not on_path.abilities.partial
    assert on_path.good_prefix('{"a": "bad"}', "stop") is None
    reported = _regex(must_match="ok", stream="report")
    assert reported.abilities.report_stream and not reported.abilities.hold_stream


@pytest.mark.parametrize(
    ("pattern", "why"),
    [
        (r"(a)\1", "invalid escape sequence: \\1"),
        (r"a(?=b)", "invalid perl operator: (?="),
        (r"a(?!b)", "invalid perl operator: (?!"),
        (r"(?<=a)b", "invalid perl operator: (?<="),
        (r"(?<!a)b", "invalid perl operator: (?<!"),
        ("(", "missing ): ("),
    ],
)
def test_re2_refuses_backreferences_and_lookaround(pattern: str, why: str) -> None:
    with pytest.raises(ValueError) as e:
        compile_re2(pattern)
    assert str(e.value) == f"pattern {pattern!r} is not RE2: {why}"
    with pytest.raises(ValidationError, match="is not RE2"):
        RegexSpec(kind="regex", must_not_match=pattern)


def _best_ns(check: RegexCheck, text: str, repeats: int) -> int:
    out, best = _out(text), 1 << 62
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        check.run(out, FACTS)
        best = min(best, time.perf_counter_ns() - t0)
    return best


@pytest.mark.parametrize("pattern", ["(a+)+$", "^(a+)+$", "(a+)+b", "(a|aa)+c"])
def test_a_catastrophic_pattern_runs_in_linear_time(pattern: str) -> None:
    """Backtracking would take exponential time on these (Python's ``re`` does not finish
    on 'a' * 40); RE2's time grows with the text's length: 10 times the text is at most
    about 10 times the time (quadratic would be 100)."""
    check = _regex(must_not_match=pattern)
    small = _best_ns(check, "a" * 500 + "!", 30)
    large = _best_ns(check, "a" * 5000 + "!", 30)
    assert check.run(_out("a" * 5000 + "!"), FACTS).ok  # none of them matches there
    assert large < 30 * small, (small, large)


# --- contains ---------------------------------------------------------------------------------


def _contains(**kw: Any) -> ContainsCheck:
    return ContainsCheck("cc", ContainsSpec(kind="contains", **kw))


FORBID = {"must_not_contain": ["Acme Corp", "acme.com"]}
CONTAINS = [
    (FORBID, "We recommend Acme Corp.", False, "contains 'acme corp'"),
    (FORBID, "We recommend ACME CORP today", False, "acme corp"),
    (FORBID, "We recommend \uff21\uff43\uff4d\uff45\u3000\uff23\uff4f\uff52\uff50", False, ""),
    (FORBID, "Ask Acme Corporation instead.", True, ""),  # on word boundaries
    (FORBID, "AcmeCorp is fine", True, ""),
    (FORBID, "see acme.com.", False, "acme.com"),
    (FORBID, "see www.acme.com/help", False, "acme.com"),
    (FORBID, "see acme.community or notacme.com", True, ""),
    ({**FORBID, "case_sensitive": True}, "We recommend acme corp", True, ""),
    ({**FORBID, "case_sensitive": True}, "We recommend Acme Corp", False, ""),
    ({"must_not_contain": ["Straße"]}, "Take the STRASSE north", False, "strasse"),
    ({"must_not_contain": ["fine"]}, "a \ufb01ne day", False, "fine"),  # the fi ligature
    ({"must_contain": ["refund", "order number"]}, "Your refund for the order number 7", True, ""),
    (
        {"must_contain": ["refund", "order number"]},
        "Your refund is on its way",
        False,
        "does not contain 'order number'",
    ),
    ({"must_contain": ["refund", "order number"]}, "refunds are slow", False, "'refund'"),
    ({"must_contain": ["refund", "credit"], "any": True}, "We issued a credit", True, ""),
    ({"must_contain": ["refund", "credit"], "any": True}, "We apologise", False, "refund"),
    (
        {"must_contain": ["thanks"], "must_not_contain": ["sorry"]},
        "sorry, thanks",
        False,
        "contains 'sorry'",
    ),
]


@pytest.mark.parametrize(("spec", "text", "ok", "reason"), CONTAINS)
def test_contains_verdicts(spec: dict[str, Any], text: str, ok: bool, reason: str) -> None:
    got_ok, got_reason = _run(_contains(**spec), text)
    assert got_ok is ok
    assert reason in got_reason


@pytest.mark.parametrize(
    ("text", "at"),
    [
        ("Try Acme Corp or Acme Corp.", 4),
        ("Die Straße: Acme Corp, and again Acme Corp.", 12),  # "ß" folds to "ss"
        ("Fuß. \uff21\uff43\uff4d\uff45 Corp", 5),
        ("e\u0301te\u0301 Acme Corp", 6),  # NFKC composes "e" + accent into one character
        ("Nothing to see", None),
    ],
)
def test_contains_good_prefix_ends_before_the_first_phrase(text: str, at: int | None) -> None:
    check = _contains(**FORBID)
    assert check.good_prefix(text, "stop") == at
    if at is not None:
        assert check.run(_out(text[:at]), FACTS).ok
        assert not check.run(_out(text[: at + 9]), FACTS).ok


def test_contains_abilities() -> None:
    forbid = _contains(**FORBID)
    a = forbid.abilities
    assert (a.partial, a.scan, a.whole_from_deltas) == (True, Scan.DELTA, True)
    assert a.overlap >= len("Acme Corp")
    assert forbid.guard() is not None
    need = _contains(must_contain=["x"])
    assert not need.abilities.partial and need.abilities.hold_stream
    assert need.guard() is None and need.good_prefix("x", "stop") is None


class Growing:
    """A stream's text as a guard reads it (:class:`gateway.checks.base.TextSource`)."""

    def __init__(self) -> None:
        self.text = ""

    @property
    def chars(self) -> int:
        return len(self.text)

    def tail(self, n: int) -> str:
        return self.text[-n:]


def _guard(*phrases: str) -> StreamGuard:
    guard = _contains(must_not_contain=list(phrases)).guard()
    assert guard is not None
    return guard


@pytest.mark.parametrize(
    ("phrases", "steps"),
    [
        (
            ("Acme Corp",),
            [
                ("We like ", None),
                ("Ac", 8),  # could begin the phrase: held from its start
                ("me Co", 8),
                ("la", None),  # "Acme Cola": broke off, released
                (" and acme", 22),
                ("s", None),  # "acmes": broke off
                (". Tacme", None),  # not at a word's start
                (" \uff21\uff43\uff4d", 35),  # full-width, folded
            ],
        ),
        (("acme.com",), [("see acme", 4), (".", 4), ("org", None)]),
        (("Straße Nord",), [("Die Straß", 4), ("e No", 4), ("w", None)]),  # "ß" -> "ss"
        (("Café Noir",), [("Try cafe\u0301", 4), (" no", 4), ("t", None)]),  # composed
        (("Acme Corp",), [("Die Straße a", 11), ("cme co", 11)]),  # an expansion before it
    ],
)
def test_the_phrase_guard_holds_a_tail_that_may_begin_a_phrase(
    phrases: tuple[str, ...], steps: list[tuple[str, int | None]]
) -> None:
    guard, state = _guard(*phrases), Growing()
    assert not guard.ahead
    for delta, start in steps:
        state.text += delta
        assert guard.update(state) is (start is not None), state.text
        assert guard.holding is (start is not None)
        if start is not None:
            assert guard.start == start, state.text
        assert not guard.confirmed(state)


# --- length, json_assert ----------------------------------------------------------------------

LENGTH = [
    ({"max_chars": 10}, "x" * 10, None, True, ""),
    ({"max_chars": 10}, "x" * 11, None, False, "11 characters, over 10"),
    ({"max_tokens": 5}, "x" * 21, None, False, "21 characters, over 20"),  # 4 a token
    ({"max_chars": 30, "max_tokens": 5}, "x" * 25, None, False, "over 20"),
    ({"min_chars": 5}, "abc", None, False, "3 characters, under 5"),
    ({"min_tokens": 2}, "x" * 7, None, False, "7 characters, under 8"),
    ({"min_tokens": 2}, "x" * 8, None, True, ""),
    ({"min_chars": 5}, "", [{"id": "1"}], True, ""),  # tool calls: no minimum of text
    ({"min_chars": 2, "max_chars": 4}, "xxx", None, True, ""),
]


@pytest.mark.parametrize(("spec", "text", "calls", "ok", "reason"), LENGTH)
def test_length_verdicts(
    spec: dict[str, Any], text: str, calls: list[dict[str, Any]] | None, ok: bool, reason: str
) -> None:
    result = LengthCheck("len", LengthSpec(kind="length", **spec)).run(_out(text, calls), FACTS)
    assert (result.ok, reason in result.reason) == (ok, True)


def test_a_maximum_length_runs_on_partial_text_a_minimum_does_not() -> None:
    most = LengthCheck("len", LengthSpec(kind="length", max_tokens=3))
    assert most.abilities.partial and most.abilities.scan is Scan.TEXT
    assert most.run_partial("x" * 12, FACTS).ok
    assert most.run_partial("x" * 13, FACTS).reason == "over 12 characters"
    assert most.good_prefix("x" * 13, "stop") is None
    least = LengthCheck("len", LengthSpec(kind="length", min_chars=5, max_chars=9))
    assert not least.abilities.partial and least.abilities.hold_stream
    assert least.run_partial("ab", FACTS).ok  # a prefix may still grow


TOTALS = ("total == sum(items[*].price)", "exists(id)")
JSON_ASSERT = [
    ('{"id": 1, "total": 3.3, "items": [{"price": 1.1}, {"price": 2.2}]}', None, True, ""),
    (
        '{"id": 1, "total": 4, "items": [{"price": 1.1}, {"price": 2.2}]}',
        None,
        False,
        "assert fails: 'total == sum(items[*].price)'",
    ),
    ('{"total": 0, "items": []}', None, False, "assert fails: 'exists(id)'"),
    ("The total is 3.3", None, False, "the answer is not JSON"),
    ('```json\n{"id": 1, "total": 0, "items": []}\n```', None, False, "not JSON"),
    ("", None, False, "not JSON"),
    ("", [{"id": "c1", "type": "function"}], True, ""),  # tool calls: not its business
    ("[1, 2]", None, False, "assert fails"),  # paths on a list read null
]


@pytest.mark.parametrize(("text", "calls", "ok", "reason"), JSON_ASSERT)
def test_json_assert_verdicts(
    text: str, calls: list[dict[str, Any]] | None, ok: bool, reason: str
) -> None:
    spec = JsonAssertSpec.model_validate({"kind": "json_assert", "assert": TOTALS})
    result = JsonAssertCheck("totals", spec).run(_out(text, calls), FACTS)
    assert result.ok is ok
    assert reason in result.reason
    assert result.check == "totals"


# --- language ---------------------------------------------------------------------------------

DE_Q = "Wie kann ich meine Rechnung für den letzten Monat herunterladen und ausdrucken?"
DE_A = (
    "Sie können Ihre Rechnung für den letzten Monat auf der Abrechnungsseite "
    "herunterladen und dort ausdrucken."
)
EN_A = "You can download your invoice for last month from the billing page and print it there."
FR_A = "Vous pouvez télécharger votre facture du mois dernier depuis la page de facturation."
CODE = (
    "```python\n"
    + "def download_invoice(month):\n    return client.get('/invoices', params={'m': month})\n" * 8
    + "```\n"
)

LANGUAGE = [
    ({}, DE_Q, EN_A, False, "answer in en (98%), expected de"),
    ({}, DE_Q, DE_A, True, ""),
    ({}, DE_Q, "Ja, gerne.", True, ""),  # too short to judge
    ({}, "Hallo?", EN_A, True, ""),  # the user's turn is too short: nothing to compare
    ({}, "", EN_A, True, ""),
    ({}, DE_Q, DE_A[:60] + "\n" + CODE + "Das ist alles, viel Erfolg dabei.", True, ""),
    ({}, DE_Q, "\ud800" + EN_A, True, ""),  # not valid UTF-8: not judged
    ({"language": "fr"}, DE_Q, FR_A, True, ""),
    ({"language": "fr"}, FR_A, EN_A, False, "expected fr"),
    ({"language": "de", "min_chars": 200}, DE_Q, EN_A, True, ""),
]


@pytest.mark.parametrize(("spec", "asked", "answer", "ok", "reason"), LANGUAGE)
def test_language_verdicts(
    spec: dict[str, Any], asked: str, answer: str, ok: bool, reason: str
) -> None:
    check = LanguageCheck("lang", LanguageSpec(kind="language", **spec))
    result = check.run(_out(answer), _facts(asked))
    assert result.ok is ok
    assert reason in result.reason


def test_the_language_check_reads_the_request_and_the_whole_answer() -> None:
    a = LanguageCheck("lang", LanguageSpec(kind="language")).abilities
    assert a.needs_request and not a.partial and a.hold_stream and a.cost is Cost.CHEAP


# --- validation of the kinds ------------------------------------------------------------------

INVALID = [
    ({"kind": "regex"}, "", "give must_match, must_not_match or both"),
    ({"kind": "regex", "must_match": r"(a)\1"}, "", "is not RE2: invalid escape sequence"),
    ({"kind": "regex", "must_match": "a", "path": "a =="}, "", "ends too soon"),
    (
        {"kind": "regex", "must_match": "a", "max_match_chars": 0},
        "max_match_chars",
        "greater than or equal to 1",
    ),
    ({"kind": "contains"}, "", "give must_contain, must_not_contain or both"),
    ({"kind": "contains", "must_not_contain": [""]}, "must_not_contain.0", "at least 1"),
    ({"kind": "length"}, "", "give min_chars, max_chars, min_tokens or max_tokens"),
    ({"kind": "length", "max_chars": 0}, "max_chars", "greater than or equal to 1"),
    ({"kind": "language", "language": "French"}, "language", "should match pattern"),
    ({"kind": "json_assert"}, "assert", "Field required"),
    ({"kind": "json_assert", "assert": []}, "assert", "at least 1 item"),
    (
        {"kind": "json_assert", "assert": ["a == 1", "a =="]},
        "assert",
        "assert[1]: the expression ends",
    ),
    ({"kind": "json_assert", "assert": ["__import__('os')"]}, "assert", "unexpected '('"),
    ({"kind": "python"}, "", "give object or entry_point"),
    ({"kind": "python", "object": "a:B", "entry_point": "b"}, "", "give object or entry_point"),
    ({"kind": "python", "object": "no_colon"}, "object", "should match pattern"),
    ({"kind": "webhook"}, "url", "Field required"),
    ({"kind": "webhook", "url": "ftp://x/"}, "url", "should match pattern"),
    ({"kind": "webhook", "url": "http://x/", "timeout": 0}, "timeout", "greater than 0"),
    ({"kind": "webhook", "url": "http://x/", "on_error": "maybe"}, "on_error", "'pass' or"),
    (
        {"kind": "webhook", "url": "http://x/", "circuit": {"failures": 0}},
        "circuit.failures",
        "greater than or equal to 1",
    ),
    ({"kind": "judge", "rubric": "r"}, "tier", "Field required"),
    ({"kind": "judge", "tier": "standard"}, "rubric", "Field required"),
    (
        {"kind": "judge", "tier": "t", "rubric": "r", "sample": 2},
        "sample",
        "less than or equal to 1",
    ),
    ({"kind": "judge", "tier": "t", "rubric": "r", "mode": "veto"}, "mode", "'gate' or 'score'"),
    ({"kind": "length", "max_chars": 3, "colour": 1}, "colour", "Extra inputs"),
    ({"kind": "length", "max_chars": 3, "stream": "later"}, "stream", "'hold' or 'report'"),
]


@pytest.mark.parametrize(("raw", "where", "message"), INVALID)
def test_each_kind_refuses_what_it_cannot_use(
    raw: dict[str, Any], where: str, message: str
) -> None:
    with pytest.raises(ValidationError) as e:
        SPECS.validate_python(raw)
    (error,) = e.value.errors()
    assert ".".join(map(str, error["loc"][1:])) == where  # loc[0] is the kind
    assert message in error["msg"]


def test_an_unknown_kind_is_refused() -> None:
    with pytest.raises(ValidationError, match="'regex', 'contains', 'length'"):
        SPECS.validate_python({"kind": "sql"})


def test_a_judge_names_a_tier_of_the_rules() -> None:
    spec = JudgeSpec(kind="judge", tier="premium", rubric="r")
    assert spec.problems("grader", ["highspeed", "standard"]) == [
        "checks.grader.tier: unknown tier 'premium' (highspeed, standard)"
    ]
    assert spec.problems("grader", ["premium"]) == []


def test_every_kind_builds_under_its_rules_name() -> None:
    raw: dict[str, dict[str, Any]] = {
        "rx": {"kind": "regex", "must_not_match": "x"},
        "cc": {"kind": "contains", "must_contain": ["y"]},
        "len": {"kind": "length", "max_chars": 9},
        "lang": {"kind": "language", "stream": "report"},
        "js": {"kind": "json_assert", "assert": ["a == 1"]},
        "py": {"kind": "python", "object": "tests.test_user_checks:Polite"},
        "hook": {"kind": "webhook", "url": "http://hooks.internal/v"},
        "judge": {"kind": "judge", "tier": "standard", "rubric": "r", "mode": "gate"},
    }
    checks = build_user_checks({name: SPECS.validate_python(r) for name, r in raw.items()})
    assert {name: c.name for name, c in checks.items()} == {name: name for name in raw}
    described = {name: c.abilities.describe() for name, c in checks.items()}
    assert described == {
        "rx": "partial (delta), cheap",
        "cc": "whole answer, holds streams, cheap",
        "len": "partial (text), cheap",
        "lang": "whole answer, cheap, reads the request",
        "js": "whole answer, holds streams, cheap",
        "py": "partial (delta), cheap",
        "hook": "whole answer, holds streams, remote, reads the request",
        "judge": "whole answer, holds streams, remote, reads the request",
    }
    assert checks["lang"].abilities.report_stream


# --- python plugins ---------------------------------------------------------------------------


class Polite(BaseCheck):
    """A plugin built as ``Class(**options)``."""

    abilities = Abilities(partial=True, scan=Scan.DELTA, overlap=8)

    def __init__(self, strict: bool = False) -> None:
        self.strict = strict

    def run(self, out: Output, req: RequestFacts) -> CheckResult:
        return CheckResult("dumb" not in out.text, self.name, "rude")


class Worded(BaseCheck):
    """A plugin built by ``from_options(name, options)``."""

    def __init__(self, name: str, words: tuple[str, ...]) -> None:
        self.name, self.words = name, words

    @classmethod
    def from_options(cls, name: str, options: Mapping[str, Any]) -> Worded:
        return cls(name, tuple(options["words"]))

    def run(self, out: Output, req: RequestFacts) -> CheckResult:
        return CheckResult(not any(w in out.text for w in self.words), self.name)


class OnlyRun:
    """Not a check: it has a ``run`` and nothing else."""

    def run(self, out: Output, req: RequestFacts) -> CheckResult:  # pragma: no cover
        return CheckResult(True, "x")


class LooseAbilities(BaseCheck):
    """Every method, but its abilities are a dict."""

    def __init__(self) -> None:
        self.abilities = {"partial": True}  # type: ignore[assignment]


class Broken(BaseCheck):
    def __init__(self) -> None:
        raise RuntimeError("no config file")


def _plugin(name: str = "mine", **kw: Any) -> BaseCheck:
    check = load_plugin(name, PythonSpec(kind="python", **kw))
    assert isinstance(check, BaseCheck)
    return check


def test_a_plugin_is_built_from_its_options_under_the_rules_name() -> None:
    polite = _plugin(object="tests.test_user_checks:Polite", options={"strict": True})
    assert isinstance(polite, Polite) and polite.strict and polite.name == "mine"
    assert polite.run(_out("dumb"), FACTS) == CheckResult(False, "mine", "rude")
    worded = _plugin(object="tests.test_user_checks:Worded", options={"words": ["x"]})
    assert isinstance(worded, Worded) and worded.words == ("x",) and worded.name == "mine"
    shouting = _plugin("shouting", object="tests.example_check:ShoutingCheck")
    assert shouting.abilities.partial and shouting.abilities.opt_in


PLUGIN_ERRORS = [
    ({"object": "tests.no_such_module:X"}, "cannot import 'tests.no_such_module'"),
    ({"object": "tests.example_check:Nope"}, "'tests.example_check' has no 'Nope'"),
    (
        {"object": "tests.test_user_checks:OnlyRun"},
        "OnlyRun is not a check: no run_partial, good_prefix, guard, verdict",
    ),
    (
        {"object": "tests.test_user_checks:LooseAbilities"},
        "LooseAbilities.abilities is not an Abilities",
    ),
    (
        {"object": "tests.example_check:ShoutingCheck", "options": {"loud": True}},
        "the plugin failed to build: TypeError: ",
    ),
    (
        {"object": "tests.test_user_checks:Polite", "options": {"strict": True, "x": 1}},
        "unexpected keyword argument 'x'",
    ),
    (
        {"object": "tests.test_user_checks:Broken"},
        "the plugin failed to build: RuntimeError: no config file",
    ),
    ({"object": "tests.test_user_checks:Worded"}, "failed to build: KeyError: 'words'"),
    ({"object": "tests.example_check:ShoutingCheck"}, "ShoutingCheck's name is not 'mine'"),
    (
        {"entry_point": "no-such-check"},
        "no entry point 'no-such-check' in group 'llm_gateway.checks'",
    ),
]


@pytest.mark.parametrize(("spec", "message"), PLUGIN_ERRORS)
def test_a_plugin_that_cannot_be_used_says_why(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as e:
        _plugin(**spec)
    assert message in str(e.value)
    (problem,) = PythonSpec(kind="python", **spec).problems("mine", ())
    assert problem.startswith("checks.mine: ") and message in problem


# --- remote checks ----------------------------------------------------------------------------


class Services:
    """The gateway's I/O in memory (:class:`gateway.checks.remote.CheckServices`): answers
    ``answer`` to a post and ``reply`` to an ask (raising them when they are exceptions),
    after waiting for ``gate`` while ``hold``; records every call and how many run at once."""

    def __init__(self, answer: bytes | Exception = b'{"pass": true}', reply: Any = "PASS"):
        self.answer, self.reply = answer, reply
        self.hold = False
        self.gate = asyncio.Event()
        self.changed = asyncio.Event()
        self.posts: list[tuple[str, dict[str, Any], dict[str, str], float]] = []
        self.asks: list[tuple[str, list[dict[str, Any]], int, float]] = []
        self.in_flight = self.peak = 0

    async def _enter(self) -> None:
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        self.changed.set()
        try:
            if self.hold:
                await self.gate.wait()
        finally:
            self.in_flight -= 1

    async def post(
        self, url: str, body: bytes, headers: Mapping[str, str], timeout: float
    ) -> bytes:
        self.posts.append((url, orjson.loads(body), dict(headers), timeout))
        await self._enter()
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer

    async def ask(
        self, tier: str, messages: list[dict[str, Any]], max_tokens: int, timeout: float
    ) -> str:
        self.asks.append((tier, messages, max_tokens, timeout))
        await self._enter()
        if isinstance(self.reply, Exception):
            raise self.reply
        return str(self.reply)

    async def running(self, n: int) -> None:
        """Until ``n`` calls are in flight."""
        async with asyncio.timeout(5):
            while self.in_flight < n:
                self.changed.clear()
                await self.changed.wait()


def aio(f: Callable[[], Coroutine[Any, Any, None]]) -> Callable[[], None]:
    """An async test on a fresh loop (a check's semaphore belongs to the loop it runs in)."""

    def run() -> None:
        asyncio.run(f())

    run.__name__ = f.__name__
    return run


def _ctx(seconds: float = 10.0) -> CheckContext:
    return CheckContext({"model": "auto"}, "default", time.monotonic() + seconds)


def _hook(io: Services | None, **kw: Any) -> WebhookCheck:
    spec = WebhookSpec(kind="webhook", url="http://hooks.internal/verify", **kw)
    return WebhookCheck("house", spec, io)


def _judge(io: Services, **kw: Any) -> JudgeCheck:
    spec = JudgeSpec(kind="judge", tier="standard", rubric="Be kind.", **kw)
    return JudgeCheck("grader", spec, io)


async def _verdict(
    check: WebhookCheck | JudgeCheck, ctx: CheckContext | None = None
) -> CheckResult:
    out = Output("the answer", "stop", [])
    return await check.verdict(out, _facts("the question"), ctx or _ctx())


WEBHOOK = [
    (b'{"pass": true}', "fail", True, ""),
    (b'{"pass": false, "reason": "mentions a rival"}', "fail", False, "mentions a rival"),
    (b'{"pass": false}', "fail", False, "rejected"),
    (b'{"pass": "no"}', "fail", False, 'has no boolean "pass"'),
    (b"not json", "fail", False, 'answer is not JSON"); on_error: fail'),
    (b"not json", "pass", True, ""),
    (OSError("connection refused"), "fail", False, "no verdict ('connection refused')"),
    (OSError("connection refused"), "pass", True, ""),
    (RuntimeError("bug"), "fail", False, "no verdict (RuntimeError); on_error: fail"),
]


@pytest.mark.parametrize(("answer", "on_error", "ok", "reason"), WEBHOOK)
def test_webhook_verdicts(answer: bytes | Exception, on_error: str, ok: bool, reason: str) -> None:
    async def go() -> None:
        io = Services(answer)
        result = await _verdict(_hook(io, on_error=on_error))
        assert (result.ok, result.check) == (ok, "house")
        assert reason in result.reason
        url, body, headers, timeout = io.posts[0]
        assert url == "http://hooks.internal/verify" and timeout <= 0.5
        assert body == {
            "check": "house",
            "rule": "default",
            "partial": False,
            "text": "the answer",
            "finish_reason": "stop",
            "tool_calls": [],
            "request": {"model": "auto"},
        }
        assert headers["content-type"] == "application/json"

    asyncio.run(go())


@aio
async def test_a_webhook_without_io_or_time_is_never_called() -> None:
    assert (await _verdict(_hook(None, on_error="fail"))).reason == (
        "no verdict (no I/O); on_error: fail"
    )
    io = Services()
    late = await _verdict(_hook(io, on_error="fail"), _ctx(-1))
    assert late.reason == "no verdict (no time left); on_error: fail" and not io.posts
    assert (await _verdict(_hook(io), _ctx(-1))).ok  # on_error: pass


@pytest.mark.parametrize(
    ("timeout", "left"), [(5.0, 0.1), (0.1, 10.0)], ids=["request-deadline", "own-timeout"]
)
def test_a_hanging_webhook_costs_at_most_its_budget(timeout: float, left: float) -> None:
    async def go() -> None:
        io = Services()
        io.hold = True  # never released
        t0 = time.monotonic()
        result = await _verdict(_hook(io, timeout=timeout, on_error="fail"), _ctx(left))
        elapsed = time.monotonic() - t0
        assert result.reason == "no verdict (timeout); on_error: fail"
        assert io.posts[0][3] <= 0.1  # the budget it was given
        assert 0.09 <= elapsed < 2.0  # a budget of 0.1 s, not 5 or 10

    asyncio.run(go())


@aio
async def test_the_concurrency_cap_holds_calls_beyond_it() -> None:
    io = Services()
    io.hold = True
    check = _hook(io, max_concurrency=2, timeout=30)
    tasks = [asyncio.create_task(_verdict(check, _ctx(60))) for _ in range(5)]
    await io.running(2)
    for _ in range(50):  # let every task run as far as it can
        await asyncio.sleep(0)
    assert (io.in_flight, len(io.posts)) == (2, 2)
    io.gate.set()
    results = await asyncio.gather(*tasks)
    assert all(r.ok for r in results)
    assert (io.peak, len(io.posts)) == (2, 5)


COOLDOWN = 0.2


async def _open(io: Services, check: WebhookCheck) -> None:
    """Three failures in a row open the circuit: the next call costs nothing."""
    io.answer = OSError("down")
    for _ in range(3):
        assert not (await _verdict(check)).ok
    assert check.circuit_open
    result = await _verdict(check)
    assert result.reason == "no verdict (circuit open); on_error: fail"
    assert len(io.posts) == 3


async def _cooled() -> None:
    await asyncio.sleep(COOLDOWN + 0.02)  # the circuit's own clock: nothing else to wait on


def _flaky(io: Services) -> WebhookCheck:
    return _hook(io, on_error="fail", circuit={"failures": 3, "cooldown": COOLDOWN})


@aio
async def test_the_circuit_opens_then_one_probe_closes_it() -> None:
    io = Services()
    check = _flaky(io)
    await _open(io, check)
    await _cooled()
    io.answer, io.hold = b'{"pass": true}', True
    probe = asyncio.create_task(_verdict(check))
    await io.running(1)
    during = await _verdict(check)  # one probe at a time: the others are answered at once
    assert during.reason == "no verdict (circuit open); on_error: fail"
    assert len(io.posts) == 4
    io.gate.set()
    assert (await probe).ok
    assert not check.circuit_open
    assert (await _verdict(check)).ok and len(io.posts) == 5


@aio
async def test_a_failed_probe_opens_the_circuit_again_at_once() -> None:
    io = Services()
    check = _flaky(io)
    await _open(io, check)
    await _cooled()
    assert (await _verdict(check)).reason == "no verdict ('down'); on_error: fail"
    assert check.circuit_open and len(io.posts) == 4  # one failure, not three
    assert (await _verdict(check)).reason.startswith("no verdict (circuit open)")
    assert len(io.posts) == 4


@aio
async def test_a_cancelled_probe_leaves_the_next_call_to_probe() -> None:
    io = Services()
    check = _flaky(io)
    await _open(io, check)
    await _cooled()
    io.answer, io.hold = b'{"pass": true}', True
    probe = asyncio.create_task(_verdict(check))
    await io.running(1)
    probe.cancel()  # the client went away
    with pytest.raises(asyncio.CancelledError):
        await probe
    io.hold = False
    assert (await _verdict(check)).ok and len(io.posts) == 5
    assert not check.circuit_open


@aio
async def test_a_judge_with_sample_zero_never_asks() -> None:
    io = Services(reply="FAIL: rude")
    check = _judge(io, sample=0.0, mode="gate", on_error="fail")
    results = [await _verdict(check) for _ in range(50)]
    assert all(r.ok for r in results) and not io.asks
    assert not (await _verdict(_judge(io, sample=1.0, mode="gate"))).ok
    assert len(io.asks) == 1


JUDGE = [
    ("PASS", True, ""),
    ("pass: it is kind", True, ""),
    ("**PASS** - kind enough", True, ""),
    ("# PASS", True, ""),
    ("FAIL: the answer is rude", False, "judge: the answer is rude"),
    ("**FAIL**: rude", False, "judge: rude"),
    ("FAIL", False, "judge: FAIL"),
    ("fail:", False, "judge: FAIL"),
    ("I cannot grade this.", False, "answered neither PASS nor FAIL: 'I cannot"),
    ("", False, "neither PASS nor FAIL"),
    (OSError("tier down"), False, "no verdict ('tier down'); on_error: fail"),
]


@pytest.mark.parametrize(("reply", "ok", "reason"), JUDGE)
def test_judge_verdicts(reply: Any, ok: bool, reason: str) -> None:
    async def go() -> None:
        io = Services(reply=reply)
        result = await _verdict(_judge(io, mode="gate", on_error="fail", max_tokens=32))
        assert result.ok is ok
        assert reason in result.reason
        tier, messages, max_tokens, timeout = io.asks[0]
        assert (tier, max_tokens) == ("standard", 32) and timeout <= 5.0
        prompt = messages[-1]["content"]
        assert "Be kind." in prompt and "the question" in prompt and "the answer" in prompt

    asyncio.run(go())


def test_a_scoring_judge_reports_a_gating_one_holds() -> None:
    io = Services()
    score = _judge(io).abilities
    assert score.report_only and not score.hold_stream and score.cost is Cost.REMOTE
    gate = _judge(io, mode="gate").abilities
    assert gate.hold_stream and not gate.report_only
    assert _judge(io, mode="gate", stream="report").abilities.report_stream
    assert _hook(io, stream="report").abilities.report_stream
    assert _judge(io).run(_out("x"), FACTS).ok  # never asked synchronously
