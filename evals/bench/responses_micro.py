"""Micro-benchmark of the Responses API translation, in process (no sockets).

    python -m evals.bench.responses_micro [--repeat 7]

What ``POST /v1/responses`` adds to a chat request's own work: the request translated
(``to_chat`` and the chat parse, against ``parse_chat`` alone), a 200-token answer
translated (``to_response``), and the stream translated (``ResponsesSink``: per chat
chunk, and the whole 200-chunk stream with its opening and closing events). Each figure
is the median over ``--repeat`` timeit repeats, in microseconds per operation.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import timeit
from collections.abc import Callable

import orjson

from gateway.request.model import parse_chat
from gateway.server.responses_format import to_chat, to_response

REQ = {
    "model": "auto",
    "instructions": "You are a helpful assistant.",
    "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "Summarise the plan. " * 20}]}
    ],
    "max_output_tokens": 256,
    "temperature": 0.2,
}
WORDS = ["token "] * 200
ANSWER = orjson.dumps(
    {
        "id": "c1",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "".join(WORDS)},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 100, "completion_tokens": 200, "total_tokens": 300},
    }
)


def _chunk(text: str) -> bytes:
    c = {"id": "c1", "model": "m", "choices": [{"index": 0, "delta": {"content": text}}]}
    return b"data: " + orjson.dumps(c) + b"\n\n"


CHUNKS = [_chunk(w) for w in WORDS]


class _Null:
    async def write(self, data: bytes) -> None:
        return None

    async def write_eof(self, data: bytes = b"") -> None:
        return None


def _stream() -> None:
    from gateway.server.responses_stream import ResponsesSink

    async def run() -> None:
        sink = ResponsesSink(_Null(), REQ)
        for c in CHUNKS:
            await sink.write(c)
        await sink.write(b"data: [DONE]\n\n")
        await sink.write_eof()

    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(run())
    finally:
        loop.close()


def _us(fn: Callable[[], object], repeat: int) -> float:
    t = timeit.Timer(fn)
    n, _ = t.autorange()
    return statistics.median(t.repeat(repeat, n)) / n * 1e6


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=7)
    a = ap.parse_args(argv)
    raw = orjson.dumps(REQ)
    chat_raw = orjson.dumps(to_chat(REQ))
    base = _us(lambda: parse_chat(chat_raw), a.repeat)
    req = _us(lambda: parse_chat(orjson.dumps(to_chat(orjson.loads(raw)))), a.repeat)
    ans = _us(lambda: to_response(ANSWER, REQ), a.repeat)
    whole = _us(_stream, a.repeat)
    loop_only = _us(lambda: asyncio.new_event_loop().close(), a.repeat)
    print(f"parse_chat alone:                    {base:8.1f} us")
    print(f"responses request -> chat (+parse):  {req:8.1f} us  (+{req - base:.1f})")
    print(f"chat answer -> response (200 tok):   {ans:8.1f} us")
    stream = whole - loop_only
    print(f"stream, 200 chunks + open/close:     {stream:8.1f} us  ({stream / 200:.2f} us/chunk)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
