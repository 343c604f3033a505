"""The operator console's login session: a signed, expiring cookie, no server-side state.

The console's pages are plain navigations and form posts, which cannot carry an
``Authorization`` header, so a browser that logged in with the admin token keeps a
session cookie instead (``HttpOnly``: no script can read it; ``SameSite=Strict``: no
other site's page makes the browser send it). The cookie holds
``<expires>.<nonce>.<name>.<mac>``, the MAC an HMAC-SHA256 keyed by the admin token, so:

* the token itself never sits in the browser;
* every worker of a gateway (they share the admin port) verifies it alike;
* changing ``GATEWAY_ADMIN_TOKEN`` ends every session at once.

Forms carry a CSRF token derived from the session (:func:`csrf_token`) as a second guard.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass

COOKIE = "gateway_console"
TTL_S = 8 * 3600  # a working day; log in again after it
NAME_MAX = 64  # the operator's name, for the audit log


@dataclass(frozen=True, slots=True)
class Session:
    expires: int
    name: str
    """Who logged in, as they said (the audit log's ``who``); "" when they gave none."""


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
    _, _, name = rest.partition(".")
    try:
        session = Session(int(expires), _unb64(name))
    except (ValueError, UnicodeDecodeError):
        return None
    return session if session.expires > now else None


def csrf_token(token: str, value: str) -> str:
    """The CSRF token of the session ``value``: forms send it back, checked in constant time."""
    return _mac(token, "csrf:" + value)
