"""Judged rollouts, in process: the statistics (against hand-computed values and a brute
force), the step logic (tables), the analysis's validation, the weights' edit of a rules
text, the counts' fields, and how often a healthy canary is rolled back by chance."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest
import yaml

from gateway.rollout.counts import Tally, arm_stats, bucket_of, bucket_width
from gateway.rollout.judge import ArmStats, compare, judge, look_at, look_level
from gateway.rollout.stats import (
    BIN_EDGES,
    BINS,
    fisher_test,
    latency_bin,
    mann_whitney,
    normal_tail,
    quantile,
    z_test,
)
from gateway.rollout.weights import StepRefused, set_weights
from gateway.routing.router import pick_arm
from gateway.rules.analysis import Analysis
from gateway.rules.schema import RulesError, parse_rules
from gateway.telemetry.record import AttemptRecord, RequestRecord
from tests.conftest import rules_for_tests

# -- statistics ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("x_b", "n_b", "x_c", "n_c", "p"),
    [
        (10, 200, 30, 200, normal_tail(0.10 / 0.03)),  # pooled 0.1: se 0.03, z 3.33
        (10, 200, 10, 200, 0.5),  # the same rate: no evidence either way
        (30, 200, 10, 200, normal_tail(-0.10 / 0.03)),  # the canary better: p near 1
        (0, 100, 0, 100, 1.0),  # no events at all
        (100, 100, 100, 100, 1.0),  # nothing but events
        (0, 0, 5, 10, 1.0),  # an arm without requests
    ],
)
def test_z_test(x_b: int, n_b: int, x_c: int, n_c: int, p: float) -> None:
    assert z_test(x_b, n_b, x_c, n_c) == pytest.approx(p, rel=1e-9)


@pytest.mark.parametrize(
    ("x_b", "n_b", "x_c", "n_c", "p"),
    [
        (0, 5, 5, 5, 1 / 252),  # every event on the canary: C(10,5) = 252 ways
        (1, 4, 3, 4, 17 / 70),  # P(X >= 3): (C(4,3) C(4,1) + C(4,4) C(4,0)) / C(8,4)
        (3, 4, 1, 4, 1 - 1 / 70),  # P(X >= 1) = 1 - P(X = 0)
        (0, 50, 0, 50, 1.0),
        (5, 10, 0, 10, 1.0),
    ],
)
def test_fisher_exact(x_b: int, n_b: int, x_c: int, n_c: int, p: float) -> None:
    assert fisher_test(x_b, n_b, x_c, n_c) == pytest.approx(p, rel=1e-9)


def test_fisher_and_z_agree_on_large_samples() -> None:
    z, f = z_test(50, 1000, 80, 1000), fisher_test(50, 1000, 80, 1000)
    assert 0.001 < z < 0.01 and 0.001 < f < 0.02 and abs(math.log(z / f)) < 0.7


def _hist(values: list[float]) -> list[int]:
    h = [0] * BINS
    for v in values:
        h[latency_bin(v)] += 1
    return h


def _brute_u(base: list[int], can: list[int]) -> float:
    """U of the canary counted pair by pair over bin indexes (a tie counts half)."""
    return sum(1.0 if c > b else 0.5 if c == b else 0.0 for b in base for c in can)


def test_mann_whitney_matches_a_pairwise_count() -> None:
    rng = random.Random(3)
    base = [rng.lognormvariate(-3, 0.4) for _ in range(60)]
    can = [rng.lognormvariate(-2.6, 0.4) for _ in range(50)]
    hb, hc = _hist(base), _hist(can)
    u = _brute_u([latency_bin(v) for v in base], [latency_bin(v) for v in can])
    n_b, n_c = 60, 50
    n = n_b + n_c
    ties = sum((b + c) ** 3 - (b + c) for b, c in zip(hb, hc, strict=True))
    var = n_b * n_c / 12 * ((n + 1) - ties / (n * (n - 1)))
    expected = normal_tail((u - n_b * n_c / 2 - 0.5) / math.sqrt(var))
    assert mann_whitney(hb, hc) == pytest.approx(expected, rel=1e-9)
    assert mann_whitney(hb, hc) < 0.01  # half as slow again, on 50 samples: seen


@pytest.mark.parametrize(
    ("base", "can", "low", "high"),
    [
        ([0.1] * 50, [0.1] * 50, 0.99, 1.0),  # one bin: nothing to tell apart
        ([0.05, 0.1, 0.2] * 30, [0.05, 0.1, 0.2] * 30, 0.45, 0.55),  # alike: about a half
        ([0.1] * 40, [0.3] * 40, 0.0, 1e-6),  # the canary slower throughout
        ([0.3] * 40, [0.1] * 40, 1 - 1e-6, 1.0),  # the canary faster: no evidence
        ([], [0.1] * 10, 1.0, 1.0),
    ],
)
def test_mann_whitney_directions(
    base: list[float], can: list[float], low: float, high: float
) -> None:
    assert low <= mann_whitney(_hist(base), _hist(can)) <= high


@pytest.mark.parametrize("seconds", [0.0004, 0.001, 0.0123, 0.25, 1.7, 42.0, 5000.0])
def test_latency_bins_hold_their_values(seconds: float) -> None:
    i = latency_bin(seconds)
    low = 0.0 if i == 0 else BIN_EDGES[i - 1]
    high = BIN_EDGES[i] if i < len(BIN_EDGES) else math.inf
    assert low <= seconds < high or (i == BINS - 1 and seconds >= low)


def test_quantiles_of_a_histogram_are_within_a_bin() -> None:
    values = [0.010 + 0.001 * i for i in range(100)]  # 10 .. 109 ms
    h = _hist(values)
    for q, exact in ((0.5, 0.0595), (0.99, 0.108)):
        got = quantile(h, q)
        assert got is not None and abs(got / exact - 1) < 0.1  # a bin is 9 % wide
    assert quantile([0] * BINS, 0.5) is None


# -- the step logic -----------------------------------------------------------------------

A = Analysis(baseline="stable", canary="next", steps=(5, 25, 50, 100), interval=60, min_samples=200)


def _arm(n: int, fb: int = 0, cf: int = 0, latency: float = 0.1) -> ArmStats:
    return ArmStats(n, fb, cf, tuple(_hist([latency] * n)))


@pytest.mark.parametrize(
    ("share", "base", "can", "held", "action", "to"),
    [
        (0, _arm(500), _arm(0), 999, "rolled_back", None),
        (100, _arm(0), _arm(500), 999, "complete", None),
        (5, _arm(3800, 190), _arm(150, 8), 999, "wait", None),  # the canary under min_samples
        (5, _arm(3800, 190), _arm(200, 10), 30, "wait", None),  # no worse, step not held
        (5, _arm(3800, 190), _arm(200, 10), 60, "promote", 25),
        (25, _arm(600, 30), _arm(200, 11), 61, "promote", 50),
        (50, _arm(400, 20), _arm(400, 20), 60, "promote", 100),
        (5, _arm(4000, 200), _arm(200, 30), 1, "rollback", 0),  # 3x the fallbacks: at once
        (50, _arm(400, 20, 20), _arm(400, 60, 60), 1, "rollback", 0),
        (5, _arm(4000, 200), _arm(200, 14), 999, "promote", 25),  # x1.4: within the margin
        (25, _arm(800, 0), _arm(250, 9), 1, "rollback", 0),  # 9 of 250 against none of 800
        (25, _arm(800), _arm(250, latency=0.2), 1, "rollback", 0),  # twice as slow
        (25, _arm(800), _arm(250, latency=0.11), 999, "promote", 50),  # 10 % slower: within
        (12, _arm(800), _arm(250), 999, "promote", 25),  # between steps: the next one up
    ],
)
def test_judge(
    share: float, base: ArmStats, can: ArmStats, held: float, action: str, to: float | None
) -> None:
    v = judge(A, share, base, can, held)
    assert (v.action, v.to) == (action, to), v.reason
    if action == "rollback":
        assert "worse" in v.reason and any(c.worse for c in v.comparisons)


def test_a_metric_set_to_null_is_not_compared() -> None:
    a = A.model_copy(update={"max_fallback_ratio": None, "max_check_failure_ratio": None})
    assert a.compared() == ("latency_p99",)
    v = judge(a, 5, _arm(4000, 200), _arm(200, 60), 1)
    assert v.action == "wait" and [c.metric for c in v.comparisons] == ["latency_p99"]


def test_alpha_is_spent_over_the_looks_and_shared_by_the_metrics() -> None:
    assert [look_level(A, k) for k in range(3)] == pytest.approx([0.05 / 6, 0.05 / 12, 0.05 / 24])
    assert [look_at(A, k) for k in range(3)] == [200, 400, 800]
    comps = compare(A, _arm(400, 20), _arm(400, 20), look_level(A, 1))
    assert [c.alpha for c in comps] == [pytest.approx(0.05 / 12)] * 3
    # between looks a canary that seems worse waits for its next look: never promoted
    v = judge(A, 5, _arm(4000, 200), _arm(300, 30), 999, looks=1)
    assert (v.action, v.looks) == ("wait", 1) and "look 2, at 400" in v.reason
    v = judge(A, 5, _arm(4000, 200), _arm(400, 40), 999, looks=1)
    assert (v.action, v.looks) == ("rollback", 2)


@pytest.mark.parametrize(("test", "most"), [("two-proportion-z", 30), ("fisher-exact", 17)])
def test_a_healthy_canary_is_seldom_rolled_back_by_chance(test: str, most: int) -> None:
    """1,000 steps of a canary exactly as good as its baseline (5 % fallbacks), judged after
    every 20 requests of the canary (up to 800), as the lease holder judges counts as they
    arrive. The fallback metric's share of alpha is 0.05 / 3: 17 in 1,000 at most, in
    theory; the z-test's normal tail is a little generous with 5 events in 100."""
    rng = random.Random(7)
    a = Analysis.model_validate(
        {
            "baseline": "b",
            "canary": "c",
            "steps": (10, 50, 100),
            "interval": 1,
            "min_samples": 100,
            "test": test,
        }
    )
    rolled = 0
    for _ in range(1000):
        nb = fb = nc = fc = looks = 0
        for _tick in range(40):
            nc += 20
            fc += sum(rng.random() < 0.05 for _ in range(20))
            nb += 180
            fb += sum(rng.random() < 0.05 for _ in range(180))
            v = judge(a, 10, ArmStats(nb, fb), ArmStats(nc, fc), 0, looks)
            looks = v.looks
            if v.action == "rollback":
                rolled += 1
                break
    print(f"\n{test}: a healthy canary rolled back by chance in {rolled} of 1000 steps")
    assert rolled <= most


# -- the analysis's validation ------------------------------------------------------------

SPLIT = [
    {"tier": "highspeed", "weight": 95, "name": "stable"},
    {"tier": "standard", "weight": 5, "name": "next"},
]


def _rules(split: Any = SPLIT, **analysis: Any) -> str:
    data = rules_for_tests()
    data["default"]["split"] = split
    data["default"]["analysis"] = {
        "baseline": "stable",
        "canary": "next",
        "steps": [5, 25, 100],
        **analysis,
    }
    return yaml.safe_dump(data)


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"canary": "nope"}, "default.analysis.canary: no arm 'nope' (arms: stable, next)"),
        ({"baseline": "next"}, "default.analysis.canary: the canary is the baseline"),
        ({"steps": [25, 5, 100]}, "default.analysis.steps: Value error, the steps must increase"),
        ({"steps": [5, 50]}, "default.analysis.steps: Value error, the last step must be 100"),
        ({"steps": [0, 100]}, "default.analysis.steps: Value error, every step is a share"),
        ({"min_samples": 3}, "default.analysis.min_samples"),
        ({"alpha": 0.5}, "default.analysis.alpha"),
        ({"max_fallback_ratio": 0.9}, "default.analysis.max_fallback_ratio"),
        ({"test": "t-test"}, "default.analysis.test"),
        ({"interval": 0}, "default.analysis.interval"),
        ({"unknown": 1}, "default.analysis.unknown: Extra inputs are not permitted"),
    ],
)
def test_bad_analyses_are_refused_with_their_paths(change: dict[str, Any], error: str) -> None:
    with pytest.raises(RulesError) as e:
        parse_rules(_rules(**change))
    assert any(m.startswith(error) for m in e.value.errors), e.value.errors


def test_an_analysis_needs_a_split_of_two_arms() -> None:
    three = [*SPLIT, {"tier": "standard", "weight": 1, "name": "third"}]
    with pytest.raises(RulesError) as e:
        parse_rules(_rules(three))
    assert "default.split: an analysed split has two arms, not 3" in e.value.errors
    data = yaml.safe_load(_rules())
    del data["default"]["split"]
    with pytest.raises(RulesError) as e:
        parse_rules(yaml.safe_dump(data))
    assert e.value.errors == ["default.analysis: needs a split of two arms (baseline and canary)"]


def test_a_rolled_back_split_is_valid_and_never_picks_the_empty_arm() -> None:
    split = [{**SPLIT[0], "weight": 100}, {**SPLIT[1], "weight": 0}]
    rules = parse_rules(_rules(split))
    assert rules.default.analysis is not None
    from gateway.request.model import parse_chat
    from gateway.routing.classify import Classifier
    from gateway.tenancy.tenants import OPEN

    cls = Classifier(rules)
    for i in range(300):
        body = f'{{"model": "auto", "messages": [{{"role": "user", "content": "q{i}"}}]}}'
        c = cls.classify(parse_chat(body.encode()), {})
        assert pick_arm(rules.default, "default", c, OPEN)[1] == "stable"
    with pytest.raises(RulesError) as e:
        parse_rules(_rules([{**a, "weight": 0} for a in SPLIT]))
    assert "default.split: every arm's weight is 0 (one needs a share)" in e.value.errors


# -- a step as an edit of the text --------------------------------------------------------

TEXT = """# the operator's comment stays
default:
  tier: highspeed
  split:
    - {tier: highspeed, weight: 95, name: stable}   # and this one
    - tier: standard
      weight: 5
      name: next
rules:
  - name: a
    tier: highspeed
    split: &shared
      - {tier: highspeed, weight: 1}
      - {tier: standard, weight: 1}
  - name: b
    tier: highspeed
    split: *shared
"""


def test_a_step_changes_the_weights_and_nothing_else() -> None:
    out = set_weights(TEXT, "default", {"stable": 75, "next": 25})
    assert out == TEXT.replace("weight: 95", "weight: 75").replace("weight: 5\n", "weight: 25\n")
    half = set_weights(TEXT, "default", {"stable": 62.5, "next": 37.5})
    assert "weight: 62.5, name: stable}   # and this one" in half


@pytest.mark.parametrize(
    ("rule", "weights", "why"),
    [
        ("a", {"highspeed": 0, "standard": 100}, "would change more than them"),  # an anchor
        ("nope", {"stable": 1}, "no rule 'nope'"),
        ("default", {"stable": 50, "other": 50}, "lacks an arm"),
    ],
)
def test_a_step_that_would_change_more_is_refused(
    rule: str, weights: dict[str, float], why: str
) -> None:
    with pytest.raises(StepRefused, match=why):
        set_weights(TEXT, rule, weights)


# -- counts -------------------------------------------------------------------------------


def _rec(arm: str, latency: float = 0.05, **kw: Any) -> RequestRecord:
    fields: dict[str, Any] = {"status": 200, "rule": "default", "arm": arm, **kw}
    return RequestRecord(request_id="r", kind="chat", latency_s=latency, overhead_s=0, **fields)


def test_counts_add_up_per_arm_from_the_step_on() -> None:
    t = Tally()
    w = bucket_width(A)
    assert w == 6.0
    old, now = bucket_of(100.0, w), bucket_of(130.0, w)
    t.add("default", "next", old, _rec("next"))
    t.add("default", "next", now, _rec("next", failures=(AttemptRecord("standard", "http_503"),)))
    check = AttemptRecord("standard", "check_repetition", check="repetition")
    t.add("default", "next", now, _rec("next", failures=(check,)))
    t.add("default", "stable", now, _rec("stable", checks_failed="repetition"))
    t.add("default", "stable", now, _rec("stable", status=429))  # the client's limit: not counted
    t.add("default", "stable", now, _rec("stable", cache="hit/exact"))  # a hit: not the arm's
    fields = t.take()["default"]
    assert t.take() == {}

    def since(ms: int) -> dict[str, int]:  # as the store sums them
        out: dict[str, int] = {}
        for (bucket, name), n in fields.items():
            if bucket >= ms:
                out[name] = out.get(name, 0) + n
        return out

    arms = arm_stats(since(now))
    assert (arms["next"].requests, arms["next"].fallbacks, arms["next"].check_failures) == (2, 2, 1)
    assert (arms["stable"].requests, arms["stable"].fallbacks, arms["stable"].check_failures) == (
        1,
        0,
        1,
    )
    assert sum(arms["next"].latency) == 2
    assert arm_stats(since(old))["next"].requests == 3  # the older bucket, of an earlier step


def test_validate_and_explain_show_the_split_and_its_analysis() -> None:
    from gateway.rules.effective import describe_line, rules_settings

    s = rules_settings(parse_rules(_rules()))["default"]
    assert s["split"] == {"stable": "highspeed x95", "next": "standard x5"}
    assert s["analysis"] == (
        "next vs stable: 5 -> 25 -> 100 %, each held 60 s and 200 requests an arm; rolled "
        "back past fallbacks x1.5, check failures x1.5, p99 x1.3 (two-proportion-z, alpha 0.05)"
    )
    line = describe_line("default", s)
    assert line.endswith(
        f"; split stable highspeed x95, next standard x5; rollout judged: {s['analysis']}"
    )


def test_a_tenants_rule_cannot_carry_an_analysis() -> None:
    from pydantic import ValidationError

    from gateway.tenancy.tenants import Policy

    rule = yaml.safe_load(_rules())["default"]
    with pytest.raises(ValidationError, match="a tenant's rule cannot carry an analysis"):
        Policy.model_validate({"rules": [{**rule, "name": "mine"}]})
