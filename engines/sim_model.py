"""Latency model, prefix cache and batch admission of one simulated SGLang replica.

Used by :mod:`engines.sim`. Nothing here does I/O; the clock is *virtual* (model seconds)
and :class:`Replica` maps it onto the wall clock with ``time_scale`` (``0.01``: a 1 s
model interval lasts 10 ms).

The model (one GPU, an 8B-class model such as Llama-3.1-8B-Instruct on 1x H100):

* **Continuous batching.** At most ``max_running_requests`` requests decode together;
  the rest wait in a FIFO queue (SGLang's default ``schedule_policy`` is ``fcfs``).
* **TTFT** = queue wait + wait for the prefill lane + prefill of the *uncached* part of
  the prompt. Prefill of one request runs alone on the GPU (SGLang alternates prefill and
  decode batches unless mixed chunking is enabled): a replica-wide lane serialises
  prefills, and the time it is busy is added to the schedule of every decoding request
  (decode stalls while the GPU prefills). Prefill time = one forward pass per
  ``chunked_prefill_size`` chunk + uncached tokens / prefill speed.
* **Radix prefix cache.** Token-prefix blocks of ``CACHE_BLOCK`` tokens, chained hashes,
  bounded LRU sized like the KV pool (``max_total_num_tokens``); leaves are evicted
  before their parents. Prompts are inserted after prefill and prompt + output after
  the request finishes, so a multi-turn conversation hits its own history.
* **TPOT.** A decode step at batch ``b`` costs ``step(1) * (1 + BATCH_ALPHA * (b - 1))``.
  FP8 weights make steps ``FP8_DECODE_SPEEDUP`` times faster. With EAGLE-3 (highspeed)
  each verify step emits a burst of accepted tokens; the speed-up over plain decoding
  shrinks with the batch: ``speedup(b) = 1 + (S1 - 1) / (1 + (b - 1) / SPEC_HALF_BATCH)``,
  the mean acceptance length falls with it from ``ACCEPT_LEN_B1`` towards 1, and the
  verify step costs ``step(b) * accept(b) / speedup(b)``. Per-token time (TPOT) =
  step / accept.

Constants and where they come from (all for Llama-3.1-8B-Instruct class models):

* ``BF16_STEP_MS = 1000 / 158.34``: SGLang without speculation, 1x H100, MT-bench, batch
  1, 158.34 tok/s (https://docs.sglang.io/advanced_features/speculative_decoding.html).
* ``EAGLE3_SPEEDUP_B1 = 373.25 / 158.34`` (2.36x): SGLang + EAGLE-3 on the same setup
  (same page).
* ``SPEC_HALF_BATCH = 24.5``: calibrated so that the speed-up is 1.38x at batch 64, the
  EAGLE-3 paper's SGLang figure ("1.38x throughput improvement at a batch size of 64",
  arXiv:2503.01840); speculation helps less as decoding turns compute-bound
  (SpecDecode-Bench, https://specdecode-bench.github.io).
* ``ACCEPT_LEN_B1 = 3.0``: assumed mean accepted tokens per verify step at batch 1
  (SGLang's EAGLE defaults: 5 draft steps, top-k 4, 8 draft tokens, docs page above).
* ``BATCH_ALPHA = 0.03``: SGLang's hyper-parameter tuning guide shows a decode log line
  "#running-req: 233 ... gen throughput (token/s): 4594" -> 50.7 ms per step at batch
  233 vs 6.3 ms at batch 1 -> (50.7 / 6.3 - 1) / 232 = 0.03
  (https://docs.sglang.io/docs/advanced_features/hyperparameter_tuning).
* ``FP8_DECODE_SPEEDUP = 1.3``: FP8 W8A8 halves the weight bytes read per step; vLLM
  documents "up to 1.6x" throughput (https://docs.vllm.ai/en/stable/features/
  quantization/fp8/), and a Llama-3.1-8B vLLM benchmark measured +34 % for FP8 weights.
* ``BF16_PREFILL_TOK_S = 15000``: 2 * 8e9 FLOP per token against 989 TFLOPS (H100 SXM
  dense BF16) at ~25 % effective utilisation (attention, norms, launch gaps) -> ~15k
  tokens/s, within the 10-20k tokens/s usually seen for an 8B model on one H100.
* ``FP8_PREFILL_SPEEDUP = 1.5``: H100 FP8 tensor cores have 2x the BF16 peak; prefill is
  compute-bound, realised gains are lower (vLLM: up to 1.6x).
* ``max_total_num_tokens``: KV bytes per token of Llama-3.1-8B = 2 (K, V) * 32 layers * 8
  KV heads * 128 dims * 2 bytes = 128 KiB in BF16 (64 KiB in FP8). ~50 GB left for KV on
  an 80 GB H100 (``mem_fraction_static`` ~0.88, 16 GB BF16 weights) -> ~400k tokens;
  FP8 weights and FP8 KV -> ~850k (less the EAGLE draft model).
* ``max_running_requests``: SGLang resets it to 48 when EAGLE speculative decoding is on
  (``server_args.py``); 256 for the standard profile is an assumption.
* ``chunked_prefill_size = 8192``: SGLang's usual default on large GPUs.

Simplifications: no KV-memory admission control or retraction (only the batch cap), the
cache is at block rather than token granularity (SGLang's ``page_size`` is 1), TPOT does
not grow with sequence length, prefills are not packed together (SGLang fits several into
one forward pass up to ``max_prefill_tokens``, so a burst of short prompts costs a little
less there), ``cache_hit_rate`` is cumulative since start, and ``gen_throughput`` is the
model's instantaneous value (running requests / TPOT), not one measured over a log
interval.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field

# --- constants (sources in the module docstring) ---------------------------------------
BF16_STEP_MS = 1000.0 / 158.34
EAGLE3_SPEEDUP_B1 = 373.25 / 158.34
SPEC_HALF_BATCH = 24.5
ACCEPT_LEN_B1 = 3.0
BATCH_ALPHA = 0.03
FP8_DECODE_SPEEDUP = 1.3
BF16_PREFILL_TOK_S = 15_000.0
FP8_PREFILL_SPEEDUP = 1.5
CHUNKED_PREFILL_SIZE = 8192
CACHE_BLOCK = 16


@dataclass(frozen=True)
class Profile:
    """One replica's serving configuration and the latency figures derived from it."""

    name: str
    quantization: str | None
    kv_cache_dtype: str
    speculative_algorithm: str | None
    max_running_requests: int
    max_total_num_tokens: int
    step1_ms: float
    prefill_tok_s: float
    spec_speedup_b1: float = 1.0
    accept_len_b1: float = 1.0
    spec_half_batch: float = SPEC_HALF_BATCH
    batch_alpha: float = BATCH_ALPHA
    chunked_prefill_size: int = CHUNKED_PREFILL_SIZE

    @property
    def speculative(self) -> bool:
        return self.speculative_algorithm is not None

    def plain_step_ms(self, batch: int) -> float:
        """One non-speculative decode forward pass with ``batch`` running requests."""
        return self.step1_ms * (1.0 + self.batch_alpha * (max(batch, 1) - 1))

    def spec_speedup(self, batch: int) -> float:
        """Tokens/s gain of speculative decoding over plain decoding at ``batch``."""
        if not self.speculative:
            return 1.0
        decay = 1.0 + (max(batch, 1) - 1) / self.spec_half_batch
        return 1.0 + (self.spec_speedup_b1 - 1.0) / decay

    def accept_len(self, batch: int) -> float:
        """Mean tokens emitted per decode step (1 without speculation)."""
        if not self.speculative:
            return 1.0
        frac = (self.spec_speedup(batch) - 1.0) / (self.spec_speedup_b1 - 1.0)
        return 1.0 + (self.accept_len_b1 - 1.0) * frac

    def step_ms(self, batch: int) -> float:
        """One decode step (a verify step under speculation)."""
        return self.plain_step_ms(batch) * self.accept_len(batch) / self.spec_speedup(batch)

    def tpot_ms(self, batch: int) -> float:
        """Model time per output token at ``batch``."""
        return self.step_ms(batch) / self.accept_len(batch)

    def prefill_ms(self, uncached_tokens: int) -> float:
        """One forward pass per prefill chunk plus the compute of the uncached tokens."""
        chunks = max(1, math.ceil(uncached_tokens / self.chunked_prefill_size))
        return chunks * self.step1_ms + 1000.0 * uncached_tokens / self.prefill_tok_s


def make_profile(name: str, max_running_requests: int | None = None) -> Profile:
    """The ``highspeed`` (FP8 + EAGLE-3) or ``standard`` (BF16) profile."""
    if name == "highspeed":
        return Profile(
            name="highspeed",
            quantization="fp8",
            kv_cache_dtype="fp8_e4m3",
            speculative_algorithm="EAGLE3",
            max_running_requests=max_running_requests or 48,
            max_total_num_tokens=850_000,
            step1_ms=BF16_STEP_MS / FP8_DECODE_SPEEDUP,
            prefill_tok_s=BF16_PREFILL_TOK_S * FP8_PREFILL_SPEEDUP,
            spec_speedup_b1=EAGLE3_SPEEDUP_B1,
            accept_len_b1=ACCEPT_LEN_B1,
        )
    if name == "standard":
        return Profile(
            name="standard",
            quantization=None,
            kv_cache_dtype="auto",
            speculative_algorithm=None,
            max_running_requests=max_running_requests or 256,
            max_total_num_tokens=400_000,
            step1_ms=BF16_STEP_MS,
            prefill_tok_s=BF16_PREFILL_TOK_S,
        )
    raise ValueError(f"unknown profile {name!r}")


class PrefixCache:
    """Radix-cache stand-in: LRU over chained hashes of ``block``-token prefixes."""

    def __init__(self, capacity_tokens: int, block: int = CACHE_BLOCK):
        self.block = block
        self.capacity = max(1, capacity_tokens // block)
        self._lru: OrderedDict[int, None] = OrderedDict()

    def _chain(self, tokens: Sequence[str]) -> list[int]:
        out: list[int] = []
        h = 0
        for i in range(0, len(tokens) - self.block + 1, self.block):
            h = hash((h, *tokens[i : i + self.block]))
            out.append(h)
        return out

    def match(self, tokens: Sequence[str]) -> int:
        """Number of leading tokens already cached (a multiple of the block size)."""
        hit: list[int] = []
        for h in self._chain(tokens):
            if h not in self._lru:
                break
            hit.append(h)
        self._touch(hit)
        return len(hit) * self.block

    def insert(self, tokens: Sequence[str]) -> None:
        chain = self._chain(tokens)
        self._touch(chain)
        while len(self._lru) > self.capacity:
            self._lru.popitem(last=False)

    def _touch(self, chain: list[int]) -> None:
        # deepest first, so parents are the more recent and leaves are evicted first
        for h in reversed(chain):
            self._lru[h] = None
            self._lru.move_to_end(h)

    @property
    def size_tokens(self) -> int:
        return len(self._lru) * self.block


@dataclass
class Admission:
    """What the model decided when a request got a batch slot."""

    queue_s: float
    lane_wait_s: float
    prefill_s: float
    cached_tokens: int
    batch: int


@dataclass
class Replica:
    """Slots, FIFO queue, prefill lane and prefix cache of one simulated replica."""

    profile: Profile
    time_scale: float = 1.0
    cache: PrefixCache = field(init=False)
    running: int = 0
    waiting: deque[asyncio.Future[None]] = field(default_factory=deque)
    prefill_free_at: float = 0.0
    prefill_busy_s: float = 0.0
    _t0: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        self.cache = PrefixCache(self.profile.max_total_num_tokens)

    def now(self) -> float:
        """Virtual (model) seconds since start."""
        return (time.monotonic() - self._t0) / self.time_scale

    def real_at(self, virtual: float) -> float:
        """The ``time.monotonic()`` value at virtual time ``virtual``."""
        return self._t0 + virtual * self.time_scale

    async def sleep_until(self, virtual: float) -> None:
        delay = self.real_at(virtual) - time.monotonic()
        await asyncio.sleep(max(0.0, delay))

    @property
    def queued(self) -> int:
        return len(self.waiting)

    async def acquire(self) -> bool:
        """Take a batch slot, waiting in FIFO order when the batch is full; True if it waited."""
        if self.running < self.profile.max_running_requests and not self.waiting:
            self.running += 1
            return False
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiting.append(fut)
        try:
            await fut  # the slot is handed over by release(): running is unchanged
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release()  # granted while being cancelled: pass it on
            else:
                self.waiting.remove(fut)
            raise
        return True

    def release(self) -> None:
        while self.waiting:
            fut = self.waiting.popleft()
            if not fut.done():
                fut.set_result(None)
                return
        self.running -= 1

    def admit(self, tokens: Sequence[str], queue_s: float) -> Admission:
        """Prefix-match the prompt and book the prefill lane (call once a slot is held)."""
        cached = min(self.cache.match(tokens), max(len(tokens) - 1, 0))
        prefill_s = self.profile.prefill_ms(len(tokens) - cached) / 1000.0
        now = self.now()
        start = max(now, self.prefill_free_at)
        self.prefill_free_at = start + prefill_s
        self.prefill_busy_s += prefill_s
        self.cache.insert(tokens)
        return Admission(queue_s, start - now, prefill_s, cached, self.running)
