"""The review queue through real gateways (the embedded store, and Redis): a request whose
fast answer failed a check leaves an item — the request with its configured fields
redacted, the caught answer, its check and reason, the answer the client got — that a
reviewer labels through the admin API; labels give each check's precision; the queue
exports as JSONL; no API key and no redacted field is ever in it; a tenant may opt out."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import REDIS, rules_for_tests, start_gateway
from tests.test_tenancy import ADMIN, call, new_tenant
from tests.waiting import wait_until

pytestmark = [pytest.mark.processes]

LOOPING = "[[highspeed: loop]] [[standard: text=A clean answer.]]"


@pytest.fixture(scope="module", params=["embedded", "redis"])
def gw(
    request: pytest.FixtureRequest,
    engines: dict[str, str],
    prefix: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[str, str]]:
    env = {"GATEWAY_ADMIN_TOKEN": ADMIN, "GATEWAY_KEY_SECRET": "test-secret-1234"}
    if request.param == "redis":
        env |= {"GATEWAY_REDIS_URL": REDIS, "GATEWAY_REDIS_PREFIX": prefix + "review:"}
    rules = rules_for_tests()
    rules["review"] = {"sample": 1.0, "redact": ["user", "metadata.email"]}
    proc, url = start_gateway(tmp_path_factory.mktemp("gw"), rules, engines, env)
    assert proc.admin is not None
    yield url, proc.admin
    proc.stop()


def _chat(base: str, key: str, body: dict[str, Any]) -> dict[str, Any]:
    req = urllib.request.Request(
        f"{base}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=20) as r:
        out: dict[str, Any] = json.loads(r.read())
        return out


def _items(admin: str, query: str = "") -> list[dict[str, Any]]:
    st, body, _ = call(admin, "GET", f"/admin/review{query}")
    assert st == 200, body
    items: list[dict[str, Any]] = body["data"]
    return items


def test_a_caught_answer_is_kept_labelled_and_exported(gw: tuple[str, str]) -> None:
    url, admin = gw
    tenant, _, key = new_tenant(admin)
    body = {
        "model": "auto",
        "user": "alice@example.com",
        "metadata": {"email": "alice@example.com", "team": "support"},
        "messages": [{"role": "user", "content": f"Tell me about tea. {LOOPING}"}],
    }
    answer = _chat(url, key, body)
    assert answer["choices"][0]["message"]["content"] == "A clean answer."
    items = wait_until(lambda: _items(admin, "?check=repetition"), "the item kept")
    item = items[0]
    assert item["tenant"] == tenant and item["check"] == "repetition"
    assert item["caught"][0]["tier"] == "highspeed" and item["caught"][0]["check"] == "repetition"
    assert "I will repeat this sentence again." in item["caught"][0]["answer"]
    assert item["delivered"] == "A clean answer." and item["answered_by"] == "standard"
    assert item["request"]["user"] == "[redacted]"
    assert item["request"]["metadata"] == {"email": "[redacted]", "team": "support"}
    assert item["label"] is None
    # labelled by a reviewer, then counted in the check's precision
    st, labelled, _ = call(
        admin, "POST", f"/admin/review/{item['id']}/label", {"label": "true_degradation"}
    )
    assert st == 200 and labelled["label"] == "true_degradation", labelled
    st, bad, _ = call(admin, "POST", f"/admin/review/{item['id']}/label", {"label": "meh"})
    assert st == 400 or st == 422, bad
    st, prec, _ = call(admin, "GET", "/admin/review/precision")
    assert st == 200 and prec["checks"]["repetition"]["true_degradation"] >= 1
    assert prec["checks"]["repetition"]["precision"] is not None
    st, audit, _ = call(admin, "GET", "/admin/audit")
    assert any(a["action"] == "review.label" and a["target"] == item["id"] for a in audit["data"])
    # exported as JSONL: one item a line; no key, no redacted value anywhere in it
    req = urllib.request.Request(
        f"{admin}/admin/review/export", headers={"Authorization": f"Bearer {ADMIN}"}
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.headers["content-type"].startswith("application/x-ndjson")
        raw = r.read().decode()
    lines = [json.loads(line) for line in raw.splitlines()]
    assert any(line["id"] == item["id"] for line in lines)
    assert key not in raw and "alice@example.com" not in raw
    assert key[:12] not in raw


def test_a_tenant_that_opted_out_is_never_kept(gw: tuple[str, str]) -> None:
    url, admin = gw
    tenant, _, key = new_tenant(admin, {"review": False})
    _chat(url, key, {"model": "auto", "messages": [{"role": "user", "content": LOOPING}]})
    other, _, key2 = new_tenant(admin)
    _chat(url, key2, {"model": "auto", "messages": [{"role": "user", "content": LOOPING}]})
    wait_until(lambda: any(i["tenant"] == other for i in _items(admin)), "the other tenant's item")
    assert not any(i["tenant"] == tenant for i in _items(admin, "?limit=1000"))


def test_an_unknown_item_is_a_404(gw: tuple[str, str]) -> None:
    _, admin = gw
    st, body, _ = call(admin, "GET", "/admin/review/nope")
    assert st == 404, body


def test_the_console_shows_an_item_side_by_side_and_labels_it_once(gw: tuple[str, str]) -> None:
    import re

    import httpx

    url, admin = gw
    _, _, key = new_tenant(admin)
    _chat(url, key, {"model": "auto", "messages": [{"role": "user", "content": LOOPING}]})
    item = wait_until(lambda: _items(admin, "?label=none"), "an unlabelled item")[0]
    with httpx.Client(base_url=admin, timeout=10) as c:
        r = c.post("/console/login", data={"token": ADMIN, "name": "reviewer"})
        assert r.status_code == 303
        page = c.get("/console/review")
        assert page.status_code == 200 and f'id="item-{item["id"]}"' in page.text
        assert "A clean answer." in page.text and "I will repeat this sentence" in page.text
        m = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert m is not None
        done = c.post(
            f"/console/review/{item['id']}/label",
            data={"csrf": m.group(1), "label": "false_alarm", "back": "/console/review"},
        )
        assert done.status_code == 303 and done.headers["location"].startswith("/console/review")
        again = c.get(done.headers["location"])  # the page a refresh re-reads: a GET
        assert again.status_code == 200 and "Labelled" in again.text
        export = c.get("/console/review/export")
        assert export.status_code == 200 and item["id"] in export.text
    _, got, _ = call(admin, "GET", f"/admin/review/{item['id']}")
    assert got["label"] == "false_alarm" and got["labeled_by"] == "console:reviewer"
