"""The HTTP server stack alone: a fixed chat completion for every request, no upstream.

    taskset -c 0 python -m evals.bench.hello --stack aiohttp --port 18300 &
    taskset -c 1 python -m evals.bench.loadgen http://127.0.0.1:18300/v1/chat/completions -c 64

``aiohttp``: the gateway's data-plane server (an aiohttp handler that reads the body and
answers). ``protocol``: an ``asyncio.Protocol`` with httptools' parser, the least a Python
HTTP/1.1 server can do per request. What either answers per core bounds what replacing
the gateway's server side could gain (``docs/reports/bench-proxy.md``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib

import httptools
from aiohttp import web

from evals.bench.common import ANSWER, CHAT_PATH, require_loopback, run

BODY = (
    b'{"id":"chatcmpl-hello","object":"chat.completion","created":0,"model":"bench",'
    b'"choices":[{"index":0,"message":{"role":"assistant","content":"'
    + ANSWER.encode()
    + b'"},"finish_reason":"stop"}]}'
)
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"


class Answering(asyncio.Protocol):
    """One keep-alive connection: every complete request gets BODY."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]
        self.parser = httptools.HttpRequestParser(self)

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.transport.close()

    def on_message_complete(self) -> None:
        self.transport.write(HEAD % len(BODY) + BODY)


async def answer(request: web.Request) -> web.Response:
    await request.read()
    return web.Response(body=BODY, content_type="application/json")


async def serve(stack: str, host: str, port: int, max_seconds: float) -> None:
    if stack == "protocol":
        loop = asyncio.get_running_loop()
        server = await loop.create_server(Answering, host, port, backlog=4096)
        cleanup = server.close
    else:
        app = web.Application()
        app.router.add_post(CHAT_PATH, answer)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, host, port, backlog=4096).start()
        cleanup = None
    print(f"hello ({stack}) http://{host}:{port}{CHAT_PATH}", flush=True)
    try:
        await asyncio.sleep(max_seconds)  # safety bound
    finally:
        if cleanup is not None:
            cleanup()
        else:
            await runner.cleanup()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--stack", choices=("aiohttp", "protocol"), default="aiohttp")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=18300)
    ap.add_argument("--max-seconds", type=float, default=600.0, help="exit after this long")
    a = ap.parse_args(argv)
    require_loopback(a.host)
    with contextlib.suppress(KeyboardInterrupt):
        run(serve(a.stack, a.host, a.port, a.max_seconds))


if __name__ == "__main__":
    main()
