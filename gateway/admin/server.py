"""The admin listener: uvicorn serving the admin app inside the gateway's own event loop.

The data plane's loop (aiohttp on uvloop) is already running; uvicorn is started as one
more task on it, on a socket bound here (a port in use is a clear error at start-up, not
uvicorn's ``sys.exit``). Signals stay aiohttp's: SIGTERM drains the data plane, whose
shutdown stops this server.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator

import uvicorn
from starlette.types import ASGIApp


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

    def __init__(self, app: ASGIApp):
        self.app = app
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
