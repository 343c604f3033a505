"""The simulator's command line (``python -m engines.sim``, ``gateway engines sim``) and
its process: serve one replica until SIGINT or SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
from collections.abc import Callable

from aiohttp import web

from engines.sim.config import SimConfig
from engines.sim.faults import FAULTS
from engines.sim.server import SimServer

DESCRIPTION = "An SGLang-shaped replica simulator: OpenAI API, load, faults, metrics, no GPU."


def _fault_rate(spec: str) -> tuple[str, float]:
    name, sep, rate = spec.partition("=")
    if not sep or name not in FAULTS:
        raise argparse.ArgumentTypeError(f"expected NAME=RATE with NAME in {', '.join(FAULTS)}")
    try:
        value = float(rate)
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad rate {rate!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError("RATE must be within [0, 1]")
    return name, value


def _positive(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError("must be > 0")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="engines.sim", description=DESCRIPTION)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--profile", choices=("highspeed", "standard"), default="highspeed")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--model", "--served-model-name", dest="model", default="")
    p.add_argument("--time-scale", type=_positive, default=1.0, help="wall s per model s")
    p.add_argument("--max-running-requests", type=int, default=None)
    p.add_argument("--max-total-tokens", type=int, default=None, help="KV pool / cache size")
    p.add_argument("--context-length", type=int, default=131072)
    p.add_argument("--fault", type=_fault_rate, action="append", default=[], metavar="NAME=RATE")
    p.add_argument(
        "--fault-draw",
        choices=("order", "content"),
        default="order",
        help="draw rate faults in request order, or from each request's content (the same "
        "request always draws the same faults: side-by-side targets get the same ones)",
    )
    p.add_argument("--retry-after", type=_positive, default=1.0, help="seconds, for 429")
    return p


def parse_args(argv: list[str] | None = None) -> SimConfig:
    a = build_parser().parse_args(argv)
    return SimConfig(
        port=a.port,
        host=a.host,
        profile=a.profile,
        seed=a.seed,
        model=a.model,
        time_scale=a.time_scale,
        max_running_requests=a.max_running_requests,
        max_total_tokens=a.max_total_tokens,
        context_length=a.context_length,
        faults=dict(a.fault),
        fault_draw=a.fault_draw,
        retry_after=a.retry_after,
    )


async def serve(cfg: SimConfig, ready: Callable[[], None] | None = None) -> None:
    """Serve until SIGINT/SIGTERM."""
    server = SimServer(cfg)
    runner = web.AppRunner(
        server.app(), access_log=None, handler_cancellation=True, shutdown_timeout=0.5
    )
    await runner.setup()
    await web.TCPSite(runner, cfg.host, cfg.port, shutdown_timeout=0.5).start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    print(
        f"sim: {cfg.profile} replica {cfg.served_model_name!r} on http://{cfg.host}:{cfg.port}"
        f" (seed {cfg.seed}, time scale {cfg.time_scale:g})",
        flush=True,
    )
    if ready is not None:
        ready()
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


def sim_main(argv: list[str] | None = None) -> int:
    """``python -m engines.sim --port P ...``; returns the exit status."""
    cfg = parse_args(argv)
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is optional
        asyncio.run(serve(cfg))
    else:
        uvloop.run(serve(cfg))
    return 0
