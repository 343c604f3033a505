"""The embedded default keeps what an operator wrote: with no Redis, tenants, keys,
policies, rules versions, usage and the audit log live in one SQLite file that the worker
processes share and that a restart finds again. Real gateway processes, two workers each.
"""

from __future__ import annotations

import json
import sqlite3
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.store.sqlite_db import MIGRATIONS
from tests.conftest import rules_for_tests, start_gateway
from tests.test_tenancy import ADMIN, call, chat, new_tenant
from tests.waiting import until

pytestmark = pytest.mark.processes


def _embedded(path: Path, workers: int = 2) -> dict[str, str]:
    return {
        "GATEWAY_ADMIN_TOKEN": ADMIN,
        "GATEWAY_STORE_PATH": str(path),
        "GATEWAY_WORKERS": str(workers),
        "GATEWAY_DRAIN_SECONDS": "1",
    }


def _upload(admin: str, rules: dict[str, Any]) -> int:
    req = urllib.request.Request(
        admin + "/admin/rules",
        data=yaml.safe_dump(rules).encode(),
        method="PUT",
        headers={"Authorization": f"Bearer {ADMIN}", "Content-Type": "application/yaml"},
    )
    with urllib.request.urlopen(req, timeout=20) as r:
        return int(json.loads(r.read())["version"])


def _every_worker(url: str, key: str, want: int, times: int = 12) -> bool:
    """``want`` from ``times`` requests, a new connection each (both workers answer)."""
    return all(chat(url, key, "hello")[0] == want for _ in range(times))


def test_tenants_keys_rules_and_audit_survive_a_restart_of_two_workers(
    engines: dict[str, str], tmp_path: Path
) -> None:
    db = tmp_path / "data" / "gateway.db"
    rules = rules_for_tests()
    env = _embedded(db)
    proc, url = start_gateway(tmp_path, rules, engines, env)
    try:
        assert f"store: SQLite file {db}" in proc.log()
        tenant, key_id, key = new_tenant(proc.admin, {"requests_per_minute": 1000})
        _, _, revoked = new_tenant(proc.admin)
        assert _every_worker(url, key, 200)
        changed = rules_for_tests()
        changed["rules"] = changed["rules"][:-1]
        version = _upload(proc.admin, changed)
        assert version == 2
        st, keys, _ = call(proc.admin, "GET", f"/admin/tenants/{tenant}/keys")
        assert st == 200 and [k["id"] for k in keys["data"]] == [key_id]
        usage = until(
            lambda: call(proc.admin, "GET", f"/admin/tenants/{tenant}/usage")[1]["requests"] >= 12,
            timeout=10,
        )
        assert usage
        audit_before = call(proc.admin, "GET", "/admin/audit?limit=100")[1]["data"]
        assert {"tenant.create", "key.create", "rules.update"} <= {
            e["action"] for e in audit_before
        }
    finally:
        proc.stop()

    again, url = start_gateway(tmp_path, rules, engines, env)  # the same file and rules
    try:
        assert _every_worker(url, key, 200), again.log()  # the key the user handed out
        st, body, _ = call(again.admin, "GET", "/admin/rules")
        assert st == 200 and body["version"] == 2
        st, versions, _ = call(again.admin, "GET", "/admin/rules/versions")
        assert [v["version"] for v in versions["data"]] == [1, 2]
        st, t, _ = call(again.admin, "GET", f"/admin/tenants/{tenant}")
        assert st == 200 and t["policy"]["requests_per_minute"] == 1000
        audit_after = call(again.admin, "GET", "/admin/audit?limit=100")[1]["data"]
        assert audit_after[: len(audit_before)] == audit_before
        st, usage_after, _ = call(again.admin, "GET", f"/admin/tenants/{tenant}/usage")
        assert usage_after["requests"] >= 12  # the day's usage was written before the stop
        # a revocation on one worker reaches the other at once (a change the file carries)
        rid = call(again.admin, "GET", "/admin/tenants")[1]["data"][1]["id"]
        kid = call(again.admin, "GET", f"/admin/tenants/{rid}/keys")[1]["data"][0]["id"]
        assert call(again.admin, "DELETE", f"/admin/keys/{kid}")[0] == 204
        assert until(lambda: _every_worker(url, revoked, 401, times=6), timeout=3)
    finally:
        again.stop()
    with sqlite3.connect(db) as c:
        assert c.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert c.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)


def test_a_rules_file_changed_while_stopped_is_the_new_version(
    engines: dict[str, str], tmp_path: Path
) -> None:
    """The rules file is the operator's too: edited while the gateway was stopped (or
    another file given), it is recorded as a new version at start; the same text again
    (here: a copy at another path) leaves the store's current version running."""
    env = _embedded(tmp_path / "gateway.db", workers=1)
    first = rules_for_tests()
    edited = {**first, "rules": first["rules"][:-1]}
    for want, rules in ((1, first), (2, edited), (2, edited), (3, first)):
        proc, _ = start_gateway(tmp_path, rules, engines, env)  # a new file path each time
        try:
            st, body, _ = call(proc.admin, "GET", "/admin/rules")
            assert st == 200 and body["version"] == want and yaml.safe_load(body["yaml"]) == rules
        finally:
            proc.stop()


def test_an_in_memory_store_says_it_forgets(engines: dict[str, str], tmp_path: Path) -> None:
    env = {**_embedded(tmp_path / "unused.db", workers=1), "GATEWAY_STORE_PATH": ":memory:"}
    proc, _ = start_gateway(tmp_path, rules_for_tests(), engines, env)
    try:
        assert "store: in memory" in proc.log() and "FORGOTTEN" in proc.log()
        assert not (tmp_path / "unused.db").exists()
    finally:
        proc.stop()


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({}, "store: none (no GATEWAY_ADMIN_TOKEN)"),
        (
            {"GATEWAY_ADMIN_TOKEN": ADMIN, "GATEWAY_STORE_PATH": "/srv/gw/g.db"},
            "SQLite file /srv/gw/g.db",
        ),
        ({"GATEWAY_ADMIN_TOKEN": ADMIN, "GATEWAY_STORE_PATH": ":memory:"}, "are FORGOTTEN when"),
        (
            {"GATEWAY_REDIS_URL": "redis://:s3cret@r:6380/0", "GATEWAY_KEY_SECRET": "k" * 16},
            "Redis (single) at r:6380, shared by every replica",
        ),
        (
            {"GATEWAY_REDIS_URL": "redis+sentinel://a:1,b:2/m", "GATEWAY_KEY_SECRET": "k" * 16},
            "Redis (sentinel) at a:1,b:2",
        ),
    ],
)
def test_serve_says_which_store_it_uses_and_where(env: dict[str, str], says: str) -> None:
    from gateway.settings import load_settings
    from gateway.store.factory import store_line

    line = store_line(load_settings(env))
    assert line.startswith("gateway: store: ") and says in line and "s3cret" not in line


def test_a_store_file_from_a_newer_gateway_is_refused_in_one_line(tmp_path: Path) -> None:
    from gateway.settings import load_settings
    from gateway.store.factory import prepare_file

    db = tmp_path / "gateway.db"
    with sqlite3.connect(db) as c:
        c.execute(f"PRAGMA user_version = {len(MIGRATIONS) + 1}")
    env = {"GATEWAY_ADMIN_TOKEN": ADMIN, "GATEWAY_STORE_PATH": str(db)}
    problem = prepare_file(load_settings(env))
    assert problem is not None and "from a newer gateway" in problem and "\n" not in problem
    fresh = {**env, "GATEWAY_STORE_PATH": str(tmp_path / "new" / "gateway.db")}
    assert prepare_file(load_settings(fresh)) is None
    assert (tmp_path / "new" / "gateway.db").is_file()
