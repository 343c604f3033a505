"""The operator console in a real browser: headless Chromium (Debian's ``chromium`` and
``chromium-driver``) driven with Selenium against a real gateway process (fake engines,
Redis under the module's own prefix).

Without the browser these tests skip, unless ``REQUIRE_BROWSER=1`` (``make test`` sets it
after ``make browser`` installed it). With ``CONSOLE_SHOTS=DIR`` the tiers page and a rules
diff are saved as ``DIR/console-*.png`` (``python -m deploy.screenshots`` does that for the
docs); otherwise under the test's own temporary folder.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal, TypeVar

import pytest
import yaml

from tests.conftest import REDIS, Proc, free_port, rules_for_tests, start_gateway
from tests.test_tenancy import ADMIN

pytest.importorskip("selenium")

from selenium.common.exceptions import (
    NoSuchElementException,
    StaleElementReferenceException,
    WebDriverException,
)
from selenium.webdriver import Chrome
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

from deploy.screenshots import browser_paths, chromium, shoot
from gateway.rules.schema import RulesError, parse_rules

pytestmark = [pytest.mark.browser, pytest.mark.processes]

T = TypeVar("T")
WAIT_S = 20.0  # the page script polls every 3 s; under a loaded machine, allow a few polls


def _need_browser() -> None:
    if browser_paths() is None:
        if os.environ.get("REQUIRE_BROWSER") == "1":
            pytest.fail("chromium and chromedriver are required (make browser)")
        pytest.skip("chromium and chromedriver are not installed (make browser)")


@pytest.fixture(scope="module")
def gw(
    engines: dict[str, str], prefix: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Proc]:
    """A gateway with the admin API and Redis; its high-speed tier has a second replica
    that is down (nothing listens on its port)."""
    _need_browser()
    dead = f"http://127.0.0.1:{free_port()}"
    urls = {"highspeed": f"{engines['highspeed']},{dead}", "standard": engines["standard"]}
    env = {
        "GATEWAY_ADMIN_TOKEN": ADMIN,
        "GATEWAY_REDIS_URL": REDIS,
        "GATEWAY_REDIS_PREFIX": prefix,
        "GATEWAY_KEY_SECRET": "console-test-secret-0123",
    }
    proc, _ = start_gateway(tmp_path_factory.mktemp("console"), rules_for_tests(), urls, env)
    proc.dead = dead  # type: ignore[attr-defined]  # the down replica's URL, for the tests
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def browser(gw: Proc, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Chrome]:
    d = chromium(tmp_path_factory.mktemp("chromium-profile"))
    d.implicitly_wait(0)
    yield d
    d.quit()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = os.environ.get("CONSOLE_SHOTS")
    return Path(out) if out else tmp_path_factory.mktemp("shots")


@pytest.fixture()
def page(browser: Chrome, gw: Proc) -> Chrome:
    """The browser, logged in to the console."""
    browser.get(f"{gw.admin}/console/tiers")
    if "/console/login" in browser.current_url:
        login(browser, ADMIN, "ci")
    return browser


# -- helpers ---------------------------------------------------------------------------------


def wait(d: WebDriver, what: Callable[[WebDriver], T], timeout: float = WAIT_S) -> T:
    """Poll ``what`` until it is truthy. The page's script re-renders its figures in place
    (every 3 s): an element not yet rendered, or replaced between finding and reading it,
    is another poll, not a failure (ChromeDriver says the latter either as a stale element or
    as an inspector error, "Node with given id does not belong to the document")."""

    def poll(drv: WebDriver) -> T | Literal[False]:
        try:
            return what(drv) or False
        except WebDriverException as e:
            if "does not belong to the document" in str(e.msg):
                return False
            raise

    return WebDriverWait(
        d,
        timeout,
        poll_frequency=0.1,
        ignored_exceptions=(NoSuchElementException, StaleElementReferenceException),
    ).until(poll)


def by_id(d: WebDriver, id_: str) -> Any:
    return d.find_element(By.ID, id_)


def login(d: WebDriver, token: str, name: str = "") -> None:
    by_id(d, "token").send_keys(token)
    if name:
        by_id(d, "name").send_keys(name)
    by_id(d, "login").click()


def admin_call(gw: Proc, method: str, path: str, body: Any = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"{gw.admin}{path}", data=data, method=method)
    req.add_header("Authorization", f"Bearer {ADMIN}")
    with urllib.request.urlopen(req, timeout=10) as r:
        raw = r.read()
    return json.loads(raw) if raw else None


def chat(gw: Proc, key: str, text: str, stream: bool = False) -> int:
    """One chat request on the data port with a tenant key; the HTTP status."""
    body = {"model": "auto", "messages": [{"role": "user", "content": text}], "stream": stream}
    req = urllib.request.Request(
        gw.url.removesuffix("/healthz") + "/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=20) as r:
            r.read()
            return int(r.status)
    except urllib.error.HTTPError as e:
        e.read()
        return int(e.code)


def until_status(gw: Proc, key: str, want: int) -> None:
    """A key change reaches the data plane through the store's events: poll for it."""
    deadline = time.monotonic() + WAIT_S
    while (got := chat(gw, key, "hello")) != want and time.monotonic() < deadline:
        time.sleep(0.1)
    assert got == want


def new_key(gw: Proc) -> str:
    t = admin_call(gw, "POST", "/admin/tenants", {"name": f"traffic-{uuid.uuid4().hex[:6]}"})
    return str(admin_call(gw, "POST", f"/admin/tenants/{t['id']}/keys", {})["key"])


def cell(d: WebDriver, *path: str | int) -> Any:
    """The element a live figure is shown in (``data-live`` path into /admin/live)."""
    return d.find_element(By.CSS_SELECTOR, f"[data-live='{json.dumps(list(path))}']")


def upload_file(d: WebDriver, path: Path) -> None:
    """Choose a rules file; the page's script loads it into the text box."""
    by_id(d, "rules-file").send_keys(str(path))
    want = path.read_text()
    wait(d, lambda drv: by_id(drv, "rules-yaml").get_property("value") == want)


def shown_errors(d: WebDriver, box: str = "rule-errors") -> list[str]:
    return [li.text for li in by_id(d, box).find_elements(By.CSS_SELECTOR, "ul.errors li")]


def current_version(gw: Proc) -> int:
    return int(admin_call(gw, "GET", "/admin/rules")["version"])


def good_rules(marker: str) -> dict[str, Any]:
    """The test rules with one more rule in front (requests with ``x-console: <marker>``
    go to the standard tier alone) and a longer hedge budget: a diff with lines added and
    lines changed, the tiers (and their pools) untouched."""
    data = rules_for_tests()
    data["dispatch"]["hedge_burst"] = 20
    rule = {"name": f"console-{marker}", "when": {"headers": {"x-console": marker}}}
    data["rules"].insert(0, {**rule, "tier": "standard", "fallback": []})
    return data


# -- the tests -------------------------------------------------------------------------------


def test_login_refuses_a_wrong_token_and_keeps_an_httponly_strict_cookie(
    browser: WebDriver, gw: Proc
) -> None:
    browser.delete_all_cookies()
    browser.get(f"{gw.admin}/console/rules")
    assert "/console/login" in browser.current_url
    login(browser, "not-the-admin-token-0123456789")
    wait(browser, lambda d: "not the admin token" in by_id(d, "errors").text)
    assert browser.get_cookie("gateway_console") is None
    login(browser, ADMIN, "ci")
    wait(browser, lambda d: d.current_url.endswith("/console/rules"))  # back where it asked
    cookie = browser.get_cookie("gateway_console")
    assert cookie is not None
    assert cookie["httpOnly"] is True and cookie["sameSite"] == "Strict"
    assert ADMIN not in cookie["value"]
    # the token is not readable by the page's scripts either
    assert "gateway_console" not in browser.execute_script("return document.cookie")
    # the JSON API keeps its Bearer token: the session cookie does not open it
    assert browser.execute_script("return fetch('/admin/tenants').then(r => r.status)") == 401
    assert browser.execute_script("return fetch('/admin/live').then(r => r.status)") == 200


def test_tiers_page_shows_both_tiers_health_and_live_numbers(
    page: Chrome, gw: Proc, shots: Path
) -> None:
    for tier in ("highspeed", "standard"):

        def up(d: WebDriver, tier: str = tier) -> bool:
            return bool(cell(d, "pools", tier, "available").text == "up")

        def closed(d: WebDriver, tier: str = tier) -> bool:
            return bool(cell(d, "pools", tier, "circuit_open").text == "closed")

        wait(page, up)
        wait(page, closed)
    dead = gw.dead  # type: ignore[attr-defined]  # set by the gw fixture

    def replicas(d: WebDriver) -> set[str | None]:
        rows = d.find_elements(By.CSS_SELECTOR, "#replicas tbody tr[data-replica]")
        return {r.get_attribute("data-replica") for r in rows}

    wait(page, lambda d: replicas(d) >= {dead})
    # the dead replica turns "down" once probed; the page script refreshes it in place
    wait(page, lambda d: cell(d, "pools", "highspeed", "replicas", 1, "up").text == "down")
    wait(
        page,
        lambda d: (
            "bad" in cell(d, "pools", "highspeed", "replicas", 1, "up").get_attribute("class")
        ),
    )
    wait(page, lambda d: cell(d, "pools", "highspeed", "replicas", 0, "up").text == "up")

    key = new_key(gw)
    for i in range(6):
        assert chat(gw, key, f"hello {i}") == 200
    assert chat(gw, key, "[[highspeed: status=500]] then the standard tier") == 200
    assert chat(gw, key, "[[highspeed: loop; chunks=40]] a loop", stream=True) == 200
    live = admin_call(gw, "GET", "/admin/live")["tiers"]
    assert live["highspeed"]["fallbacks"] and live["highspeed"]["check_failures"]
    # without a reload: the script's poll brings the new figures
    wait(page, lambda d: cell(d, "tiers", "highspeed", "requests").text not in ("0", "\u2014"))
    wait(page, lambda d: "http_500" in cell(d, "tiers", "highspeed", "fallbacks").text)
    wait(page, lambda d: "repetition" in cell(d, "tiers", "highspeed", "check_failures").text)
    wait(page, lambda d: cell(d, "tiers", "highspeed", "latency_s", "p50").text.endswith(" ms"))
    wait(page, lambda d: cell(d, "tiers", "highspeed", "rate").text.endswith("/s"))
    assert (
        int(
            by_id(page, "tiers").find_element(By.XPATH, "..").get_attribute("data-live-updates")
            or 0
        )
        >= 1
    )
    shoot(page, shots / "console-tiers.png")
    assert (shots / "console-tiers.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_bad_rules_file_is_refused_with_every_error(
    page: WebDriver, gw: Proc, tmp_path: Path
) -> None:
    data = rules_for_tests()
    data["tiers"]["highspeed"]["timeouts"]["ttft"] = -1
    data["tiers"]["standard"]["circuit"]["failures"] = "many"
    data["tiers"]["standard"]["colour"] = "blue"
    data["surprise"] = True
    text = yaml.safe_dump(data)
    with pytest.raises(RulesError) as e:
        parse_rules(text)
    expected = e.value.errors
    assert len(expected) >= 4

    before = current_version(gw)
    page.get(f"{gw.admin}/console/rules")
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    upload_file(page, bad)
    by_id(page, "validate").click()
    wait(page, lambda d: shown_errors(d) == expected)
    upload_file(page, bad)
    by_id(page, "upload").click()
    wait(page, lambda d: shown_errors(d) == expected)
    assert "running rules are unchanged" in by_id(page, "rule-errors").text
    assert by_id(page, "current-version").text == f"version {before}"
    assert current_version(gw) == before
    # the refused draft stays in the box to be fixed
    assert by_id(page, "rules-yaml").get_property("value") == text


def test_validate_and_explain_a_draft_before_uploading_it(
    page: WebDriver, gw: Proc, tmp_path: Path
) -> None:
    before = current_version(gw)
    marker = uuid.uuid4().hex[:6]
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(good_rules(marker)))
    page.get(f"{gw.admin}/console/rules")
    upload_file(page, good)
    by_id(page, "validate").click()
    wait(page, lambda d: "Valid:" in by_id(d, "valid").text)
    assert f"console-{marker}" in by_id(page, "valid").text

    request = {
        "headers": {"x-console": marker},
        "body": {"model": "auto", "messages": [{"role": "user", "content": "hi"}]},
    }
    box = by_id(page, "explain-request")
    box.clear()
    box.send_keys(json.dumps(request))
    by_id(page, "explain").click()
    wait(page, lambda d: by_id(d, "explain-rule").text == f"console-{marker}")
    assert by_id(page, "explain-tiers").text == "standard"
    assert current_version(gw) == before  # nothing was uploaded
    running = admin_call(gw, "POST", "/admin/explain", request)
    assert running["rule"] != f"console-{marker}"


def test_upload_shows_the_diff_and_rollback_restores_the_version(
    page: Chrome, gw: Proc, tmp_path: Path, shots: Path
) -> None:
    before = current_version(gw)
    marker = uuid.uuid4().hex[:6]
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(good_rules(marker)))
    page.get(f"{gw.admin}/console/rules")
    upload_file(page, good)
    by_id(page, "upload").click()
    wait(page, lambda d: "/console/rules/diff" in d.current_url)
    after = current_version(gw)
    assert after > before
    assert page.find_element(By.TAG_NAME, "h1").text == f"Rules: version {before} → version {after}"
    added = page.find_elements(By.CSS_SELECTOR, "#diff .diff_add")
    assert any(f"console-{marker}" in a.text for a in added)
    assert by_id(page, "diff-summary").text.startswith("+")
    shoot(page, shots / "console-rules-diff.png")

    by_id(page, "rollback").click()
    wait(page, lambda d: d.find_elements(By.ID, "rolled-back"))
    assert f"version {before}" in by_id(page, "rolled-back").text
    assert by_id(page, "current-version").text == f"version {before}"
    assert current_version(gw) == before
    row = page.find_element(By.CSS_SELECTOR, f"#versions tr[data-version='{before}']")
    assert "running" in row.text


def test_create_rotate_and_revoke_a_key(page: WebDriver, gw: Proc) -> None:
    name = f"acme-{uuid.uuid4().hex[:6]}"
    page.get(f"{gw.admin}/console/tenants")
    by_id(page, "tenant-name").send_keys(name)
    by_id(page, "create-tenant").click()
    wait(page, lambda d: name in d.find_element(By.TAG_NAME, "h1").text)

    by_id(page, "key-name").send_keys("ci")
    by_id(page, "create-key").click()
    first = wait(page, lambda d: by_id(d, "new-key-value").text)
    assert chat(gw, first, "hello") == 200

    page.find_element(By.CSS_SELECTOR, "#keys button.rotate").click()
    wait(page, lambda d: "was rotated" in by_id(d, "new-key").text)
    second = by_id(page, "new-key-value").text
    assert second != first
    until_status(gw, first, 401)
    assert chat(gw, second, "hello") == 200

    page.find_element(By.CSS_SELECTOR, "#keys button.revoke").click()
    WebDriverWait(page, WAIT_S).until(expected_conditions.alert_is_present()).accept()
    wait(page, lambda d: "revoked" in by_id(d, "done").text)
    with pytest.raises(NoSuchElementException):
        page.find_element(By.CSS_SELECTOR, "#keys button.revoke")
    until_status(gw, second, 401)

    def usage(d: WebDriver) -> bool:  # usage is settled after each answer: poll the page
        d.refresh()
        return int(by_id(d, "usage-requests").text) >= 2  # the answers the two keys got

    wait(page, usage)


def test_creating_a_key_then_refreshing_mints_no_second_key(page: WebDriver, gw: Proc) -> None:
    """Post/Redirect/Get: the key is shown once on a page a refresh does not re-post; the
    form's address opened as a page leads to the tenant, never a 405."""
    t = admin_call(gw, "POST", "/admin/tenants", {"name": f"prg-{uuid.uuid4().hex[:6]}"})
    page.get(f"{gw.admin}/console/tenants/{t['id']}")
    by_id(page, "key-name").send_keys("once")
    by_id(page, "create-key").click()
    key = wait(page, lambda d: by_id(d, "new-key-value").text)
    assert page.current_url.split("?")[0].endswith(f"/console/tenants/{t['id']}")
    for _ in range(2):
        page.refresh()
        wait(page, lambda d: d.find_elements(By.ID, "key-gone"))
        assert not page.find_elements(By.ID, "new-key-value")
    assert len(admin_call(gw, "GET", f"/admin/tenants/{t['id']}/keys")["data"]) == 1
    assert len(page.find_elements(By.CSS_SELECTOR, "#keys tr[data-key]")) == 1
    assert chat(gw, key, "hello") == 200
    for form in ("keys", "policy"):
        page.get(f"{gw.admin}/console/tenants/{t['id']}/{form}")
        wait(page, lambda d: t["name"] in d.find_element(By.TAG_NAME, "h1").text)
    page.get(f"{gw.admin}/console/rules/rollback")
    wait(page, lambda d: d.current_url.endswith("/console/rules"))
    assert len(admin_call(gw, "GET", f"/admin/tenants/{t['id']}/keys")["data"]) == 1


def _example_forms(gw: Proc) -> list[tuple[str, str, str, Callable[[WebDriver], Any]]]:
    """Each page with examples: (its address, the field they fill, the button that sends
    the form, what the page shows when the form was accepted)."""
    t = admin_call(gw, "POST", "/admin/tenants", {"name": f"ex-{uuid.uuid4().hex[:6]}"})
    return [
        (
            "/console/tenants",
            "tenant-policy",
            "create-tenant",
            lambda d: d.find_element(By.TAG_NAME, "h1").text.startswith("Tenant ex-new"),
        ),
        (
            f"/console/tenants/{t['id']}",
            "policy",
            "save-policy",
            lambda d: "saved" in by_id(d, "done").text,
        ),
        ("/console/rules", "explain-request", "explain", lambda d: by_id(d, "explain-rule").text),
    ]


def test_every_example_in_a_form_is_accepted(page: WebDriver, gw: Proc) -> None:
    """Every example the console offers, put in its field by its button and sent with its
    form, is accepted: nothing the console suggests is refused."""
    forms = _example_forms(gw)
    offered = 0
    for path, field, submit, accepted in forms:
        page.get(f"{gw.admin}{path}")
        n = len(page.find_elements(By.CSS_SELECTOR, f"button[data-example-for='{field}']"))
        assert n >= 1, path
        for i in range(n):
            page.get(f"{gw.admin}{path}")
            button = page.find_elements(By.CSS_SELECTOR, f"button[data-example-for='{field}']")[i]
            text = button.get_attribute("data-example")
            button.click()
            assert by_id(page, field).get_property("value") == text
            if field == "tenant-policy":
                by_id(page, "tenant-name").send_keys(f"ex-new-{i}")
            by_id(page, submit).click()
            wait(page, accepted)
            assert not page.find_elements(By.ID, "errors"), (path, text)
            offered += 1
    for path in ("/console/tenants", "/console/rules", forms[1][0]):  # no example left out
        page.get(f"{gw.admin}{path}")
        fields = {
            b.get_attribute("data-example-for")
            for b in page.find_elements(By.CSS_SELECTOR, "[data-example-for]")
        }
        assert fields <= {f for _, f, _, _ in forms}
    assert offered >= 5


def test_no_page_loads_anything_from_elsewhere(page: WebDriver, gw: Proc) -> None:
    """What the browser really fetched for each page (the Resource Timing list) is all on
    the admin listener; the API browser draws the API from its packaged Swagger UI."""
    t = admin_call(gw, "POST", "/admin/tenants", {"name": f"off-{uuid.uuid4().hex[:6]}"})
    paths = ["/console/tiers", "/console/rules", "/console/tenants", f"/console/tenants/{t['id']}"]
    paths += ["/console/shadow", "/console/audit", "/docs"]
    fetched: dict[str, list[str]] = {}
    for path in paths:
        page.get(f"{gw.admin}{path}")
        if path == "/docs":  # drawn by the script: the API's title and its routes
            wait(
                page, lambda d: "admin API" in d.find_element(By.CSS_SELECTOR, ".info .title").text
            )
            wait(page, lambda d: d.find_elements(By.CSS_SELECTOR, ".opblock"))
        names = page.execute_script(
            "return performance.getEntriesByType('resource').map(e => e.name)"
        )
        fetched[path] = [n for n in names if not n.startswith(gw.admin)]
    assert {p: n for p, n in fetched.items() if n} == {}


def test_a_refused_policy_shows_every_error(page: WebDriver, gw: Proc) -> None:
    t = admin_call(gw, "POST", "/admin/tenants", {"name": f"p-{uuid.uuid4().hex[:6]}"})
    page.get(f"{gw.admin}/console/tenants/{t['id']}")
    box = by_id(page, "policy")
    box.clear()
    box.send_keys(json.dumps({"allowed_tiers": ["nope"], "default_sla": "never"}))
    by_id(page, "save-policy").click()
    wait(page, lambda d: shown_errors(d, "errors"))
    assert shown_errors(page, "errors") == ["unknown tier 'nope'", "unknown SLA class 'never'"]


def test_shadow_comparisons_are_listed(page: WebDriver, gw: Proc) -> None:
    t = admin_call(
        gw, "POST", "/admin/tenants", {"name": "shadowed", "policy": {"shadow_rate": 1.0}}
    )
    key = admin_call(gw, "POST", f"/admin/tenants/{t['id']}/keys", {})["key"]
    assert chat(gw, key, "compare me") == 200
    deadline = time.monotonic() + WAIT_S
    while not [r for r in admin_call(gw, "GET", "/admin/shadow")["data"] if r["tenant"] == t["id"]]:
        assert time.monotonic() < deadline, "no shadow record"
        time.sleep(0.1)
    page.get(f"{gw.admin}/console/shadow")

    def listed(d: WebDriver) -> bool:
        rows = d.find_elements(By.CSS_SELECTOR, "#shadow-records tbody tr")
        return any(t["id"] in r.text and "standard" in r.text for r in rows)

    wait(page, listed)
    wait(page, lambda d: "highspeed" in by_id(d, "shadow-summary").text)


def test_pin_and_release_a_demotion_from_the_tiers_page(page: WebDriver, gw: Proc) -> None:
    from selenium.webdriver.support.ui import Select

    page.get(f"{gw.admin}/console/tiers")
    assert "No tier is demoted" in by_id(page, "demotions").text
    form = by_id(page, "pin-demotion")
    Select(form.find_element(By.NAME, "rule")).select_by_visible_text("default")
    Select(form.find_element(By.NAME, "tier")).select_by_visible_text("highspeed")
    form.find_element(By.NAME, "reason").send_keys("a bad deploy")
    by_id(page, "pin").click()
    wait(page, lambda d: "pinned highspeed for default" in by_id(d, "quality-done").text)
    row = by_id(page, "demotions").text
    assert "a bad deploy" in row and "pinned" in row and "console:ci" in row
    (d,) = admin_call(gw, "GET", "/admin/quality/demotions")["data"]
    assert (d["rule"], d["tier"], d["pinned"]) == ("default", "highspeed", True)
    page.find_element(By.CSS_SELECTOR, "#demotions button.release").click()
    wait(page, lambda d: "released highspeed for default" in by_id(d, "quality-done").text)
    assert "No tier is demoted" in by_id(page, "demotions").text
    assert admin_call(gw, "GET", "/admin/quality/demotions")["data"] == []


def test_the_audit_log_names_the_console_operator(page: WebDriver, gw: Proc) -> None:
    page.get(f"{gw.admin}/console/audit")
    wait(page, lambda d: "console:ci" in by_id(d, "audit").text)


def test_a_form_without_the_sessions_csrf_token_is_refused(page: WebDriver, gw: Proc) -> None:
    before = current_version(gw)
    page.get(f"{gw.admin}/console/rules")
    page.execute_script(
        "document.querySelectorAll('input[name=csrf]').forEach(i => i.value = 'forged')"
    )
    page.find_element(By.CSS_SELECTOR, "#versions button.rollback").click()
    wait(page, lambda d: "stale" in by_id(d, "errors").text)
    assert current_version(gw) == before


def test_logging_out_ends_the_session(page: WebDriver, gw: Proc) -> None:
    by_id(page, "logout").click()
    wait(page, lambda d: "/console/login" in d.current_url)
    page.get(f"{gw.admin}/console/tenants")
    assert "/console/login" in page.current_url
    assert page.execute_script("return fetch('/admin/live').then(r => r.status)") == 401
