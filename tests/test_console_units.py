"""The operator console's pure parts, table-driven: the live numbers from a metrics text
(percentiles, the window, the cache), the session cookie, the rules diff, the formats."""

from __future__ import annotations

import math

import pytest

from gateway.admin.live import (
    LiveWindow,
    Reading,
    Totals,
    quantile,
    read_totals,
    since,
    summary,
)
from gateway.admin.session import clean_name, csrf_token, issue, verify
from gateway.console.auth import safe_next
from gateway.console.diff import rules_diff
from gateway.console.records import shadow_summary
from gateway.console.render import FORMATS
from gateway.console.rules import Draft, explain_body

INF = math.inf


@pytest.mark.parametrize(
    ("q", "buckets", "want"),
    [
        (0.5, {}, None),
        (0.5, {0.1: 0, INF: 0}, None),
        # everything in the first bucket: interpolated from 0
        (0.5, {0.1: 4, 0.2: 4, INF: 4}, 0.05),
        (1.0, {0.1: 4, 0.2: 4, INF: 4}, 0.1),
        # half below 0.1, half in (0.1, 0.2]
        (0.5, {0.1: 2, 0.2: 4, INF: 4}, 0.1),
        (0.75, {0.1: 2, 0.2: 4, INF: 4}, 0.15),
        (0.99, {0.1: 2, 0.2: 4, INF: 4}, 0.198),
        # a rank past the last finite bound answers that bound
        (0.99, {0.1: 1, 0.2: 1, INF: 10}, 0.2),
        # empty buckets before the rank are skipped
        (0.5, {0.1: 0, 0.2: 0, 0.5: 2, INF: 2}, 0.35),
    ],
)
def test_quantile(q: float, buckets: dict[float, float], want: float | None) -> None:
    got = quantile(q, buckets)
    assert got == pytest.approx(want) if want is not None else got is None


METRICS = """\
# HELP gateway_requests_total requests answered
# TYPE gateway_requests_total counter
gateway_requests_total{tier="highspeed",task="chat",status="200",worker="0"} 3.0
gateway_requests_total{tier="highspeed",task="code",status="200",worker="1"} 5.0
gateway_requests_total{tier="standard",task="chat",status="200",worker="0"} 2.0
gateway_requests_total{tier="none",task="unknown",status="401",worker="0"} 1.0
# HELP gateway_errors_total errors
# TYPE gateway_errors_total counter
gateway_errors_total{tier="none",kind="invalid_api_key"} 1.0
# HELP gateway_fallbacks_total failed attempts by reason
# TYPE gateway_fallbacks_total counter
gateway_fallbacks_total{tier="highspeed",reason="timeout",task="chat"} 2.0
gateway_fallbacks_total{tier="highspeed",reason="timeout",task="code"} 1.0
gateway_fallbacks_total{tier="highspeed",reason="check_repetition",task="chat"} 1.0
# HELP gateway_check_failures_total by check
# TYPE gateway_check_failures_total counter
gateway_check_failures_total{check="repetition",tier="highspeed"} 1.0
# HELP gateway_request_latency_seconds end to end
# TYPE gateway_request_latency_seconds histogram
gateway_request_latency_seconds_bucket{tier="highspeed",task="chat",le="0.1"} 2.0
gateway_request_latency_seconds_bucket{tier="highspeed",task="chat",le="0.2"} 3.0
gateway_request_latency_seconds_bucket{tier="highspeed",task="chat",le="+Inf"} 3.0
gateway_request_latency_seconds_count{tier="highspeed",task="chat"} 3.0
gateway_request_latency_seconds_sum{tier="highspeed",task="chat"} 0.3
gateway_request_latency_seconds_bucket{tier="highspeed",task="code",le="0.1"} 0.0
gateway_request_latency_seconds_bucket{tier="highspeed",task="code",le="0.2"} 5.0
gateway_request_latency_seconds_bucket{tier="highspeed",task="code",le="+Inf"} 5.0
gateway_request_latency_seconds_count{tier="highspeed",task="code"} 5.0
gateway_request_latency_seconds_sum{tier="highspeed",task="code"} 0.8
# HELP gateway_queue_waiting requests waiting in the gateway for a slot
# TYPE gateway_queue_waiting gauge
gateway_queue_waiting{tier="highspeed"} 4
gateway_queue_waiting{tier="standard"} 0
"""


def test_read_totals_sums_over_the_labels_not_shown() -> None:
    t = read_totals(METRICS)
    assert t.total("requests", ("highspeed",)) == 8  # two tasks, two workers
    assert t.total("requests", ("none",)) == 1
    assert t.total("fallbacks", ("highspeed", "timeout")) == 3
    assert t.buckets["latency"]["highspeed"] == {0.1: 2, 0.2: 8, INF: 8}
    assert t.total("queue_waiting", ("highspeed",)) == 4
    assert "cache_hits" not in t.sums


def test_summary_since_start_then_over_the_window() -> None:
    w = LiveWindow(span_s=60, min_s=1)
    first = w.read(100.0, read_totals(METRICS))
    s = summary(first, ["highspeed", "standard"])
    assert s["over"] == "start" and s["window_s"] is None and s["cache"] is None
    hs = s["tiers"]["highspeed"]
    assert hs["rate"] is None and hs["requests"] == 8
    assert hs["latency_s"]["n"] == 8
    assert hs["latency_s"]["p50"] == pytest.approx(0.1 + 0.1 * (4 - 2) / 6)
    assert hs["fallbacks"] == {"timeout": 3, "check_repetition": 1}
    assert hs["check_failures"] == {"repetition": 1}
    assert list(s["tiers"]) == ["highspeed", "standard", "none"]  # configured ones first

    more = METRICS.replace(
        'tier="highspeed",task="chat",status="200",worker="0"} 3.0',
        'tier="highspeed",task="chat",status="200",worker="0"} 23.0',
    ).replace('le="+Inf"} 3.0', 'le="+Inf"} 23.0')
    later = w.read(110.0, read_totals(more))
    s = summary(later, ["highspeed", "standard"])
    hs = s["tiers"]["highspeed"]
    assert s["over"] == "window" and s["window_s"] == 10.0
    assert hs["rate"] == pytest.approx(2.0)  # 20 more in 10 s
    assert hs["latency_s"]["n"] == 20  # only the window's answers, all above 0.2 s
    assert hs["latency_s"]["p50"] == pytest.approx(0.2)
    assert hs["fallbacks_window"] == {}
    assert hs["queue_waiting"] == 4  # a level, not differenced


def test_a_tier_without_traffic_keeps_its_last_busy_window_and_says_how_old() -> None:
    """Traffic stops: the rate and percentiles stay those of the last minute that had
    requests (never a blank row of dashes and 0.00/s), and ``over`` says when it ended."""
    w = LiveWindow(span_s=60, min_s=1)
    w.read(100.0, read_totals(METRICS))
    more = METRICS.replace(
        'tier="highspeed",task="chat",status="200",worker="0"} 3.0',
        'tier="highspeed",task="chat",status="200",worker="0"} 23.0',
    ).replace('le="+Inf"} 3.0', 'le="+Inf"} 23.0')
    busy = summary(w.read(110.0, read_totals(more)), ["highspeed"])["tiers"]["highspeed"]
    assert busy["over"] == "the last 10 s" and busy["age_s"] == 0.0
    for t in (140.0, 180.0, 230.0, 300.0):  # polled every so often, no traffic
        idle = summary(w.read(t, read_totals(more)), ["highspeed"])["tiers"]["highspeed"]
    # the last window with requests is the one read at 140 (100 -> 140: the 20 answers)
    assert idle["rate"] == pytest.approx(0.5) and idle["latency_s"] == busy["latency_s"]
    assert idle["age_s"] == pytest.approx(160.0)
    assert idle["over"] == "40 s that ended 3 min ago (none since)"
    assert idle["requests"] == busy["requests"]  # counts since start-up, as ever


@pytest.mark.parametrize(
    ("times", "window"),
    [
        ((0.0, 0.5), None),  # too close: not compared
        ((0.0, 30.0), 30.0),
        ((0.0, 30.0, 45.0), 45.0),  # the oldest within the span
        ((0.0, 61.0), None),  # older than the span: forgotten
        ((0.0, 50.0, 70.0), 20.0),
    ],
)
def test_the_window_compares_with_the_oldest_reading_in_its_span(
    times: tuple[float, ...], window: float | None
) -> None:
    w = LiveWindow(span_s=60, min_s=1)
    readings = [w.read(t, Totals()) for t in times]
    assert readings[-1].window_s == window


def test_a_counter_that_went_down_was_reset() -> None:
    old = Totals({"requests": {("a",): 10.0}}, {"latency": {"a": {0.1: 10.0, INF: 10.0}}})
    new = Totals({"requests": {("a",): 3.0}}, {"latency": {"a": {0.1: 1.0, INF: 3.0}}})
    d = since(new, old)
    assert d.total("requests", ("a",)) == 3.0
    assert d.buckets["latency"]["a"] == {0.1: 1.0, INF: 3.0}


def test_the_cache_hit_rate_shows_only_where_the_gateway_counts_it() -> None:
    text = METRICS + (
        "# TYPE gateway_cache_hits_total counter\n"
        'gateway_cache_hits_total{match="exact"} 3.0\n'
        'gateway_cache_hits_total{match="semantic"} 1.0\n'
        "# TYPE gateway_cache_misses_total counter\n"
        "gateway_cache_misses_total 12.0\n"
    )
    s = summary(Reading(read_totals(text), None, None), ["highspeed"])
    assert s["cache"] == {"hits": 4, "misses": 12, "hit_rate": 0.25, "hit_rate_window": None}


def test_a_session_cookie_verifies_only_with_its_token_and_until_it_expires() -> None:
    token = "admin-token-0123456789abcdef"
    value = issue(token, now=1000.0, name="ann", ttl=60)
    assert token not in value
    s = verify(token, value, now=1001.0)
    assert s is not None and s.name == "ann" and s.expires == 1060
    assert verify(token, value, now=1060.0) is None  # expired
    assert verify("another-token-0123456789abc", value, now=1001.0) is None
    forged = value.replace(".YW5u.", ".Ym9i.")  # "bob" instead of "ann", same MAC
    assert verify(token, forged, now=1001.0) is None
    for junk in (None, "", "x", "a.b.c.d", "." * 600):
        assert verify(token, junk, now=1001.0) is None
    assert issue(token, 1000.0) != issue(token, 1000.0)  # a nonce each
    assert csrf_token(token, value) != csrf_token(token, issue(token, 1000.0))


@pytest.mark.parametrize(
    ("name", "clean"),
    [("ann", "ann"), ("  ann \n", "ann"), ("zoë", "zo"), ("a" * 100, "a" * 64), ("\x00x", "x")],
)
def test_names_are_fit_for_a_header(name: str, clean: str) -> None:
    assert clean_name(name) == clean


@pytest.mark.parametrize(
    ("path", "where"),
    [
        ("/console/rules", "/console/rules"),
        ("/console/tenants/ten_1?day=1", "/console/tenants/ten_1?day=1"),
        ("https://elsewhere.example/", "/console/tiers"),
        ("//elsewhere.example/console/", "/console/tiers"),
        ("/console//elsewhere.example", "/console/tiers"),
        ("/admin/tenants", "/console/tiers"),
        ("", "/console/tiers"),
        (None, "/console/tiers"),
    ],
)
def test_login_sends_back_to_console_paths_only(path: str | None, where: str) -> None:
    assert safe_next(path) == where


def test_the_diff_marks_changes_and_escapes_the_text() -> None:
    old = "a: 1\nb: <old>\nc: 3000\n"
    new = "a: 1\nb: <new> & more\nc: 3001\nd: 4\n"
    d = rules_diff(old, new, "version 1", "version <2>")
    assert (d.added, d.removed) == (3, 2)
    html = str(d.table)
    assert "&lt;new&gt;&nbsp;&amp;&nbsp;more" in html and "<new>" not in html
    assert "version &lt;2&gt;" in html
    assert 'class="diff_add"' in html and 'class="diff_chg"' in html
    same = rules_diff(old, old, "1", "1")
    assert same.same and "No Differences Found" in str(same.table)


@pytest.mark.parametrize(
    ("how", "value", "shown"),
    [
        ("num", None, "\u2014"),
        ("num", 3.0, "3"),
        ("num", 1234567.0, "1,234,567"),
        ("num", 2.5, "2.50"),
        ("ms", 0.0125, "12 ms"),
        ("ms", 12.5, "12.5 s"),
        ("rate", 1.234, "1.23/s"),
        ("pct", 0.256, "26 %"),
        ("counts", {"timeout": 1.0, "http_500": 3.0, "zero": 0}, "http_500 3 \u00b7 timeout 1"),
        ("counts", {}, "\u2014"),
        ("updown", True, "up"),
        ("updown", False, "down"),
        ("circuit", True, "open"),
        ("secs", 22.44, "22"),
    ],
)
def test_formats(how: str, value: object, shown: str) -> None:
    assert FORMATS[how](value) == shown


@pytest.mark.parametrize(
    ("request_text", "want"),
    [
        ('{"model": "m", "messages": []}', {"body": {"model": "m", "messages": []}}),
        (
            '{"path": "/v1/completions", "headers": {"x": "1"}, "body": {"prompt": "p"}}',
            {"path": "/v1/completions", "headers": {"x": "1"}, "body": {"prompt": "p"}},
        ),
    ],
)
def test_explain_takes_a_bare_body_or_a_request(request_text: str, want: dict[str, object]) -> None:
    assert explain_body(Draft("tiers: {}", request_text, "explain")) == {
        **want,
        "rules": "tiers: {}",
    }
    assert explain_body(Draft("  \n", request_text, "explain"))["rules"] is None


@pytest.mark.parametrize("bad", ["[1, 2]", "not json", '"text"'])
def test_explain_refuses_what_is_not_a_json_object(bad: str) -> None:
    with pytest.raises(ValueError):
        explain_body(Draft("", bad, "explain"))


def test_shadow_summary_groups_by_task_and_tiers() -> None:
    recs = [
        {
            "task": "chat",
            "tier": "highspeed",
            "against": "standard",
            "f1": 1.0,
            "agree": True,
            "exact": True,
        },
        {
            "task": "chat",
            "tier": "highspeed",
            "against": "standard",
            "f1": 0.2,
            "agree": False,
            "exact": False,
        },
        {
            "task": "code",
            "tier": "highspeed",
            "against": "standard",
            "f1": 0.8,
            "agree": True,
            "exact": False,
        },
    ]
    got = shadow_summary(recs)
    assert [(g["task"], g["n"]) for g in got] == [("chat", 2), ("code", 1)]
    assert got[0]["agree"] == 0.5 and got[0]["exact"] == 0.5
    assert got[0]["f1"] == pytest.approx(0.6)


# -- the examples the forms offer -----------------------------------------------------------


def test_every_policy_example_is_a_policy_the_running_rules_accept() -> None:
    from gateway.admin.policy import policy_problems
    from gateway.console.examples import POLICIES
    from gateway.rules.schema import load_rules
    from gateway.settings import REPO_RULES
    from gateway.tenancy.tenants import Policy

    rules = load_rules(REPO_RULES)
    for _, doc in POLICIES:
        assert policy_problems(Policy.model_validate(doc), rules) == [], doc


def test_every_request_example_explains_under_the_running_rules() -> None:
    from gateway.console.examples import FOR_FIELD, REQUESTS
    from gateway.routing.explain import explain
    from gateway.rules.schema import load_rules
    from gateway.settings import REPO_RULES

    rules = load_rules(REPO_RULES)
    for _, text, _ in FOR_FIELD["explain-request"]:
        body = explain_body(Draft("", text, "explain"))
        assert explain(rules, body)["tiers"], text
    assert len(FOR_FIELD["explain-request"]) == len(REQUESTS)
