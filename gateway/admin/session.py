"""The operator console's login session: a signed, expiring cookie, ended at logout.

The console's pages are plain navigations and form posts, which cannot carry an
``Authorization`` header, so a browser that logged in with the admin token keeps a
session cookie instead (``HttpOnly``: no script can read it; ``SameSite=Strict``: no
other site's page makes the browser send it). The cookie holds
``<expires>.<nonce>.<name>.<mac>``, the MAC an HMAC-SHA256 keyed by the admin token, so:

* the token itself never sits in the browser;
* every worker of a gateway (they share the admin port) verifies it alike;
* changing ``GATEWAY_ADMIN_TOKEN`` ends every session at once.

A logout ends its session on the server too (:class:`Sessions`): the nonce is the
session's id, written to the store's list of ended sessions (kept until the cookie would
have expired), which every worker and replica sharing the store reads, so a copy of the
cookie made before the logout is refused everywhere.

Forms carry a CSRF token derived from the session (:func:`csrf_token`) as a second guard.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import secrets
import time
from dataclasses import dataclass

from gateway.errors import StoreUnavailable
from gateway.store.base import SessionStore
from gateway.store.sessions import remember

COOKIE = "gateway_console"
TTL_S = 8 * 3600  # a working day; log in again after it
NAME_MAX = 64  # the operator's name, for the audit log

log = logging.getLogger("gateway.admin")


@dataclass(frozen=True, slots=True)
class Session:
    expires: int
    name: str
    """Who logged in, as they said (the audit log's ``who``); "" when they gave none."""
    sid: str = ""
    """The session's id (its random nonce): what a logout ends."""


def _mac(token: str, what: str) -> str:
    digest = hmac.new(token.encode(), what.encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def _b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def _unb64(text: str) -> str:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode()


def clean_name(name: str) -> str:
    """A name fit for the audit log and a header: printable ASCII, ``NAME_MAX`` at most."""
    return "".join(c for c in name if c.isascii() and c.isprintable()).strip()[:NAME_MAX]


def issue(token: str, now: float, name: str = "", ttl: float = TTL_S) -> str:
    """A new session cookie value for ``name``, valid ``ttl`` seconds from ``now``."""
    payload = f"{int(now + ttl)}.{secrets.token_urlsafe(12)}.{_b64(clean_name(name))}"
    return f"{payload}.{_mac(token, 'session:' + payload)}"


def verify(token: str, value: str | None, now: float) -> Session | None:
    """The session a cookie value stands for, or None: forged, malformed or expired."""
    if not value or len(value) > 512:
        return None
    payload, _, mac = value.rpartition(".")
    if not hmac.compare_digest(mac.encode(), _mac(token, "session:" + payload).encode()):
        return None
    expires, _, rest = payload.partition(".")
    sid, _, name = rest.partition(".")
    try:
        session = Session(int(expires), _unb64(name), sid)
    except (ValueError, UnicodeDecodeError):
        return None
    return session if session.expires > now else None


def csrf_token(token: str, value: str) -> str:
    """The CSRF token of the session ``value``: forms send it back, checked in constant time."""
    return _mac(token, "csrf:" + value)


class Sessions:
    """Which sessions a logout ended: this process's own list first, then the store's,
    which every process sharing the store writes and reads.

    A store that cannot be asked does not lock the operators out (the console is how they
    watch an outage): a session ended through this process stays ended, one ended on
    another replica works here again only until the store answers."""

    def __init__(self, store: SessionStore | None):
        self._store = store
        self._ended: dict[str, float] = {}  # sid -> when the session expires anyway

    async def ended(self, s: Session) -> bool:
        if self._ended.get(s.sid, 0.0) >= time.time():
            return True
        if self._store is None:
            return False
        try:
            return await self._store.session_ended(s.sid)
        except StoreUnavailable:
            return False

    async def end(self, s: Session) -> None:
        remember(self._ended, s.sid, s.expires, time.time())
        if self._store is None:
            return
        try:
            await self._store.end_session(s.sid, s.expires)
        except StoreUnavailable as e:
            log.warning(
                "console logout: the store did not take it (%s); the session is ended on "
                "this process only",
                e,
            )
