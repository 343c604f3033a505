"""The cost of each declarative check kind users write, on a 1,000-token answer.

Issue 39's bar: a declarative user check costs under ``BAR_US`` microseconds on a 1,000-token
(about 4,000-character) answer, so a rule may name several without a visible cost. Each
kind below is built from its rules spec exactly as the gateway builds it
(:func:`gateway.checks.user.build_user_checks`) and run on an answer it passes (a passing
answer is read to its end: the usual and the longest path):

* ``regex`` ``must_match`` (the ticket id is at the very end) and ``must_not_match``
  (nowhere in the answer), ``ignore_case``;
* ``contains`` with 10 forbidden phrases (none there), on an ASCII answer and on one with
  a few accented letters (the NFKC and case-folding path);
* ``length`` (a maximum in tokens);
* ``language`` (CLD2 on the user's turn and on the answer's first and last 512 characters);
* ``json_assert`` with 3 assertions on a ~4 KB JSON answer (its parse included).

A sample is the mean time of ``INNER`` calls of ``check.run`` after a warm-up call, as the
CPU time of the measuring thread (``time.thread_time_ns``): the checks are pure computation,
and on a host shared with other work wall-clock samples also count the time the thread
waited for a core (the wall-clock median is kept beside it). The report gives the median
and p95 over ``repeats`` samples; a kind meets the bar when its p95 is under ``BAR_US``.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Final

import orjson
from pydantic import TypeAdapter

from evals import report as ru
from gateway.checks.base import Check, Output, RequestFacts
from gateway.checks.kinds import UserCheckSpec
from gateway.checks.user import build_user_checks

__all__ = ("BAR_US", "KindCost", "measure", "raw", "section")

BAR_US: Final = 50.0
INNER: Final = 20  # calls per sample: a call is microseconds, a timer read is ~0.1 of one
ANSWER_CHARS: Final = 4000  # 1,000 tokens at 4 characters a token

_SENTENCES = (
    "Your invoice for last month is available on the billing page of your account.",
    "Open Settings, choose Billing, then select the month you need and press Download.",
    "The file is a PDF that you can print or forward to your accounting team.",
    "If the amount looks wrong, compare it with the usage report for the same period.",
    "Charges for extra seats are prorated from the day the seats were added.",
    "Taxes are calculated from the billing address that was on file when the invoice was made.",
    "You can change that address at any time; the next invoice will use the new one.",
    "Refunds for unused time are issued to the original payment method within ten days.",
)
_ACCENTED = "Le café est prêt, naïve coöperation, Straße, résumé and façade are all spelled right."
QUESTION: Final = "How do I download and print my invoice for last month, and why did it change?"
PHRASES: Final = (
    "Acme Corp",
    "acme.com",
    "Globex",
    "Initech",
    "Umbrella Corporation",
    "Hooli",
    "Vandelay Industries",
    "guaranteed refund",
    "legal advice",
    "wire the money",
)


def _prose(chars: int, extra: str = "") -> str:
    """Sentences in turn until ``chars`` characters (``extra`` every fifth sentence)."""
    parts: list[str] = []
    n = 0
    while sum(len(p) + 1 for p in parts) < chars:
        parts.append(extra if extra and n % 5 == 4 else _SENTENCES[n % len(_SENTENCES)])
        n += 1
    return " ".join(parts)[:chars]


def _order_json(target_bytes: int) -> str:
    """An order with as many items as make about ``target_bytes`` of JSON."""
    items: list[dict[str, Any]] = []
    while True:
        i = len(items)
        items.append(
            {
                "sku": f"SKU-{i:05d}",
                "name": f"Replacement part number {i} for the model X{i % 7} line",
                "price": round(1.25 + (i * 37 % 100) / 4, 2),
                "qty": 1 + i % 3,
            }
        )
        doc = {"id": "ORD-20240501-0042", "currency": "EUR", "items": items, "total": 0.0}
        if len(orjson.dumps(doc)) >= target_bytes:
            doc["total"] = round(sum(it["price"] for it in items), 2)
            return orjson.dumps(doc).decode()


@dataclass(frozen=True)
class Case:
    """One kind, its rules spec and an answer it passes."""

    label: str
    spec: dict[str, Any]
    text: str
    asked: str = QUESTION


def cases() -> list[Case]:
    prose = _prose(ANSWER_CHARS - 20)
    ticket = prose + " Ticket TCK-482913."
    accented = _prose(ANSWER_CHARS, _ACCENTED)
    order = _order_json(ANSWER_CHARS)
    return [
        Case("regex must_match", {"kind": "regex", "must_match": r"TCK-[0-9]{6}"}, ticket),
        Case(
            "regex must_not_match",
            {"kind": "regex", "must_not_match": r"password\s*[:=]\s*\S+", "ignore_case": True},
            prose,
        ),
        Case("contains (10 phrases)", {"kind": "contains", "must_not_contain": PHRASES}, prose),
        Case(
            "contains (10 phrases), accented text",
            {"kind": "contains", "must_not_contain": PHRASES},
            accented,
        ),
        Case("length", {"kind": "length", "max_tokens": 1200}, prose),
        Case("language (CLD2)", {"kind": "language"}, prose),
        Case(
            "json_assert (3 assertions, ~4 KB JSON)",
            {
                "kind": "json_assert",
                "assert": [
                    "total == sum(items[*].price)",
                    "exists(id) and currency in ['EUR', 'USD']",
                    "len(items) >= 1 and min(items[*].qty) >= 1",
                ],
            },
            order,
        ),
    ]


@dataclass
class KindCost:
    """One case's cost samples (ns per call, each the mean of ``INNER`` calls): thread CPU
    time, and wall-clock time over the same calls."""

    case: Case
    chars: int
    samples_ns: list[float] = field(default_factory=list)
    wall_ns: list[float] = field(default_factory=list)

    def us(self, p: float) -> float | None:
        value = ru.percentile(self.samples_ns, p)
        return None if value is None else value / 1000

    def wall_us(self, p: float) -> float | None:
        value = ru.percentile(self.wall_ns, p)
        return None if value is None else value / 1000

    @property
    def meets_bar(self) -> bool:
        p95 = self.us(95)
        return p95 is not None and p95 < BAR_US


def _build(case: Case) -> Check:
    spec = TypeAdapter(UserCheckSpec).validate_python(case.spec)
    return build_user_checks({"timed": spec})["timed"]


def time_case(case: Case, repeats: int) -> KindCost:
    """``repeats`` samples of ``case``'s check on its answer, which it must pass."""
    check, out = _build(case), Output(case.text, "stop", [])
    facts = RequestFacts(False, False, None, {}, last_user=case.asked)
    first = check.run(out, facts)  # warm-up, and the answer is one the check passes
    if not first.ok:
        raise AssertionError(f"{case.label}: the timed answer fails: {first.reason}")
    run = check.run
    cost = KindCost(case, len(case.text))
    cpu, wall = time.thread_time_ns, time.perf_counter_ns
    for _ in range(repeats):
        start, start_wall = cpu(), wall()
        for _ in range(INNER):
            run(out, facts)
        cost.samples_ns.append((cpu() - start) / INNER)
        cost.wall_ns.append((wall() - start_wall) / INNER)
    return cost


def measure(repeats: int) -> list[KindCost]:
    return [time_case(case, repeats) for case in cases()]


HEADERS = (
    "kind",
    "answer chars",
    "median µs",
    "p95 µs",
    "wall median µs",
    f"under {BAR_US:.0f} µs (p95)",
)


def rows(costs: list[KindCost]) -> list[list[object]]:
    return [
        [
            c.case.label,
            f"{c.chars:,}",
            ru.fmt_num(c.us(50)),
            ru.fmt_num(c.us(95)),
            ru.fmt_num(c.wall_us(50)),
            "yes" if c.meets_bar else "**no**",
        ]
        for c in costs
    ]


def section(costs: list[KindCost], repeats: int) -> str:
    """The report's section: the bar, how it was measured, a row per kind."""
    missed = [c.case.label for c in costs if not c.meets_bar]
    verdict = (
        "Every kind meets it."
        if not missed
        else f"Over the bar: {', '.join(f'`{m}`' for m in missed)}."
    )
    return "\n\n".join(
        [
            "## Cost of the declarative kinds users write",
            f"Bar (issue 39): under {BAR_US:.0f} µs per check on a 1,000-token "
            f"(~{ANSWER_CHARS:,}-character) answer the check passes. µs of CPU time per "
            f"`run` call, median and p95 over {repeats} samples of {INNER} calls (the wall-clock "
            "median beside it); a kind meets the bar when its p95 is under it. "
            f"{verdict}",
            ru.md_table(HEADERS, rows(costs), "lrrrrc"),
        ]
    )


def raw(costs: list[KindCost]) -> dict[str, Any]:
    return {
        "bar_us": BAR_US,
        "inner_calls": INNER,
        "clock": "thread CPU time (time.thread_time_ns); wall_* is time.perf_counter_ns",
        "kinds": {
            c.case.label: {
                "spec": c.case.spec,
                "answer_chars": c.chars,
                "cost_us_p50": c.us(50),
                "cost_us_p95": c.us(95),
                "cost_us_mean": statistics.fmean(c.samples_ns) / 1000,
                "wall_us_p50": c.wall_us(50),
                "wall_us_p95": c.wall_us(95),
                "meets_bar": c.meets_bar,
                "cost_ns_samples": [round(v, 1) for v in c.samples_ns],
                "wall_ns_samples": [round(v, 1) for v in c.wall_ns],
            }
            for c in costs
        },
    }
