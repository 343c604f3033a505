"""Console sessions: ended on the server at logout, login attempts throttled, the cookie
``Secure`` when the request came over TLS (directly or through a trusted proxy).

Tables for the pure parts (where a request came from, the throttle's buckets, the list of
ended sessions); real gateway processes on one Redis for the rest: a cookie copied before a
logout is refused by every worker and by another replica.
"""

from __future__ import annotations

import asyncio
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.requests import Request

from gateway.admin.forwarded import Origin, origin
from gateway.admin.session import Sessions, issue, verify
from gateway.console.throttle import (
    CLIENT_REFILL_S,
    PER_CLIENT,
    TOTAL,
    TOTAL_REFILL_S,
    LoginThrottle,
)
from gateway.settings import load_settings
from gateway.store.memory_store import MemoryStore
from tests.conftest import REDIS, Proc, rules_for_tests, start_gateway
from tests.test_tenancy import ADMIN, tenancy_env

# -- where a request came from -----------------------------------------------------------------

PROXIES = load_settings({"GATEWAY_TRUSTED_PROXIES": "10.0.0.0/8, 192.0.2.7"}).proxies()


def _request(peer: str, scheme: str = "http", **headers: str) -> Request:
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/console/login",
        "scheme": scheme,
        "headers": [(k.replace("_", "-").encode(), v.encode()) for k, v in headers.items()],
        "client": (peer, 50000),
        "server": ("gw", 8081),
    }
    return Request(scope)


@pytest.mark.parametrize(
    ("peer", "scheme", "headers", "want"),
    [
        # no proxy trusted: the peer, and TLS only if it came in over TLS
        ("203.0.113.9", "http", {}, Origin("203.0.113.9", False)),
        ("203.0.113.9", "https", {}, Origin("203.0.113.9", True)),
        # an untrusted peer's forwarding headers are its own say: ignored
        (
            "203.0.113.9",
            "http",
            {"x_forwarded_proto": "https", "x_forwarded_for": "1.2.3.4"},
            Origin("203.0.113.9", False),
        ),
        # a trusted proxy: it says how the client came, and who it is
        (
            "10.1.2.3",
            "http",
            {"x_forwarded_proto": "https", "x_forwarded_for": "198.51.100.4"},
            Origin("198.51.100.4", True),
        ),
        ("192.0.2.7", "http", {"x_forwarded_proto": "http"}, Origin("192.0.2.7", False)),
        # the client's own X-Forwarded-For entries are not believed; trusted hops are skipped
        (
            "10.1.2.3",
            "http",
            {"x_forwarded_for": "6.6.6.6, 198.51.100.4, 10.9.9.9"},
            Origin("198.51.100.4", False),
        ),
        # a proxy that appends: its own value (the last) counts, not the client's
        ("10.1.2.3", "http", {"x_forwarded_proto": "https, http"}, Origin("10.1.2.3", False)),
        # an IPv4 peer seen by a dual-stack listener
        (
            "::ffff:10.1.2.3",
            "http",
            {"x_forwarded_proto": "https"},
            Origin("::ffff:10.1.2.3", True),
        ),
        # garbage in the header is an address nobody trusts
        ("10.1.2.3", "http", {"x_forwarded_for": "not-an-ip"}, Origin("not-an-ip", False)),
    ],
)
def test_where_a_request_came_from(
    peer: str, scheme: str, headers: dict[str, str], want: Origin
) -> None:
    assert origin(_request(peer, scheme, **headers), PROXIES) == want


def test_a_proxy_setting_that_is_not_an_address_stops_the_gateway() -> None:
    with pytest.raises(ValueError, match=re.escape("GATEWAY_TRUSTED_PROXIES: 'proxy.local'")):
        load_settings({"GATEWAY_TRUSTED_PROXIES": "10.0.0.1, proxy.local"})


# -- the throttle ------------------------------------------------------------------------------


class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_a_client_is_throttled_after_its_failures_then_let_in_again() -> None:
    clock = _Clock()
    th = LoginThrottle(clock)
    for _ in range(PER_CLIENT):
        assert th.wait("a") == 0
        th.failed("a")
    assert th.wait("a") == CLIENT_REFILL_S  # one more in a refill
    assert th.wait("b") == 0  # another client is not held up
    clock.t += CLIENT_REFILL_S / 2
    assert th.wait("a") == CLIENT_REFILL_S / 2
    clock.t += CLIENT_REFILL_S / 2
    assert th.wait("a") == 0
    th.failed("a")
    assert th.wait("a") == CLIENT_REFILL_S


def test_all_clients_together_are_throttled_in_total() -> None:
    clock = _Clock()
    th = LoginThrottle(clock)
    for i in range(TOTAL):  # each from an address of its own: no client is over its share
        assert th.wait(f"c{i}") == 0
        th.failed(f"c{i}")
    assert th.wait("someone-new") == TOTAL_REFILL_S
    clock.t += TOTAL_REFILL_S
    assert th.wait("someone-new") == 0


# -- ended sessions ----------------------------------------------------------------------------


def test_a_session_ended_on_one_process_is_ended_on_every_one_sharing_the_store() -> None:
    async def run() -> tuple[bool, bool, bool, bool]:
        store = MemoryStore()
        here, there = Sessions(store), Sessions(store)  # two workers, one store
        now = time.time()
        s, other = (verify(ADMIN, issue(ADMIN, now, "ops"), now) for _ in "ab")
        assert s is not None and other is not None and s.sid and s.sid != other.sid
        before = await there.ended(s)
        await here.end(s)
        return before, await here.ended(s), await there.ended(s), await there.ended(other)

    assert asyncio.run(run()) == (False, True, True, False)


# -- real processes ----------------------------------------------------------------------------


class _Keep(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *a: Any, **kw: Any) -> None:
        return None  # keep the 303 and its headers


def _send(
    url: str, form: dict[str, str] | None = None, **headers: str
) -> tuple[int, dict[str, str], str]:
    data = urllib.parse.urlencode(form).encode() if form is not None else None
    hdrs = {k.replace("_", "-"): v for k, v in headers.items()}
    req = urllib.request.Request(url, data=data, headers=hdrs, method="POST" if form else "GET")
    try:
        with urllib.request.build_opener(_Keep).open(req, timeout=10) as r:
            return r.status, dict(r.headers), r.read().decode()
    except urllib.error.HTTPError as e:
        with e:
            return e.code, dict(e.headers), e.read().decode()


def _login(admin: str, **headers: str) -> tuple[str, str]:
    """(the cookie as a browser sends it, the Set-Cookie header)."""
    st, h, _ = _send(f"{admin}/console/login", {"token": ADMIN, "name": "ops"}, **headers)
    assert st == 303, st
    return h["set-cookie"].split(";", 1)[0], h["set-cookie"]


def _csrf(admin: str, cookie: str) -> str:
    st, _, page = _send(f"{admin}/console/tiers", cookie=cookie)
    assert st == 200
    m = re.search(r'name="csrf" value="([^"]+)"', page)
    assert m is not None
    return m.group(1)


def _page(admin: str, cookie: str) -> int:
    return _send(f"{admin}/console/tiers", cookie=cookie)[0]


@pytest.fixture(scope="module")
def pair(
    engines: dict[str, str], prefix: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[Proc]]:
    """Two replicas (the first with two workers) sharing one Redis; the first trusts the
    proxy at 127.0.0.1 (the tests' own requests play it)."""
    tmp = tmp_path_factory.mktemp("gw")
    env = tenancy_env(prefix, REDIS)
    a, _ = start_gateway(
        tmp,
        rules_for_tests(),
        engines,
        {**env, "GATEWAY_WORKERS": "2", "GATEWAY_TRUSTED_PROXIES": "127.0.0.1"},
    )
    b, _ = start_gateway(tmp, rules_for_tests(), engines, env)
    yield [a, b]
    a.stop()
    b.stop()


@pytest.mark.processes
def test_a_logged_out_session_cookie_is_refused_everywhere(pair: list[Proc]) -> None:
    a, b = pair[0].admin, pair[1].admin
    cookie, _ = _login(a)
    copy = cookie  # what someone who saw the cookie kept
    assert [_page(a, copy) for _ in range(4)] + [_page(b, copy)] == [200] * 5
    st, h, _ = _send(f"{a}/console/logout", {"csrf": _csrf(a, cookie)}, cookie=cookie)
    assert st == 303 and h["location"] == "/console/login"
    assert "gateway_console=" in h["set-cookie"] and "Max-Age=0" in h["set-cookie"]
    # every worker of this replica (new connections land on either) and the other replica
    assert [_page(a, copy) for _ in range(8)] + [_page(b, copy)] == [303] * 9
    assert _send(f"{a}/admin/live", cookie=copy)[0] == 401  # the polled API too
    assert _send(f"{b}/admin/live", cookie=copy)[0] == 401
    # another session goes on, and a new login works
    assert _page(a, _login(a)[0]) == 200


@pytest.mark.processes
def test_the_cookie_is_secure_over_tls_through_a_trusted_proxy_only(pair: list[Proc]) -> None:
    a, b = pair[0].admin, pair[1].admin
    assert "Secure" in _login(a, x_forwarded_proto="https")[1]  # 127.0.0.1 is trusted at a
    assert "Secure" not in _login(a, x_forwarded_proto="http")[1]
    assert "Secure" not in _login(a)[1]
    assert "Secure" not in _login(b, x_forwarded_proto="https")[1]  # b trusts no proxy


@pytest.mark.processes
def test_failed_logins_are_throttled_with_a_clear_page(pair: list[Proc]) -> None:
    b = pair[1].admin  # one process: one set of buckets
    wrong = {"token": "not-the-admin-token-0123456789", "name": ""}
    got = [_send(f"{b}/console/login", wrong)[0] for _ in range(PER_CLIENT)]
    assert got == [401] * PER_CLIENT
    st, h, page = _send(f"{b}/console/login", wrong)
    assert st == 429 and 1 <= int(h["retry-after"]) <= CLIENT_REFILL_S
    assert "Too many failed logins" in page and "try again in" in page
    # the right token is not even looked at while throttled: no oracle for a guesser
    st, h, _ = _send(f"{b}/console/login", {"token": ADMIN, "name": ""})
    assert st == 429 and "set-cookie" not in {k.lower() for k in h}
    # the admin API's Bearer token is not throttled
    req = urllib.request.Request(f"{b}/admin/live", headers={"Authorization": f"Bearer {ADMIN}"})
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.status == 200


@pytest.mark.processes
def test_behind_a_trusted_proxy_each_client_has_its_own_share(
    engines: dict[str, str], tmp_path: Path
) -> None:
    """One process trusting 127.0.0.1: clients told apart by X-Forwarded-For; all of them
    together stop at the total."""
    env = {"GATEWAY_ADMIN_TOKEN": ADMIN, "GATEWAY_TRUSTED_PROXIES": "127.0.0.1"}
    proc, _ = start_gateway(tmp_path, rules_for_tests(), engines, env)
    try:
        admin = proc.admin
        wrong = {"token": "not-the-admin-token-0123456789", "name": ""}

        def attempt(client: str) -> int:
            return _send(f"{admin}/console/login", wrong, x_forwarded_for=client)[0]

        assert [attempt("198.51.100.1") for _ in range(PER_CLIENT + 1)][-2:] == [401, 429]
        assert attempt("198.51.100.2") == 401  # another client still may
        statuses = [attempt(f"203.0.113.{i}") for i in range(TOTAL)]
        assert statuses[: TOTAL - PER_CLIENT - 2] == [401] * (TOTAL - PER_CLIENT - 2)
        assert statuses[-1] == 429  # the total is spent, whoever asks
    finally:
        proc.stop()
