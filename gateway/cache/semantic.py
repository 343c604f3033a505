"""The semantic cache: a near-duplicate prompt may get a stored answer.

A stored answer is indexed by the embedding of its last user turn, inside its *scope*
(:func:`gateway.cache.key.scope_key`: the same tenant, endpoint, task, route, history,
tools, response format and sampling fields). A lookup embeds the new prompt, compares it
with the scope's newest ``max_candidates`` records (cosine, unit vectors), and takes the
closest one over ``threshold`` whose guard agrees (:mod:`gateway.cache.guard`: the same
significant words in the same order, up to slips). Either embedder: ``local``
(all-MiniLM-L6-v2 in process, :mod:`gateway.cache.minilm`, run in a thread) or a tier
with ``embeddings: true`` (``POST /v1/embeddings`` through its pool). An embedder that is
missing, slow past the lookup's budget or failing makes the lookup exact only.

A record: ``{"s": signature}`` as JSON, a newline, the vector as float16.
"""

from __future__ import annotations

import asyncio
import logging
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.cache.guard import same_question
from gateway.cache.minilm import EmbedderUnavailable, MiniLM
from gateway.settings import pin_blas_threads
from gateway.upstream.failures import AttemptFailed
from gateway.upstream.pools import Pools
from gateway.upstream.scheduler import ANYONE

log = logging.getLogger("gateway.cache")
LOCAL = "local"


@dataclass(frozen=True, slots=True)
class Match:
    key: str
    similarity: float


def record(signature: tuple[str, ...], vec: Any) -> bytes:
    import numpy as np

    return orjson.dumps({"s": signature}) + b"\n" + np.asarray(vec, dtype="<f2").tobytes()


def best(
    vec: Any, signature: tuple[str, ...], records: Sequence[tuple[str, bytes]], threshold: float
) -> Match | None:
    """The closest record over ``threshold`` whose guard agrees with ``signature``."""
    import numpy as np

    keys, mats, sigs = [], [], []
    for key, raw in records:
        head, sep, body = raw.partition(b"\n")
        if not sep or len(body) != 2 * len(vec):
            continue
        try:
            sigs.append(tuple(orjson.loads(head)["s"]))
        except (orjson.JSONDecodeError, KeyError, TypeError):
            continue
        keys.append(key)
        mats.append(np.frombuffer(body, dtype="<f2"))
    if not keys:
        return None
    sims = np.stack(mats).astype(np.float32) @ np.asarray(vec, dtype=np.float32)
    for i in np.argsort(-sims):
        if sims[i] < threshold:
            return None
        if same_question(sigs[i], signature):
            return Match(keys[i], float(sims[i]))
    return None


class Embedders:
    """The local model (loaded once, on first use, in a thread) and embedding tiers."""

    def __init__(self, threads: int = 1):
        self._threads = threads
        self._local: asyncio.Task[MiniLM] | None = None
        self.unavailable: str | None = None  # why the local one cannot run (logged once)

    async def embed(self, name: str, text: str, pools: Pools, until: float) -> Any | None:
        """The unit vector of ``text`` (numpy float32), or None when the embedder cannot
        answer by ``until`` (monotonic)."""
        budget = until - time.monotonic()
        if budget <= 0:
            return None
        try:
            async with asyncio.timeout(budget):
                if name == LOCAL:
                    return await self._by_local(text)
                return await _by_tier(pools, name, text, until)
        except TimeoutError:
            return None

    async def _by_local(self, text: str) -> Any | None:
        if self.unavailable is not None:
            return None
        if self._local is None:
            self._local = asyncio.get_running_loop().create_task(self._load())
        try:  # shielded: a lookup that gives up does not stop the load for the next one
            model = await asyncio.shield(self._local)
        except EmbedderUnavailable as e:
            self.unavailable = str(e)
            log.warning("semantic cache: local embedder unavailable: %s", e)
            return None
        rows = await asyncio.to_thread(model.embed, [text])
        return rows[0]

    async def _load(self) -> MiniLM:
        pin_blas_threads(self._threads)  # before numpy loads: more threads thrash a busy box
        return await asyncio.to_thread(MiniLM)

    async def close(self) -> None:
        if self._local is not None and not self._local.done():
            self._local.cancel()


async def _by_tier(pools: Pools, tier: str, text: str, until: float) -> Any | None:
    import numpy as np

    pool = pools.by_tier.get(tier)
    if pool is None or not pool.tier.embeddings or not pool.available(time.monotonic()):
        return None
    body = orjson.dumps({"model": pool.model, "input": text})
    rep = None
    t0 = time.perf_counter()
    try:
        rep, _ = await pool.acquire(ANYONE, zlib.crc32(body[:512]), until)
        t0 = time.perf_counter()
        left = until - time.monotonic()
        raw = await pool.post(rep, "/v1/embeddings", body, pool.limits(left, False))
        vec = np.asarray(orjson.loads(raw)["data"][0]["embedding"], dtype=np.float32)
    except (AttemptFailed, orjson.JSONDecodeError, KeyError, IndexError, TypeError, ValueError):
        return None
    finally:
        if rep is not None:
            pool.release(rep, time.perf_counter() - t0)
    norm = float(np.linalg.norm(vec))
    return vec / norm if norm > 0 else None
