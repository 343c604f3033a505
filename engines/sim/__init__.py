"""An SGLang-shaped replica simulator: OpenAI API, load, faults and metrics without a GPU.

The package, from the process down: :mod:`~engines.sim.cli` (the command line and the
process), :mod:`~engines.sim.server` (the aiohttp app: endpoints, admission, timing of
JSON and SSE answers), :mod:`~engines.sim.flight` (one admitted request's clock),
:mod:`~engines.sim.shape` (OpenAI object shapes), :mod:`~engines.sim.metrics`
(SGLang's Prometheus names), :mod:`~engines.sim.plan` (the whole answer, decided before
any timing), :mod:`~engines.sim.faults` (fault names, draws, and what they do to the
text), :mod:`~engines.sim.request` (an OpenAI body to a :class:`SimRequest`),
:mod:`~engines.sim.text` (pseudo-English and schema-valid JSON) and
:mod:`~engines.sim.config`. The latency model (batching, prefill, the radix prefix
cache) is :mod:`engines.sim_model`.

Run::

    python -m engines.sim --port 30000 [--host 127.0.0.1] [--profile highspeed|standard]
        [--seed N] [--model NAME] [--time-scale 0.01] [--max-running-requests N]
        [--max-total-tokens N] [--context-length N] [--fault NAME=RATE ...]
        [--retry-after S]

It answers like one SGLang replica under load: ``POST /v1/chat/completions`` and
``POST /v1/completions`` (JSON or SSE with ``stream: true``), ``GET /v1/models``,
``GET /health``, ``GET /get_server_info``, ``GET /get_model_info``, ``GET /metrics``
(Prometheus text, SGLang's metric names, label ``model_name``) and ``/flush_cache`` (empties
the radix cache while nothing runs, as SGLang's does; a 400 otherwise).

**Latency.** :mod:`engines.sim_model` holds the model and its sources: continuous batching
with ``max_running_requests`` slots and a FIFO queue, TTFT = queue + prefill of the
uncached prompt (radix prefix cache), TPOT by batch size, EAGLE-3 bursts and FP8 on the
``highspeed`` profile. ``--time-scale`` maps model seconds to wall seconds (0.01: 100x
faster); all reported figures are in model time.

Design: one coroutine per request, no global stepping loop. A request takes a slot (or
queues), books the replica's prefill lane, sleeps until its first token, then sleeps step
by step; each step's cost is computed from the batch size at that moment, so requests
slow each other down as they join and leave. Steps are coalesced into one wake-up of at
least 2 ms of wall time (50 ms for non-streamed answers), which keeps hundreds of streams
cheap on one core. Deadlines are absolute, so sleep overshoot does not accumulate.

**The model's figures per request** (model milliseconds): response headers
``x-sim-profile``, ``x-sim-batch`` (running requests at admission), ``x-sim-queue-ms``,
``x-sim-prefill-ms`` (lane wait + prefill), ``x-sim-cached-tokens``,
``x-sim-prompt-tokens``, ``x-sim-ttft-ms``, ``x-sim-tpot-ms`` (per output token at the
admission batch size), ``x-sim-accept-len`` and ``x-sim-faults`` (plus ``x-sim-e2e-ms`` and
``x-sim-steps`` on non-streamed answers); and a ``sim`` object
(top level of the JSON answer, or of the final chunk of a stream) with the realised
``ttft_ms``, ``tpot_ms`` (including decode stalls caused by other requests' prefills),
``e2e_ms``, ``steps`` and ``accept_len``.

**Text.** Pseudo-English, one word per token, deterministic in ``--seed`` and the request
content (``stream``, ``model``, ``max_tokens``, ``min_tokens`` and ``stop`` do not change the
text, only where it ends). Length: log-normal around 80 tokens,
clipped to 20-300, ending on a sentence; ``max_tokens`` / ``max_completion_tokens`` cut it
(``finish_reason: "length"``). ``stop`` strings, ``ignore_eos`` and ``min_tokens`` are
honoured; other SGLang extras (``top_k``, ``regex``, ``chat_template_kwargs``...) are
accepted and ignored. ``continue_final_message: true`` with a trailing assistant message
continues that text. Where the text is a start of the answer this seed gives the same
request without that message and flag (plain text or JSON; the replica's
``--profile`` does not change the text, so two replicas with one ``--seed`` continue each
other's answers), the continuation is the rest of that answer, as a model with greedy or
seeded sampling continues its own prefix (``tests/test_local_engine.py`` checks llama.cpp's
server); other text goes on with new sentences, as many words as that answer had left
(at least 8), other JSON with a new object; ``min_tokens`` counts the continuation's own
tokens. With ``ignore_eos``, on ``/v1/completions`` (where a prefix is only more prompt)
and for tool calls a continuation is a new answer. ``response_format`` ``json_object`` /
``json_schema`` gives a valid JSON object (simple schemas: properties of basic types,
nested objects, arrays, enums); ``tools`` give a valid call to the first tool (or the one
``tool_choice`` names), unless ``tool_choice`` is ``"none"`` or the last message is a tool
result.

**Faults**, per request with ``x-sim-fault: NAME[;NAME...]`` (``none`` turns off the
rate-drawn ones) or per rate with ``--fault NAME=RATE`` (drawn in request order from the
seed; with ``--fault-draw content``, from the seed and the request's content, so that
the same request draws the same faults whenever it comes, as every target of a side-by-side
benchmark sends it; ``POST /sim/faults`` with ``{"faults": {"loop": 1.0}}`` replaces the rates
while the replica runs, ``GET /sim/faults`` says them): ``500`` (HTTP 500, OpenAI-style
error body), ``429`` (with ``Retry-After``),
``hang`` (never answers), ``slow_ttft`` (TTFT + max(19 x TTFT, 5 s)), ``stall`` (a few
tokens, then silence on an open connection; the slot is freed), ``cut`` (connection
closed mid-stream, no ``[DONE]``), ``loop`` (a few words, then one sentence over and over
up to ``max_tokens`` or 400 tokens), ``leak`` (``<|im_end|><|im_start|>user`` in the
text), ``bad_json`` (invalid JSON when JSON mode was asked), ``bad_tool`` (a call to a
function that does not exist or with arguments that do not parse, when tools were
given), ``error_event`` (a mid-stream ``data: {"error": ...}`` event, then ``[DONE]``; an
HTTP 500 for a non-streamed answer). Faults that do not apply to the request are no-ops.
Same seed + same request sequence -> same outputs and same fault draws.
"""

from __future__ import annotations

from engines.sim.cli import build_parser, parse_args, serve, sim_main
from engines.sim.config import SimConfig
from engines.sim.faults import FAULTS
from engines.sim.server import SimServer

__all__ = ["FAULTS", "SimConfig", "SimServer", "build_parser", "parse_args", "serve", "sim_main"]
