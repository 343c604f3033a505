"""Nothing the gateway serves loads anything from another machine: the admin API's
browser (``/docs``, Swagger UI from a package), the console's pages (logged in and not),
an error page, and the stylesheets they link. Many gateways run where nothing outside is
reachable; a page that needs a CDN is a blank page there. (The docs site: test_docs.py;
what a real browser fetches: test_console.py.)"""

from __future__ import annotations

import http.cookiejar
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Proc, rules_for_tests, start_gateway
from tests.offline import css_loads, html_loads, stylesheets
from tests.test_tenancy import ADMIN, new_tenant


@pytest.fixture(scope="module")
def gw(engines: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    env = {"GATEWAY_ADMIN_TOKEN": ADMIN, "GATEWAY_STORE_PATH": ":memory:"}
    proc, _ = start_gateway(tmp_path_factory.mktemp("offline"), rules_for_tests(), engines, env)
    yield proc
    proc.stop()


def _opener() -> urllib.request.OpenerDirector:
    return urllib.request.build_opener(
        urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar())
    )


def _get(o: urllib.request.OpenerDirector, url: str) -> str:
    try:
        with o.open(url, timeout=20) as r:
            return str(r.read().decode())
    except urllib.error.HTTPError as e:  # an error page is a page too
        return str(e.read().decode())


def _loads(o: urllib.request.OpenerDirector, base: str, path: str) -> list[str]:
    html = _get(o, base + path)
    assert "<html" in html.lower(), path
    found = html_loads(html)
    for sheet in stylesheets(html):
        found += css_loads(_get(o, urllib.parse.urljoin(base + path, sheet)))
    return found


def test_no_page_the_gateway_serves_loads_from_elsewhere(gw: Proc) -> None:
    o, base = _opener(), gw.admin
    tenant, _, _ = new_tenant(base)
    pages = ["/docs", "/console/login"]
    found = {p: _loads(o, base, p) for p in pages}
    form = urllib.parse.urlencode({"token": ADMIN, "name": "offline"}).encode()
    with o.open(base + "/console/login", data=form, timeout=20) as r:
        assert r.status == 200 and "/console/tiers" in r.url
    pages = [
        "/console/tiers",
        "/console/rules",
        "/console/rules/diff?a=1&b=1",
        "/console/tenants",
        f"/console/tenants/{tenant}",
        "/console/shadow",
        "/console/audit",
        "/console/tenants/no-such-tenant",  # an error page
    ]
    found |= {p: _loads(o, base, p) for p in pages}
    assert {p: f for p, f in found.items() if f} == {}


def test_the_api_browser_is_served_from_a_package(gw: Proc) -> None:
    """/docs names its script and stylesheet on this listener, and they are there."""
    o = _opener()
    html = _get(o, gw.admin + "/docs")
    for asset in ("swagger-ui-bundle.js", "swagger-ui.css"):
        assert f'"/docs/assets/{asset}"' in html
        with o.open(f"{gw.admin}/docs/assets/{asset}", timeout=20) as r:
            assert r.status == 200 and len(r.read()) > 10_000
    assert '"validatorUrl": null' in html  # no badge fetched from swagger.io


def test_the_scanner_finds_what_a_browser_would_fetch(tmp_path: Path) -> None:
    page = (
        '<link rel="preconnect" href="https://fonts.gstatic.com">'
        '<link rel="stylesheet" href="/ok.css"><script src="https://cdn.example/x.js"></script>'
        '<a href="https://example.org/">a link loads nothing</a>'
        '<img srcset="/a.png 1x, //img.example/b.png 2x"><div style="background:url(http://x.example/i.png)">'
        '<style>@import "https://fonts.example/f.css";</style><pre class="mermaid">graph</pre>'
        '<script src="http://127.0.0.1:8081/local.js"></script>'
    )
    assert html_loads(page) == [
        "https://fonts.gstatic.com",
        "https://cdn.example/x.js",
        "//img.example/b.png",
        "http://x.example/i.png",
        "https://fonts.example/f.css",
        "<a mermaid block: Mermaid from a CDN>",
    ]
