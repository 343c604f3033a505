"""Pieces shared by the benchmark's processes: the request every target gets, loopback
guard, nearest-rank percentiles and the event loop runner. Stdlib only (uvloop if present),
so the fake upstream, the relay and the load generator stay self-contained."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Coroutine, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import aiohttp

try:
    import uvloop
except ImportError:  # pragma: no cover - uvloop is a gateway dependency on POSIX
    uvloop = None  # type: ignore[assignment]

T = TypeVar("T")

CHAT_PATH = "/v1/chat/completions"
PROMPT = "Hello, how are you? Please answer briefly."
"""Classified by the gateway as plain chat: default rule, tier highspeed, default checks."""
ANSWER = "I am doing well, thank you for asking! How can I help you today?"
"""The fake upstream's answer; a stream carries it as its first tokens (one per word)."""
ANSWER_TOKENS = len(ANSWER.split(" "))
"""What a non-streamed request asks for (``max_tokens``): the gateway, which asks engines
for a stream, then reads the same 14 tokens that the direct and relay targets get as one
JSON object (a 50-token stream against a 14-token object would measure the answers)."""


def chat_body(stream: bool, model: str = "auto", max_tokens: int | None = None) -> bytes:
    """The one-message chat request of every measurement (as in the peer harness). The fake
    engine sends at most ``max_tokens`` content chunks (64 on a stream unless given)."""
    if max_tokens is None:
        max_tokens = 64 if stream else ANSWER_TOKENS
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": max_tokens,
    }
    if stream:
        body["stream"] = True
    return json.dumps(body, separators=(",", ":")).encode()


async def tenant_key(
    http: aiohttp.ClientSession, admin: str, token: str, policy: dict[str, Any] | None = None
) -> str:
    """A new tenant's API key, made through the admin API at ``admin`` with ``token``."""
    auth = {"Authorization": f"Bearer {token}"}
    tenant_in: dict[str, Any] = {"name": "bench"}
    if policy is not None:
        tenant_in["policy"] = policy
    async with http.post(f"{admin}/admin/tenants", json=tenant_in, headers=auth) as r:
        tenant = (await r.json())["id"]
    async with http.post(
        f"{admin}/admin/tenants/{tenant}/keys", json={"name": "k"}, headers=auth
    ) as r:
        return str((await r.json())["key"])


def require_loopback(host: str) -> None:
    """Exit unless ``host`` is a loopback address: the benchmark never talks to anything else."""
    if host not in ("localhost", "::1") and not host.startswith("127."):
        raise SystemExit(f"refusing non-loopback host {host!r}: loopback only")


def free_port() -> int:
    """A TCP port that was free a moment ago on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def percentile(sorted_vals: Sequence[float], p: float) -> float | None:
    """Nearest-rank percentile of already sorted values (None when there are none)."""
    if not sorted_vals:
        return None
    k = round(p / 100.0 * len(sorted_vals) + 0.5) - 1
    return sorted_vals[max(0, min(len(sorted_vals) - 1, k))]


def loop_name() -> str:
    return "uvloop" if uvloop is not None else "asyncio"


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on uvloop when it is installed, else on the stdlib loop."""
    if uvloop is not None:
        return uvloop.run(coro)
    return asyncio.run(coro)  # pragma: no cover
