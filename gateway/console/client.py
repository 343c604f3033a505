"""The admin API as the console sees it: called in-process over ASGI with the admin token.

The console never reaches the store or the rules itself; it asks the admin API, so a
page does exactly what ``curl`` would (validation, audit log, publishing to every
replica) and shows the API's own errors. The audit log records the operator's session
name and the browser's address.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Annotated, Any

import httpx
from fastapi import Depends, Request

from gateway.admin.deps import get_gateway
from gateway.console.auth import SessionDep

log = logging.getLogger("gateway.console")


class ApiError(Exception):
    """An admin API call that failed: its status and the envelope's message and errors."""

    def __init__(
        self, status: int, message: str, errors: list[str] | None = None, code: str | None = None
    ):
        super().__init__(message)
        self.status = status
        self.message = message
        self.errors = errors or []
        self.code = code


class Api:
    def __init__(self, client: httpx.AsyncClient):
        self._client = client

    async def call(self, method: str, path: str, **kw: Any) -> Any:
        """The decoded answer (None for 204); :class:`ApiError` for an error status."""
        try:
            r = await self._client.request(method, path, **kw)
        except Exception:
            log.exception("console: the admin API failed on %s %s", method, path)
            raise ApiError(500, "The admin API failed; see the gateway's log.") from None
        if r.status_code == 204:
            return None
        try:
            body = r.json()
        except ValueError:
            body = None
        if r.status_code >= 400:
            err = body.get("error", {}) if isinstance(body, dict) else {}
            msg = str(err.get("message") or f"HTTP {r.status_code}")
            raise ApiError(r.status_code, msg, err.get("errors"), err.get("code"))
        return body

    async def raw(self, method: str, path: str) -> bytes:
        """The answer's bytes (an export); :class:`ApiError` for an error status."""
        try:
            r = await self._client.request(method, path)
        except Exception:
            log.exception("console: the admin API failed on %s %s", method, path)
            raise ApiError(500, "The admin API failed; see the gateway's log.") from None
        if r.status_code >= 400:
            raise ApiError(r.status_code, f"HTTP {r.status_code}")
        return r.content

    async def get(self, path: str, **params: Any) -> Any:
        return await self.call("GET", path, params=params)

    async def post(self, path: str, json: Any = None) -> Any:
        return await self.call("POST", path, json=json)

    async def put_yaml(self, path: str, text: str) -> Any:
        return await self.call(
            "PUT", path, content=text.encode(), headers={"content-type": "application/yaml"}
        )

    async def post_yaml(self, path: str, text: str) -> Any:
        return await self.call(
            "POST", path, content=text.encode(), headers={"content-type": "application/yaml"}
        )


async def admin_api(request: Request, session: SessionDep) -> AsyncIterator[Api]:
    token = get_gateway(request).settings.admin_token
    assert token is not None  # a session exists only where a token is set
    peer = request.client
    transport = httpx.ASGITransport(
        app=request.app, client=(peer.host, peer.port) if peer else ("127.0.0.1", 0)
    )
    headers = {
        "authorization": f"Bearer {token.get_secret_value()}",
        "x-admin-user": f"console:{session.name}" if session.name else "console",
    }
    async with httpx.AsyncClient(
        transport=transport, base_url="http://admin", headers=headers, timeout=30
    ) as client:
        yield Api(client)


ApiDep = Annotated[Api, Depends(admin_api)]
