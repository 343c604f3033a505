"""The quality circuit through real gateway processes and fake engines (a rule with a
small window, so that it acts within a few requests):

* the fast tier starts failing every check: after at most ``min_answers`` requests that
  paid for its bad answer, the requests skip it (answered by the standard tier directly,
  ``x-gateway-route`` says why), a probe share still tries it; it shows in the metrics,
  ``/readyz``, the admin API and the audit log; once its answers pass again, the probes
  restore it and it carries its traffic again;
* two replicas on one Redis demote together (one decides, both apply at once), restore
  together, and apply an operator's pin and release together.

The window arithmetic and one circuit on a fake clock: tests/test_quality_window.py.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Proc, rules_for_tests, start_gateway
from tests.test_tenancy import ADMIN, call, chat, new_tenant, tenancy_env
from tests.waiting import until

pytestmark = pytest.mark.processes

QUALITY = {
    "window_s": 30,
    "min_answers": 4,
    "demote_at": 0.5,
    "probe_share": 0.3,
    "restore_probes": 3,
    "restore_at": 0.34,
}
LOOP = "[[highspeed: loop]] Tell me about the sea."
CLEAN = "Tell me about the sea."


def _rules() -> dict[str, Any]:
    data = rules_for_tests()
    data["quality"] = QUALITY
    return data


def _ask(base: str, key: str, text: str) -> tuple[str, str, str]:
    """(the answering tier, x-gateway-route, x-gateway-fallback or "")."""
    st, body, h = chat(base, key, text)
    assert st == 200, body
    return h["x-gateway-tier"], h["x-gateway-route"], h.get("x-gateway-fallback", "")


def _paid(route: str, fallback: str) -> bool:
    """The request waited for the fast tier's bad answer (its check failed, then standard)
    though the tier was not yet demoted (a probe pays on purpose)."""
    return fallback.startswith("highspeed:check_") and "probe highspeed" not in route


def _demoted_metric(base: str) -> str | None:
    with_metric = [
        line
        for line in _get(base, "/metrics").splitlines()
        if line.startswith('gateway_tier_demoted{tier="highspeed",rule="default"}')
    ]
    return with_metric[0].split()[-1] if with_metric else None


def _get(base: str, path: str) -> str:
    import urllib.request

    req = urllib.request.Request(base + path, headers={"Authorization": f"Bearer {ADMIN}"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return str(r.read().decode())


def _demotions(admin: str) -> list[dict[str, Any]]:
    st, body, _ = call(admin, "GET", "/admin/quality/demotions")
    assert st == 200, body
    data: list[dict[str, Any]] = body["data"]
    return data


def _until_demoted(base: str, key: str, most: int) -> int:
    """Send failing requests until one skips the fast tier; how many paid for it before."""
    paid = 0
    for _ in range(most):
        tier, route, fallback = _ask(base, key, LOOP)
        if "demoted highspeed: " in route and not fallback:
            assert tier == "standard"
            return paid
        paid += _paid(route, fallback)
    raise AssertionError(f"not demoted after {most} failing requests")


def _until_restored(base: str, key: str, most: int) -> int:
    """Send good requests until the fast tier answers one that is no probe; how many."""
    for i in range(most):
        tier, route, _ = _ask(base, key, CLEAN)
        if tier == "highspeed" and "demoted" not in route and "probe" not in route:
            return i + 1
    raise AssertionError(f"not restored after {most} good requests")


@pytest.fixture()
def one(engines: dict[str, str], tmp_path: Path) -> Iterator[tuple[Proc, str]]:
    """One gateway with the embedded store (its own file) and tenants."""
    env = {"GATEWAY_ADMIN_TOKEN": ADMIN}
    proc, base = start_gateway(tmp_path, _rules(), engines, env)
    yield proc, base
    proc.stop()


def test_a_tier_failing_every_check_is_skipped_then_restored(one: tuple[Proc, str]) -> None:
    proc, base = one
    _, _, key = new_tenant(proc.admin)
    for _ in range(3):
        assert _ask(base, key, CLEAN)[0] == "highspeed"
    # the fast tier fails every check: at most min_answers requests pay for it
    paid = _until_demoted(base, key, most=20)
    assert paid <= QUALITY["min_answers"]
    direct = probes = 0
    for _ in range(20):
        tier, route, fallback = _ask(base, key, LOOP)
        if "probe highspeed (demoted: " in route:
            probes += 1
            assert fallback.startswith("highspeed:check_")  # a probe pays, and is counted
        else:
            assert (tier, fallback) == ("standard", "")
            assert "demoted highspeed: " in route and "check failures" in route
            direct += 1
    assert direct >= 8 and direct + probes == 20
    # everywhere an operator looks
    assert _demoted_metric(base) == "1"
    ready = _get(base, "/readyz")
    assert '"tier":"highspeed"' in ready.replace(" ", "") and "check failures" in ready
    (d,) = _demotions(proc.admin)
    assert (d["rule"], d["tier"], d["shared"], d["pinned"]) == ("default", "highspeed", True, False)
    # it recovers: the probes pass, and it carries its traffic again
    assert _until_restored(base, key, most=60) <= 60
    for _ in range(5):
        assert _ask(base, key, CLEAN)[0] == "highspeed"
    assert _demoted_metric(base) == "0"
    assert _demotions(proc.admin) == []
    _, audit, _ = call(proc.admin, "GET", "/admin/audit")
    actions = [e["action"] for e in audit["data"] if e["action"].startswith("quality.")]
    assert actions == ["quality.restore", "quality.demote"]


@pytest.fixture()
def pair(engines: dict[str, str], prefix: str, tmp_path: Path) -> Iterator[list[tuple[Proc, str]]]:
    """Two gateway replicas on one Redis (their own key prefix)."""
    env = tenancy_env(prefix + f"{time.monotonic_ns()}:")
    procs = [start_gateway(tmp_path, _rules(), engines, env) for _ in "ab"]
    yield procs
    for p, _ in procs:
        p.stop()


def test_two_replicas_on_one_redis_demote_and_restore_together(
    pair: list[tuple[Proc, str]],
) -> None:
    (a, a_url), (b, b_url) = pair
    _, _, key = new_tenant(a.admin)
    # only replica a sees the failing answers; both skip the tier at once
    _until_demoted(a_url, key, most=20)
    t0 = time.monotonic()
    assert until(lambda: _demoted_metric(b_url) == "1", timeout=5.0)
    applied = time.monotonic() - t0
    (d,) = _demotions(b.admin)
    assert d["by"].startswith("circuit ") and d["shared"]
    routes = [_ask(b_url, key, LOOP) for _ in range(20)]  # 30 % probes
    assert sum("demoted highspeed: " in r and not fb for _, r, fb in routes) >= 8
    print(f"\nreplica b applied a's demotion within {applied * 1000:.0f} ms")
    # replica b's probes pass: both carry the fast tier's traffic again
    _until_restored(b_url, key, most=60)
    assert until(lambda: _demoted_metric(a_url) == "0", timeout=5.0)
    assert _ask(a_url, key, CLEAN)[0] == "highspeed"


def test_an_operator_pins_and_releases_a_demotion_on_every_replica(
    pair: list[tuple[Proc, str]],
) -> None:
    (a, a_url), (b, b_url) = pair
    _, _, key = new_tenant(a.admin)
    pin = {"rule": "default", "tier": "highspeed", "reason": "a bad deploy", "ttl_s": 600}
    st, d, _ = call(a.admin, "POST", "/admin/quality/demotions", pin)
    assert st == 201 and d["pinned"] and d["by"] == "admin" and d["version"] > 0, d
    assert until(lambda: _demoted_metric(b_url) == "1", timeout=5.0)
    for _ in range(10):  # a pin is never probed
        tier, route, fallback = _ask(b_url, key, CLEAN)
        assert (tier, fallback) == ("standard", "") and "demoted highspeed: a bad deploy" in route
    st, _, _ = call(b.admin, "DELETE", "/admin/quality/demotions/default/highspeed")
    assert st == 204
    assert until(lambda: _demoted_metric(a_url) == "0", timeout=5.0)
    assert _ask(a_url, key, CLEAN)[0] == "highspeed"
    st, audit, _ = call(a.admin, "GET", "/admin/audit")
    actions = [e["action"] for e in audit["data"] if e["action"].startswith("quality.")]
    assert actions == ["quality.release", "quality.pin"]
    # what the running rules lack, or no demotion, is said
    bad = {"rule": "nope", "tier": "fast"}
    st, err, _ = call(a.admin, "POST", "/admin/quality/demotions", bad)
    assert st == 422 and len(err["error"]["errors"]) == 2, err
    st, err, _ = call(a.admin, "DELETE", "/admin/quality/demotions/default/highspeed")
    assert st == 404, err


def test_shadow_copies_probe_a_demoted_tier(engines: dict[str, str], tmp_path: Path) -> None:
    """No probe share: a tenant's shadow copies alone test the demoted tier, and restore it."""
    rules = _rules()
    rules["quality"] = {**QUALITY, "probe_share": 0}
    proc, base = start_gateway(tmp_path, rules, engines, {"GATEWAY_ADMIN_TOKEN": ADMIN})
    try:
        _, _, key = new_tenant(proc.admin, {"shadow_rate": 1.0})
        _until_demoted(base, key, most=20)

        def restored() -> bool:
            tier, route, _ = _ask(base, key, CLEAN)  # answered by standard, shadowed to highspeed
            assert "probe" not in route
            return tier == "highspeed"

        assert until(restored, timeout=20)
        _, audit, _ = call(proc.admin, "GET", "/admin/audit")
        assert [e["action"] for e in audit["data"]][:2] == ["quality.restore", "quality.demote"]
    finally:
        proc.stop()
