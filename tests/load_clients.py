"""Steady client load in a thread of its own, while the test breaks things in the main one.

``with Load(url, key, clients=8) as load: ...`` keeps ``clients`` concurrent clients sending
chat completions until the block ends; ``load.results`` then holds every request's
(status, seconds it took, when it started).
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp


@dataclass(frozen=True)
class Result:
    status: int
    took: float
    at: float  # time.monotonic() when it was sent
    key: str
    body: bytes = b""


@dataclass
class Load:
    urls: list[str]
    keys: list[str]
    clients: int = 8
    content: str = "load"
    stream: bool = False
    timeout: float = 30.0
    results: list[Result] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> Load:
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(self.timeout + 10)

    def statuses(self, key: str | None = None, since: float = 0.0) -> dict[int, int]:
        out: dict[int, int] = {}
        for r in list(self.results):
            if (key is None or r.key == key) and r.at >= since:
                out[r.status] = out.get(r.status, 0) + 1
        return out

    def count(self, since: float = 0.0) -> int:
        return sum(1 for r in list(self.results) if r.at >= since)

    async def _run(self) -> None:
        timeout = aiohttp.ClientTimeout(total=self.timeout)
        conn = aiohttp.TCPConnector(limit=self.clients * 2)
        async with aiohttp.ClientSession(timeout=timeout, connector=conn) as http:
            await asyncio.gather(*(self._client(i, http) for i in range(self.clients)))

    async def _client(self, i: int, http: aiohttp.ClientSession) -> None:
        body: dict[str, Any] = {
            "model": "auto",
            "messages": [{"role": "user", "content": self.content}],
            "stream": self.stream,
        }
        n = 0
        while not self._stop.is_set():
            key = self.keys[(i + n) % len(self.keys)]
            url = f"{self.urls[(i + n) % len(self.urls)]}/v1/chat/completions"
            n += 1
            t0 = time.monotonic()
            try:
                async with http.post(
                    url, json=body, headers={"Authorization": f"Bearer {key}"}
                ) as r:
                    raw = await r.read()
                    status = r.status
            except (aiohttp.ClientError, TimeoutError):
                raw, status = b"", 0  # no answer at all: a hang or a cut connection
            self.results.append(Result(status, time.monotonic() - t0, t0, key, raw[:300]))
