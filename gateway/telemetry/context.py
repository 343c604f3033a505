"""The request being served, for log lines written below the server (the request id).

The server sets it once per request; tasks started for that request (hedges, shadows)
inherit it, as asyncio copies the context into every task it creates.
"""

from __future__ import annotations

from contextvars import ContextVar

REQUEST_ID: ContextVar[str] = ContextVar("gateway_request_id", default="-")
