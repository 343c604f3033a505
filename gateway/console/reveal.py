"""A new API key shown once, on a page that can be refreshed safely (Post/Redirect/Get).

Creating or rotating a key answers 303 to the tenant's page with ``?shown=<token>.<pad>``;
that page takes the key from the store (:class:`~gateway.store.base.RevealStore`: read
once, then gone; gone after :data:`REVEAL_S` unread too) and shows it. A refresh finds it
taken and says so; it never mints another key. Any worker process can serve the page.

The console keeps this one thing in the store itself, and not as plaintext: the key is
stored XOR a one-time pad of random bytes that only the redirect's URL carries. The stored
record alone is noise, and the URL alone is useless once the record has been taken.
"""

from __future__ import annotations

import base64
import secrets
from typing import Annotated, Any

import orjson
from fastapi import Depends, Request

from gateway.admin.deps import get_gateway
from gateway.store.base import RevealStore

REVEAL_S = 300.0  # a new key not looked at within this is gone (rotate it to get another)


def _xor(a: bytes, b: bytes) -> bytes:
    return bytes(x ^ y for x, y in zip(a, b, strict=True))


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


async def keep(store: RevealStore, new_key: dict[str, Any]) -> str:
    """Keep ``new_key`` (the admin API's answer) for one showing; the ``shown`` value of
    the page that shows it."""
    plain = str(new_key["key"]).encode()
    pad = secrets.token_bytes(len(plain))
    token = secrets.token_urlsafe(18)
    doc = orjson.dumps({**new_key, "key": _xor(plain, pad).hex()})
    await store.put_reveal(token, doc, REVEAL_S)
    return f"{token}.{_b64(pad)}"


async def take(store: RevealStore, shown: str) -> dict[str, Any] | None:
    """The key kept under ``shown``, once; None when it was taken, expired or is garbled."""
    token, _, pad_text = shown.partition(".")
    if not token or not pad_text:
        return None
    doc = await store.take_reveal(token)
    if doc is None:
        return None
    try:
        new_key: dict[str, Any] = orjson.loads(doc)
        masked, pad = bytes.fromhex(str(new_key["key"])), _unb64(pad_text)
        new_key["key"] = _xor(masked, pad).decode()
    except (ValueError, KeyError, orjson.JSONDecodeError):
        return None
    return new_key


def reveals(request: Request) -> RevealStore:
    store = get_gateway(request).store
    assert store is not None  # the console runs only with an admin token, hence a store
    return store


RevealsDep = Annotated[RevealStore, Depends(reveals)]
