"""The aiohttp application of one simulated replica: the OpenAI and SGLang endpoints,
admission into the latency model, and the timing of JSON and SSE answers (and of the
faults that stop them)."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import orjson
from aiohttp import web

from engines.sim.config import Json, SimConfig
from engines.sim.faults import FaultDraw, slow_ttft
from engines.sim.flight import Flight
from engines.sim.metrics import Metrics
from engines.sim.plan import Plan, make_plan
from engines.sim.request import BadRequest, SimRequest, parse_chat, parse_completion
from engines.sim.shape import Shape, error_body, error_response, sse
from engines.sim_model import PrefixCache, Profile, Replica, make_profile

MIN_SLEEP_STREAM_S = 0.002
MIN_SLEEP_BLOCKING_S = 0.05

Emit = Callable[[int, int], Awaitable[None]]


class SimServer:
    """The aiohttp application of one simulated replica."""

    def __init__(self, cfg: SimConfig):
        self.cfg = cfg
        self.profile: Profile = make_profile(cfg.profile, cfg.max_running_requests)
        if cfg.max_total_tokens:
            self.profile = _with_pool(self.profile, cfg.max_total_tokens)
        self.replica = Replica(self.profile, cfg.time_scale)
        self.metrics = Metrics()
        self.fault_draw = FaultDraw(cfg)
        self.counter = 0

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        app.router.add_get("/health_generate", self.health)
        app.router.add_get("/get_server_info", self.server_info)
        app.router.add_get("/get_model_info", self.model_info)
        app.router.add_get("/metrics", self.metrics_text)
        app.router.add_route("*", "/flush_cache", self.flush_cache)
        app.router.add_get("/sim/faults", self.faults)
        app.router.add_post("/sim/faults", self.set_faults)
        return app

    # --- small endpoints

    async def health(self, request: web.Request) -> web.StreamResponse:
        return web.Response(status=200)

    async def models(self, request: web.Request) -> web.StreamResponse:
        name = self.cfg.served_model_name
        card = {
            "id": name,
            "object": "model",
            "created": int(time.time()),
            "owned_by": "sglang",
            "root": name,
            "max_model_len": self.cfg.context_length,
        }
        return web.json_response({"object": "list", "data": [card]}, dumps=_dumps)

    async def model_info(self, request: web.Request) -> web.StreamResponse:
        info = {"model_path": self.cfg.served_model_name, "is_generation": True}
        return web.json_response(info, dumps=_dumps)

    async def server_info(self, request: web.Request) -> web.StreamResponse:
        return web.json_response(self.server_settings(), dumps=_dumps)

    def server_settings(self) -> Json:
        p, cfg = self.profile, self.cfg
        spec = p.speculative
        return {
            "model_path": cfg.served_model_name,
            "served_model_name": cfg.served_model_name,
            "version": "sim",
            "dtype": "bfloat16",
            "quantization": p.quantization,
            "kv_cache_dtype": p.kv_cache_dtype,
            "speculative_algorithm": p.speculative_algorithm,
            "speculative_num_steps": 5 if spec else None,
            "speculative_eagle_topk": 4 if spec else None,
            "speculative_num_draft_tokens": 8 if spec else None,
            "max_running_requests": p.max_running_requests,
            "max_total_num_tokens": p.max_total_num_tokens,
            "chunked_prefill_size": p.chunked_prefill_size,
            "context_length": cfg.context_length,
            "schedule_policy": "fcfs",
            "disable_radix_cache": False,
            "page_size": 1,
            "tp_size": 1,
            "dp_size": 1,
            "enable_metrics": True,
            "random_seed": cfg.seed,
            "internal_states": [{"avg_spec_accept_length": p.accept_len(1) if spec else None}],
            "sim": {
                "profile": p.name,
                "time_scale": cfg.time_scale,
                "faults": self.fault_draw.rates,
                "step_ms_batch1": round(p.step_ms(1), 3),
                "tpot_ms_batch1": round(p.tpot_ms(1), 3),
                "accept_len_batch1": round(p.accept_len(1), 3),
                "prefill_tokens_per_s": p.prefill_tok_s,
                "batch_alpha": p.batch_alpha,
            },
        }

    async def flush_cache(self, request: web.Request) -> web.StreamResponse:
        """SGLang's ``/flush_cache``: empty the radix cache, only while nothing runs."""
        if self.replica.running or self.replica.queued:
            return web.Response(status=400, text="Cache not flushed: requests are running.\n")
        self.replica.cache = PrefixCache(self.profile.max_total_num_tokens)
        return web.Response(text="Cache flushed.\n")

    async def faults(self, request: web.Request) -> web.StreamResponse:
        """The fault rates in force: ``{"faults": {NAME: RATE}}``."""
        return web.json_response({"faults": self.fault_draw.rates}, dumps=_dumps)

    async def set_faults(self, request: web.Request) -> web.StreamResponse:
        """Replace the fault rates while the replica runs (``{"faults": {"loop": 1.0}}``; ``{}``
        for none): a drill's bad deploy and its fix, without a restart."""
        try:
            body = await request.json(loads=orjson.loads)
            self.fault_draw.set_rates(body.get("faults") if isinstance(body, dict) else None)
        except (BadRequest, orjson.JSONDecodeError, UnicodeDecodeError) as e:
            return error_response(400, str(e) or "invalid JSON body", "BadRequestError")
        return await self.faults(request)

    async def metrics_text(self, request: web.Request) -> web.StreamResponse:
        text = self.metrics.render(self.cfg.served_model_name, self.replica)
        return web.Response(text=text, content_type="text/plain", charset="utf-8")

    # --- generation endpoints

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, parse_chat)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, parse_completion)

    async def _generate(
        self, request: web.Request, parse: Callable[[Json], SimRequest]
    ) -> web.StreamResponse:
        try:
            body = await request.json(loads=orjson.loads)
            if not isinstance(body, dict):
                raise BadRequest("the body must be a JSON object")
            req = parse(body)
            self._check_context(req)
            faults = self.fault_draw.draw(request.headers.get("x-sim-fault", ""), req.digest)
        except (BadRequest, orjson.JSONDecodeError, UnicodeDecodeError) as e:
            return error_response(400, str(e) or "invalid JSON body", "BadRequestError")
        return await self._answer(request, req, faults)

    def _check_context(self, req: SimRequest) -> None:
        need = len(req.prompt_tokens) + (req.max_tokens or 0)
        if need > self.cfg.context_length:
            raise BadRequest(
                f"Requested token count exceeds the model's maximum context length of "
                f"{self.cfg.context_length} tokens ({need} requested)."
            )

    async def _answer(
        self, request: web.Request, req: SimRequest, faults: set[str]
    ) -> web.StreamResponse:
        if "500" in faults:
            return error_response(500, "simulated internal server error", "InternalServerError")
        if "429" in faults:
            retry = {"Retry-After": f"{self.cfg.retry_after:g}"}
            return error_response(429, "simulated rate limit", "RateLimitError", retry)
        if "hang" in faults:
            await _forever()
        self.counter += 1
        prefix = "chatcmpl" if req.chat else "cmpl"
        rid = f"{prefix}-{self.counter:06x}{req.digest[:18]}"
        shape = Shape(req.chat, rid, req.model or self.cfg.served_model_name)
        plan = make_plan(req, self.cfg.seed, faults)
        arrival = self.replica.now()
        try:
            waited = await self.replica.acquire()
        except asyncio.CancelledError:
            self.metrics.aborted += 1
            raise
        flight = self._admit(req, plan, arrival, waited)
        try:
            headers = self._headers(flight, faults)
            if req.stream:
                return await self._stream(request, req, flight, shape, headers)
            return await self._blocking(request, req, flight, shape, headers)
        except (asyncio.CancelledError, ConnectionError):
            self.metrics.aborted += 1
            raise
        finally:
            flight.release()

    def _admit(self, req: SimRequest, plan: Plan, arrival: float, waited: bool) -> Flight:
        queue_s = self.replica.now() - arrival if waited else 0.0
        adm = self.replica.admit(req.prompt_tokens, queue_s)
        ttft = adm.queue_s + adm.lane_wait_s + adm.prefill_s
        if plan.slow_ttft:
            ttft = slow_ttft(ttft)
        m = self.metrics
        m.prompt_tokens += len(req.prompt_tokens)
        m.cached_tokens += adm.cached_tokens
        m.requests += 1
        m.queue.observe(adm.queue_s)
        burst = random.Random(f"{self.cfg.seed}:{req.digest}:burst")
        start = arrival + ttft
        flight = Flight(self.replica, adm, plan, burst, start, len(req.prompt_tokens), ttft)
        flight.busy_seen = self.replica.prefill_busy_s
        return flight

    def _headers(self, f: Flight, faults: set[str]) -> dict[str, str]:
        prof, adm = self.profile, f.adm
        return {
            "x-sim-profile": prof.name,
            "x-sim-batch": str(adm.batch),
            "x-sim-queue-ms": f"{adm.queue_s * 1000:.3f}",
            "x-sim-prefill-ms": f"{(adm.lane_wait_s + adm.prefill_s) * 1000:.3f}",
            "x-sim-cached-tokens": str(adm.cached_tokens),
            "x-sim-prompt-tokens": str(f.prompt_len),
            "x-sim-ttft-ms": f"{f.ttft_s * 1000:.3f}",
            "x-sim-tpot-ms": f"{prof.tpot_ms(adm.batch):.3f}",
            "x-sim-accept-len": f"{prof.accept_len(adm.batch):.3f}",
            "x-sim-faults": ";".join(sorted(faults)) or "none",
        }

    async def _run(self, f: Flight, limit: int, emit: Emit | None, min_sleep: float) -> None:
        """Sleep through prefill and decode of the first ``limit`` pieces, emitting them."""
        rep, m = self.replica, self.metrics
        if f.produced == 0:
            await rep.sleep_until(f.t)  # queue + prefill: the first token comes from prefill
            m.ttft.observe(f.ttft_s)
            if limit > 0:
                await self._emit(f, emit, 1)
        while f.produced < limit:
            n, dt = f.next_steps(limit, min_sleep)
            await rep.sleep_until(f.t)
            m.itl.observe(dt / n)
            await self._emit(f, emit, n)

    async def _emit(self, f: Flight, emit: Emit | None, n: int) -> None:
        if emit is not None:
            await emit(f.produced, f.produced + n)
        f.produced += n
        self.metrics.generation_tokens += n

    def _usage(self, req: SimRequest, f: Flight) -> Json:
        p = len(req.prompt_tokens)
        return {
            "prompt_tokens": p,
            "completion_tokens": f.produced,
            "total_tokens": p + f.produced,
            "prompt_tokens_details": {"cached_tokens": f.adm.cached_tokens},
        }

    def _done(self, req: SimRequest, f: Flight) -> Json:
        """A normal finish: cache prompt + answer (as the next turn renders it), figures."""
        if f.plan.tool_name is None:
            answer = "".join(f.plan.pieces).split()
            tail = ["<|im_end|>"] if req.chat else []
            self.replica.cache.insert([*req.prompt_tokens, *answer, *tail])
        sim = f.figures()
        self.metrics.e2e.observe(sim["e2e_ms"] / 1000.0)
        return sim

    async def _blocking(
        self,
        request: web.Request,
        req: SimRequest,
        f: Flight,
        shape: Shape,
        headers: dict[str, str],
    ) -> web.StreamResponse:
        plan = f.plan
        limit = plan.end_after if plan.end else len(plan.pieces)
        await self._run(f, limit, None, MIN_SLEEP_BLOCKING_S)
        if plan.end == "stall":
            f.release()
            await _forever()
        if plan.end == "cut":
            _close(request)  # aiohttp's write of this answer then fails quietly
            return web.Response(status=200, headers=headers)
        if plan.end == "error_event":
            return error_response(500, "simulated engine error", "InternalServerError", headers)
        sim = self._done(req, f)
        headers.update(_final_headers(sim))
        body = orjson.dumps(shape.full(plan, self._usage(req, f), sim))
        return web.Response(body=body, content_type="application/json", headers=headers)

    async def _stream(
        self,
        request: web.Request,
        req: SimRequest,
        f: Flight,
        shape: Shape,
        headers: dict[str, str],
    ) -> web.StreamResponse:
        resp = web.StreamResponse(headers={**headers, "Cache-Control": "no-cache"})
        resp.content_type = "text/event-stream"
        await resp.prepare(request)
        plan = f.plan

        async def emit(lo: int, hi: int) -> None:
            events = shape.opening(plan) if lo == 0 else []
            events.append(shape.delta(plan, "".join(plan.pieces[lo:hi])))
            await resp.write(b"".join(sse(e) for e in events))

        limit = plan.end_after if plan.end else len(plan.pieces)
        await self._run(f, limit, emit, MIN_SLEEP_STREAM_S)
        if plan.end is not None:
            return await self._stream_fault(request, resp, f)
        opening = shape.opening(plan) if f.produced == 0 else []  # an empty answer
        finish = shape.finish(plan, self._done(req, f))
        await resp.write(b"".join(sse(e) for e in [*opening, finish]))
        if req.include_usage:
            await resp.write(sse(shape.usage_chunk(self._usage(req, f))))
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def _stream_fault(
        self, request: web.Request, resp: web.StreamResponse, f: Flight
    ) -> web.StreamResponse:
        if f.plan.end == "stall":
            f.release()
            await _forever()
        if f.plan.end == "cut":
            _close(request)  # aiohttp's write_eof then fails quietly: no last chunk
            return resp
        err = error_body(500, "simulated engine error mid-stream", "InternalServerError")
        await resp.write(sse(err) + b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp


def _dumps(obj: Any) -> str:
    return orjson.dumps(obj).decode()


def _final_headers(sim: Json) -> dict[str, str]:
    return {"x-sim-e2e-ms": f"{sim['e2e_ms']:.3f}", "x-sim-steps": str(sim["steps"])}


async def _forever() -> None:
    """Never return (until the client goes away and the handler is cancelled)."""
    await asyncio.Event().wait()


def _close(request: web.Request) -> None:
    """Drop the connection as it is: no end of body, no [DONE]."""
    if request.transport is not None:
        request.transport.close()


def _with_pool(profile: Profile, tokens: int) -> Profile:
    return replace(profile, max_total_num_tokens=tokens)
