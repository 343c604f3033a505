"""Fake OpenAI-compatible upstream for the proxy benchmark (asyncio Protocol, uvloop if present).

    python -m evals.bench.fake_upstream --port 18000 [--chunks 50] [--chunk-delay-ms 0]

Hand-rolled HTTP/1.1 with keep-alive, so that it is never the bottleneck (a web framework
would cost more than the proxies under test):

* ``POST /v1/chat/completions``: a fixed chat completion whose ``choices[0].message.content``
  is a plain sentence (14 words) with ``finish_reason`` "stop", so the gateway's quality
  checks pass. With ``"stream": true``, an SSE stream instead: a role chunk, ``--chunks``
  content chunks (at most the request's ``max_tokens``; the sentence's words first, then
  ``wordN`` filler), a finish chunk, a usage chunk when ``stream_options.include_usage``,
  then ``data: [DONE]``. So a request with ``max_tokens: 14`` gets the same answer either
  way.
  The events are built once and written in one go, or ``--chunk-delay-ms`` apart.
* ``GET /v1/models`` and ``GET /health``.

The process exits by itself after ``--max-seconds``. Adapted from the team's peer harness.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
from dataclasses import dataclass, field
from typing import Any, cast

from evals.bench.common import ANSWER, ANSWER_TOKENS, CHAT_PATH, loop_name, require_loopback, run

MODEL = "fake-model"
WORDS = [w + " " for w in ANSWER.split(" ")[:-1]] + ANSWER.split(" ")[-1:]  # ANSWER_TOKENS
_BASE = {
    "id": "chatcmpl-fake0001",
    "created": 1700000000,
    "model": MODEL,
    "system_fingerprint": "fp_fake",
}


def _json(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


COMPLETION_BODY = _json(
    {
        **_BASE,
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": ANSWER},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": 12,
            "completion_tokens": ANSWER_TOKENS,
            "total_tokens": 12 + ANSWER_TOKENS,
        },
    }
)
MODELS_BODY = _json(
    {
        "object": "list",
        "data": [{"id": MODEL, "object": "model", "created": 1700000000, "owned_by": "bench"}],
    }
)
STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\n"
    b"Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n"
)


def http_response(status: bytes, ctype: bytes, body: bytes, keep_alive: bool = True) -> bytes:
    return (
        b"HTTP/1.1 "
        + status
        + b"\r\nContent-Type: "
        + ctype
        + b"\r\nContent-Length: "
        + str(len(body)).encode()
        + (b"" if keep_alive else b"\r\nConnection: close")
        + b"\r\n\r\n"
        + body
    )


def _sse_chunk(payload: bytes) -> bytes:
    """One SSE event in its own HTTP/1.1 chunk."""
    data = b"data: " + payload + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(data), data)


def stream_events(n_chunks: int, include_usage: bool) -> list[bytes]:
    """The chunked-encoded events of one stream, the terminating zero chunk last."""

    def chunk(choices: list[dict[str, Any]], **extra: Any) -> bytes:
        return _sse_chunk(
            _json({**_BASE, "object": "chat.completion.chunk", "choices": choices, **extra})
        )

    def choice(delta: dict[str, str], finish: str | None = None) -> list[dict[str, Any]]:
        return [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]

    ev = [chunk(choice({"role": "assistant", "content": ""}))]
    words = [WORDS[i] if i < len(WORDS) else f" word{i}" for i in range(n_chunks)]
    ev += [chunk(choice({"content": w})) for w in words]
    ev.append(chunk(choice({}, "stop")))
    if include_usage:
        ev.append(
            chunk(
                [],
                usage={
                    "prompt_tokens": 12,
                    "completion_tokens": n_chunks,
                    "total_tokens": 12 + n_chunks,
                },
            )
        )
    ev += [_sse_chunk(b"[DONE]"), b"0\r\n\r\n"]
    return ev


@dataclass
class Config:
    chunks: int
    delay_s: float
    streams: dict[tuple[bool, int], list[bytes]] = field(default_factory=dict)

    def events(self, include_usage: bool, max_tokens: Any) -> list[bytes]:
        n = self.chunks
        if isinstance(max_tokens, int) and 0 < max_tokens < n:
            n = max_tokens
        ev = self.streams.get((include_usage, n))
        if ev is None:
            ev = self.streams[(include_usage, n)] = stream_events(n, include_usage)
        return ev


class UpstreamProtocol(asyncio.Protocol):
    """One client connection: parses pipelined requests and answers them in order."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.t: asyncio.Transport | None = None
        self.buf = b""
        self.busy = False  # a delayed stream is being written; park further requests

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.t = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if not self.busy:
            self._process()

    def _write(self, data: bytes) -> None:
        assert self.t is not None
        self.t.write(data)

    def _process(self) -> None:
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            lines = self.buf[:end].decode("latin-1").split("\r\n")
            try:
                method, target, _ = lines[0].split(" ", 2)
            except ValueError:
                self._write(http_response(b"400 Bad Request", b"text/plain", b"bad request", False))
                self._close()
                return
            hdrs = {}
            for ln in lines[1:]:
                k, _, v = ln.partition(":")
                hdrs[k.strip().lower()] = v.strip()
            pos = end + 4
            if "chunked" in hdrs.get("transfer-encoding", "").lower():
                body, pos = self._dechunk(pos)
                if body is None:
                    return  # need more data
            else:
                n = int(hdrs.get("content-length", "0") or 0)
                if len(self.buf) - pos < n:
                    return
                body, pos = self.buf[pos : pos + n], pos + n
            self.buf = self.buf[pos:]
            keep = hdrs.get("connection", "").lower() != "close"
            if not self._handle(method, target.split("?", 1)[0], body, keep):
                return  # a delayed stream is under way; it resumes parsing when done
            if not keep:
                self._close()
                return

    def _close(self) -> None:
        if self.t is not None:
            self.t.close()

    def _dechunk(self, pos: int) -> tuple[bytes | None, int]:
        out: list[bytes] = []
        b = self.buf
        while True:
            le = b.find(b"\r\n", pos)
            if le < 0:
                return None, pos
            size = int(b[pos:le].split(b";")[0], 16)
            if size == 0:
                te = b.find(b"\r\n", le + 2)  # trailers are not supported beyond an empty line
                return (None, pos) if te < 0 else (b"".join(out), te + 2)
            if len(b) < le + 2 + size + 2:
                return None, pos
            out.append(b[le + 2 : le + 2 + size])
            pos = le + 2 + size + 2

    def _handle(self, method: str, path: str, body: bytes, keep: bool) -> bool:
        """Answer one request; False when an asynchronous (delayed) stream was started."""
        if method == "POST" and path in (CHAT_PATH, "/chat/completions"):
            stream = include_usage = False
            max_tokens = None
            if b'"stream"' in body:
                try:
                    req = json.loads(body)
                except ValueError:
                    self._write(
                        http_response(
                            b"400 Bad Request", b"application/json", b'{"error":"bad json"}', keep
                        )
                    )
                    return True
                stream = bool(req.get("stream"))
                include_usage = bool((req.get("stream_options") or {}).get("include_usage"))
                max_tokens = req.get("max_tokens")
            if not stream:
                self._write(http_response(b"200 OK", b"application/json", COMPLETION_BODY, keep))
                return True
            ev = self.cfg.events(include_usage, max_tokens)
            if self.cfg.delay_s <= 0:
                self._write(STREAM_HEAD + b"".join(ev))
                return True
            self.busy = True
            asyncio.get_running_loop().create_task(self._slow_stream(ev, keep))
            return False
        if method == "GET" and path in ("/v1/models", "/models"):
            self._write(http_response(b"200 OK", b"application/json", MODELS_BODY, keep))
        elif method == "GET" and path == "/health":
            self._write(http_response(b"200 OK", b"text/plain", b"ok", keep))
        else:
            self._write(
                http_response(b"404 Not Found", b"application/json", b'{"error":"not found"}', keep)
            )
        return True

    async def _slow_stream(self, ev: list[bytes], keep: bool) -> None:
        assert self.t is not None
        try:
            self._write(STREAM_HEAD + ev[0])
            for e in ev[1:-2]:
                await asyncio.sleep(self.cfg.delay_s)
                if self.t.is_closing():
                    return
                self._write(e)
            self._write(ev[-2] + ev[-1])  # [DONE] and the terminating chunk together
        finally:
            self.busy = False
        if not keep:
            self._close()
        elif self.buf:
            self._process()


async def serve(
    host: str, port: int, cfg: Config, max_seconds: float, reuse_port: bool = False
) -> None:
    loop = asyncio.get_running_loop()
    srv = await loop.create_server(
        lambda: UpstreamProtocol(cfg),
        host,
        port,
        backlog=4096,
        reuse_address=True,
        reuse_port=reuse_port or None,
    )
    print(
        f"fake upstream http://{host}:{port} chunks={cfg.chunks} "
        f"delay_ms={cfg.delay_s * 1000:g} loop={loop_name()}",
        flush=True,
    )
    async with srv:
        await asyncio.sleep(max_seconds)  # safety bound: never outlive a forgotten run


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=18000)
    ap.add_argument("--chunks", type=int, default=50, help="content chunks per stream")
    ap.add_argument("--chunk-delay-ms", type=float, default=0.0)
    ap.add_argument("--max-seconds", type=float, default=3600.0, help="exit after this long")
    ap.add_argument("--reuse-port", action="store_true", help="share the port with others")
    a = ap.parse_args(argv)
    require_loopback(a.host)
    cfg = Config(a.chunks, a.chunk_delay_ms / 1000.0)
    with contextlib.suppress(KeyboardInterrupt):
        run(serve(a.host, a.port, cfg, a.max_seconds, a.reuse_port))


if __name__ == "__main__":
    main()
