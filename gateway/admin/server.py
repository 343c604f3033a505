"""The admin listener: uvicorn serving the admin app inside the gateway's own event loop.

The data plane's loop (aiohttp on uvloop) is already running; uvicorn is started as one
more task on it, on a socket bound here (a port in use is a clear error at start-up, not
uvicorn's ``sys.exit``). Signals stay aiohttp's: SIGTERM drains the data plane, whose
shutdown stops this server.

Its connections live under the process's one connection policy, as the data listener's
do (:mod:`gateway.serve`: the settings ``idle_timeout``, ``body_timeout`` and
``max_connections``). uvicorn's own keep-alive timer stops at a connection's first byte, so
a head sent a byte at a time, or a connection that never sends one, was kept for as long
as the client liked (3,000 of them held 3,000 open files past 40 s). :class:`_Policed` adds
the head and body deadlines and the connection cap.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator
from typing import Any, ClassVar

import uvicorn
from starlette.types import ASGIApp
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from gateway.errors import ServiceUnavailable, closing_response
from gateway.settings import Settings

FULL = closing_response(
    ServiceUnavailable(
        "Too many connections to the admin API; retry in a moment.", code="overloaded"
    ),
    ("Retry-After: 1",),
)


class _Policed(HttpToolsProtocol):
    """uvicorn's HTTP/1.1 connection under the policy: a complete request head within
    ``idle_timeout`` of the connection's opening or its last answer, a body within
    ``body_timeout`` of its head, at most ``max_connections`` open (one more: a 503)."""

    policy: ClassVar[Settings]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._refused = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        if len(self.connections) >= self.policy.max_connections:
            self._refused = True
            transport.write(FULL)
            transport.close()
            return
        super().connection_made(transport)
        self._arm(self.policy.idle_timeout)

    def connection_lost(self, exc: Exception | None) -> None:
        self._arm(None)
        if not self._refused:
            super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if not self._refused:
            super().data_received(data)

    def on_headers_complete(self) -> None:
        self._arm(self.policy.body_timeout)  # the head is complete: now its body
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._arm(None)  # the request is all here; the app takes its own time
        super().on_message_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.timeout_keep_alive_task is not None:  # idle now: the next head must come
            self._arm(self.policy.idle_timeout)

    def _arm(self, seconds: float | None) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        self._deadline = None if seconds is None else self.loop.call_later(seconds, self._cut)

    def _cut(self) -> None:
        self._deadline = None
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()


def policed(policy: Settings) -> type[asyncio.Protocol]:
    """uvicorn's protocol class for connections under ``policy``'s connection settings."""
    return type("Policed", (_Policed,), {"policy": policy})


class AdminListenError(RuntimeError):
    """The admin listener could not be opened (address in use, unknown host, ...)."""


class _InLoopServer(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # the process's signal handling is the data plane's


def bind(host: str, port: int, reuse_port: bool = False) -> socket.socket:
    """A listening TCP socket on ``host:port`` (port 0: any free port); ``reuse_port``:
    shared with the other workers of a supervisor (SO_REUSEPORT)."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        sock = socket.create_server((host, port), family=family, backlog=128, reuse_port=reuse_port)
    except OSError as e:
        raise AdminListenError(
            f"the admin API cannot listen on {host}:{port}: {e.strerror or e} "
            "(set GATEWAY_ADMIN_PORT or --admin-port)"
        ) from e
    sock.setblocking(False)
    return sock


class AdminServer:
    """``await start(host, port)`` returns once it accepts connections; ``await stop()``."""

    def __init__(self, app: ASGIApp, policy: Settings):
        self.app = app
        self.policy = policy
        self.address: tuple[str, int] | None = None
        self._server: _InLoopServer | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self, host: str, port: int, sock: socket.socket | None = None) -> None:
        sock = sock if sock is not None else bind(host, port)
        config = uvicorn.Config(
            self.app,
            host=host,
            port=port,
            lifespan="off",
            log_level="warning",
            http=policed(self.policy),
            timeout_keep_alive=self.policy.idle_timeout,  # type: ignore[arg-type]
            log_config=None,  # uvicorn's records go to the gateway's (JSON) root logger
            access_log=False,
            ws="none",
            proxy_headers=False,  # the audit log's "from" is the peer, as before
            server_header=False,
            timeout_graceful_shutdown=5,
        )
        server = _InLoopServer(config)
        task = asyncio.get_running_loop().create_task(server.serve(sockets=[sock]))
        while not server.started:
            if task.done():
                sock.close()
                raise AdminListenError(
                    f"the admin API did not start on {host}:{port}: {task.exception()!r}"
                )
            await asyncio.sleep(0.005)
        name = sock.getsockname()
        self.address = (str(name[0]), int(name[1]))
        self._server, self._task = server, task

    async def stop(self) -> None:
        if self._server is None or self._task is None:
            return
        self._server.should_exit = True
        await self._task
        self._server = self._task = None
