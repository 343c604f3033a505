"""Minimal pass-through relay: the "physical limit" of one Python proxy hop.

    python -m evals.bench.relay --port 18100 --upstream http://127.0.0.1:18000

aiohttp server and pooled aiohttp client on uvloop, the same stack as the gateway. Forwards
method, path, the body (unchanged) and a few headers; relays a stream chunk by chunk as it
arrives. No JSON parsing, no auth, no logging. Exits by itself after ``--max-seconds``.
Adapted from the team's peer harness.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from urllib.parse import urlsplit

import aiohttp
from aiohttp import web

from evals.bench.common import loop_name, require_loopback, run

FORWARD = frozenset({"content-type", "authorization", "accept"})
HOP_BY_HOP = frozenset(
    {"content-length", "transfer-encoding", "connection", "keep-alive", "content-encoding"}
)
SESSION = web.AppKey("session", aiohttp.ClientSession)
UPSTREAM = web.AppKey("upstream", str)


async def relay(request: web.Request) -> web.StreamResponse:
    body = await request.read()
    headers = {k: v for k, v in request.headers.items() if k.lower() in FORWARD}
    url = request.app[UPSTREAM] + request.path_qs
    async with request.app[SESSION].request(request.method, url, data=body, headers=headers) as up:
        out_headers = {k: v for k, v in up.headers.items() if k.lower() not in HOP_BY_HOP}
        if not up.headers.get("content-type", "").startswith("text/event-stream"):
            return web.Response(status=up.status, body=await up.read(), headers=out_headers)
        resp = web.StreamResponse(status=up.status, headers=out_headers)
        await resp.prepare(request)
        async for chunk in up.content.iter_any():
            await resp.write(chunk)
        await resp.write_eof()
        return resp


async def serve(host: str, port: int, upstream: str, max_seconds: float) -> None:
    app = web.Application()
    app[UPSTREAM] = upstream.rstrip("/")
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=60),
        timeout=aiohttp.ClientTimeout(total=60),
        auto_decompress=False,
    )
    app[SESSION] = session
    app.router.add_route("*", "/{tail:.*}", relay)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port, backlog=4096).start()
        print(f"relay http://{host}:{port} -> {app[UPSTREAM]} loop={loop_name()}", flush=True)
        await asyncio.sleep(max_seconds)  # safety bound
    finally:
        await session.close()
        await runner.cleanup()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=18100)
    ap.add_argument("--upstream", default="http://127.0.0.1:18000")
    ap.add_argument("--max-seconds", type=float, default=3600.0, help="exit after this long")
    a = ap.parse_args(argv)
    require_loopback(a.host)
    require_loopback(urlsplit(a.upstream).hostname or "")
    with contextlib.suppress(KeyboardInterrupt):
        run(serve(a.host, a.port, a.upstream, a.max_seconds))


if __name__ == "__main__":
    main()
