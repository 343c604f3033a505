"""Traces, metrics and the access log — all off the request's critical path.

* **Metrics** are OpenTelemetry meters read by a Prometheus reader (``GET /metrics``)
  and, when ``GATEWAY_OTLP_ENDPOINT`` is set, also pushed over OTLP. A request does not
  touch them itself: it appends one :class:`RequestRecord` to a list (well under a
  microsecond) and a background task records the batch every ``flush_interval``
  (and right before each scrape). Counters are summed per label set over the batch
  (one OTel call each); histograms are the gateway's own (:mod:`gateway.telemetry.histograms`,
  a bisect per record instead of 8-30 us of OTel SDK), copied to OTel for OTLP.
* **Traces** follow the OpenTelemetry GenAI semantic conventions where they exist
  (``gen_ai.*``) and ``gateway.*`` otherwise: one span per request, a child span per
  attempt and per check. With no OTLP endpoint the tracer is the API's no-op tracer.
* **Logs** are JSON lines with the request id; prompts and keys are never logged; refused
  and failed requests' lines are sampled (:mod:`gateway.telemetry.logs`). What a request
  leaves for all three is one :class:`~gateway.telemetry.record.RequestRecord`.

Metric and attribute names live here, as constants.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any

from opentelemetry import trace
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View
from opentelemetry.sdk.resources import Resource
from prometheus_client import CollectorRegistry, generate_latest

from gateway.checks.base import Check, CheckResult, Output, RequestFacts
from gateway.telemetry.cache_meters import CacheMeters
from gateway.telemetry.histograms import Histogram, HistogramCollector
from gateway.telemetry.logs import MALFORMED, AccessLines
from gateway.telemetry.record import RequestRecord

# -- names -------------------------------------------------------------------------------------
M_REQUESTS = "gateway_requests"
M_ERRORS = "gateway_errors"
M_LATENCY = "gateway_request_latency_seconds"
M_TTFT = "gateway_time_to_first_token_seconds"
M_TPOT = "gateway_time_per_output_token_seconds"
M_TOKENS = "gateway_tokens"
M_FALLBACKS = "gateway_fallbacks"
M_CHECK_FAILURES = "gateway_check_failures"
M_ATTEMPT = "gateway_upstream_attempt_seconds"
M_OVERHEAD = "gateway_overhead_seconds"
M_SHADOW = "gateway_shadow_comparisons"
M_SHADOW_SIM = "gateway_shadow_similarity"
M_SHADOW_FAIL = "gateway_shadow_failures"
M_COST = "gateway_cost_usd"  # Prometheus: gateway_cost_usd_total
M_QUEUE = "gateway_queue_wait_seconds"
M_CHECK = "gateway_check_seconds"  # every whole-answer verdict {check, result}: runs, time

A_TIER, A_TASK, A_SLA, A_TENANT = "tier", "task", "sla", "tenant"
A_ARM = "arm"  # the canary arm of a split rule ("none" outside a split)
A_STATUS, A_STREAM, A_REASON, A_CHECK = "status", "stream", "reason", "check"
A_DIRECTION, A_OUTCOME, A_KIND = "direction", "outcome", "kind"
A_RESULT = "result"  # a check's verdict: pass, fail

S_OPERATION = "gen_ai.operation.name"
S_REQ_MODEL = "gen_ai.request.model"
S_RESP_MODEL = "gen_ai.response.model"
S_IN_TOKENS = "gen_ai.usage.input_tokens"
S_OUT_TOKENS = "gen_ai.usage.output_tokens"
S_SYSTEM = "gen_ai.system"

# seconds; resolves P50/P95/P99 of interactive traffic (tens of ms to a few s)
LATENCY_BUCKETS = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.5,
    0.75,
    1.0,
    1.5,
    2.0,
    3.0,
    5.0,
    7.5,
    10.0,
    20.0,
    30.0,
    60.0,
    120.0,
)
TPOT_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.0075,
    0.01,
    0.015,
    0.02,
    0.03,
    0.05,
    0.075,
    0.1,
    0.2,
    0.5,
    1.0,
)
CHECK_BUCKETS = (1e-5, 5e-5, 1e-4, 5e-4, 0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
OVERHEAD_BUCKETS = (0.0001, 0.00025, 0.0005, 0.00075, 0.001, 0.002, 0.005, 0.01, 0.025, 0.1)
SIMILARITY_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 1.0)  # F1
MAX_TENANT_LABELS = 100  # beyond this, tenants are counted as "other" (bounded cardinality)
_SLICE_S = 0.001  # the flusher yields to the event loop at least this often

access_log = logging.getLogger("gateway.access")
_NO_SPAN: AbstractContextManager[trace.Span] = contextlib.nullcontext(trace.INVALID_SPAN)
_Sums = dict[tuple[Any, tuple[tuple[str, str], ...]], float]
_BASE = (A_TIER, A_TASK, A_SLA, A_TENANT, A_ARM)


class Telemetry:
    def __init__(
        self,
        otlp_endpoint: str | None = None,
        service: str = "llm-gateway",
        flush_interval: float = 0.5,
        tenant_label: bool = True,
    ):
        self._tenant_label = tenant_label  # off: every tenant counts as "all" (no ids exposed)
        self.registry = CollectorRegistry(auto_describe=True)
        readers: list[MetricReader] = [
            PrometheusMetricReader(registry=self.registry, disable_target_info=True)
        ]
        resource = Resource.create({"service.name": service})
        self.tracing = otlp_endpoint is not None
        self._tracer_provider: Any = None
        if otlp_endpoint:
            readers.append(_otlp_metrics(otlp_endpoint))
            self._tracer_provider = _otlp_tracer(otlp_endpoint, resource)
            self.tracer: trace.Tracer = self._tracer_provider.get_tracer("gateway")
        else:
            self.tracer = trace.NoOpTracer()
        views = [
            View(instrument_name=M_LATENCY, aggregation=_buckets(LATENCY_BUCKETS)),
            View(instrument_name=M_TTFT, aggregation=_buckets(LATENCY_BUCKETS)),
            View(instrument_name=M_ATTEMPT, aggregation=_buckets(LATENCY_BUCKETS)),
            View(instrument_name=M_TPOT, aggregation=_buckets(TPOT_BUCKETS)),
            View(instrument_name=M_OVERHEAD, aggregation=_buckets(OVERHEAD_BUCKETS)),
            View(instrument_name=M_SHADOW_SIM, aggregation=_buckets(SIMILARITY_BUCKETS)),
        ]
        self._provider = MeterProvider(metric_readers=readers, resource=resource, views=views)
        m = self._provider.get_meter("gateway")
        self.requests = m.create_counter(M_REQUESTS, description="requests answered")
        self.errors = m.create_counter(M_ERRORS, description="requests answered with an error")
        self.latency = Histogram(M_LATENCY, "end to end", LATENCY_BUCKETS, _BASE)
        self.ttft = Histogram(M_TTFT, "streams: first byte", LATENCY_BUCKETS, _BASE)
        self.tpot = Histogram(M_TPOT, "per output token", TPOT_BUCKETS, _BASE)
        self.tokens = m.create_counter(M_TOKENS, description="tokens in/out")
        self.fallbacks = m.create_counter(M_FALLBACKS, description="failed attempts by reason")
        self.check_failures = m.create_counter(M_CHECK_FAILURES, description="by check")
        self.attempt = Histogram(
            M_ATTEMPT, "upstream attempt", LATENCY_BUCKETS, (A_TIER, A_OUTCOME)
        )
        self.overhead = Histogram(M_OVERHEAD, "gateway's own", OVERHEAD_BUCKETS, (A_STREAM,))
        self.queue = Histogram(M_QUEUE, "waiting for a free slot", LATENCY_BUCKETS, _BASE)
        self.checks = Histogram(M_CHECK, "a check's verdict", CHECK_BUCKETS, (A_CHECK, A_RESULT))
        hists = [self.latency, self.ttft, self.tpot, self.attempt, self.overhead, self.queue]
        hists.append(self.checks)
        self.registry.register(HistogramCollector(hists))
        if otlp_endpoint:  # the same records, pushed over OTLP too
            for h in hists:
                h.also = m.create_histogram(h.name, unit="s", description=h.doc)
        self.shadow_comparisons = m.create_counter(M_SHADOW, description="shadow answers")
        self.shadow_similarity = m.create_histogram(M_SHADOW_SIM, description="token F1")
        self.shadow_failures = m.create_counter(M_SHADOW_FAIL, description="shadow errors")
        self.cost = m.create_counter(M_COST, description="USD of answers, at the tiers' prices")
        self.cache = CacheMeters(m)  # the response cache's (gateway.telemetry.cache_meters)
        self._pending: list[RequestRecord] = []
        self._tenants: set[str] = set()
        self._interval = flush_interval
        self._task: asyncio.Task[None] | None = None

    @functools.cached_property
    def _lines(self) -> AccessLines:
        """The access log's lines; a malformed request the HTTP server refused is counted as
        one more refused request."""
        return AccessLines(access_log, lambda: self._pending.append(MALFORMED))

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._flusher())
        self._lines.start()

    async def close(self) -> None:
        self._lines.stop()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self.flush()
        self._provider.shutdown()
        if self._tracer_provider is not None:
            self._tracer_provider.shutdown()

    async def _flusher(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            batch, self._pending = self._pending, []
            sums: _Sums = {}
            until = time.perf_counter() + _SLICE_S
            for rec in batch:
                self._one(rec, sums)
                if time.perf_counter() > until:  # never hold the event loop for long
                    await asyncio.sleep(0)
                    until = time.perf_counter() + _SLICE_S
            self._add(sums)
            self._lines.tick(time.monotonic())

    # -- the hot path: O(1), no OTel calls -------------------------------------------------------
    def record(self, rec: RequestRecord) -> None:
        self._pending.append(rec)

    # -- off the hot path -------------------------------------------------------------------------
    def flush(self) -> None:
        batch, self._pending = self._pending, []
        sums: _Sums = {}
        for rec in batch:
            self._one(rec, sums)
        self._add(sums)

    def _one(self, rec: RequestRecord, sums: _Sums) -> None:
        self._record(rec, sums)
        self._lines.write(rec)

    @staticmethod
    def _add(sums: _Sums) -> None:
        # Counters were summed per label set over the batch: one OTel call per label set,
        # not per request (each OTel call costs ~5-8 us). Histograms need every value.
        for (counter, attrs), n in sums.items():
            counter.add(n, dict(attrs))

    def _tenant(self, tenant: str | None) -> str:
        if tenant is None:
            return "none"
        if not self._tenant_label:
            return "all"
        if tenant in self._tenants:
            return tenant
        if len(self._tenants) < MAX_TENANT_LABELS:
            self._tenants.add(tenant)
            return tenant
        return "other"

    def _record(self, r: RequestRecord, sums: _Sums) -> None:
        def count(counter: Any, n: float, *attrs: tuple[str, str]) -> None:
            key = (counter, attrs)
            sums[key] = sums.get(key, 0) + n

        base = (
            (A_TIER, r.tier),
            (A_TASK, r.task),
            (A_SLA, r.sla),
            (A_TENANT, self._tenant(r.tenant)),
            (A_ARM, r.arm),
        )
        key = (r.tier, r.task, r.sla, base[3][1], r.arm)
        stream = str(r.stream).lower()
        count(self.requests, 1, *base, (A_STATUS, str(r.status)), (A_STREAM, stream))
        if r.status >= 400 or r.error_code:
            count(self.errors, 1, *base, (A_KIND, r.error_code or str(r.status)))
        self.latency.record(r.latency_s, key)
        self.overhead.record(max(0.0, r.overhead_s), (stream,))
        if r.queue_s:
            self.queue.record(r.queue_s, key)
        if r.ttft_s is not None:  # streams only: a non-streamed answer has no first token
            self.ttft.record(r.ttft_s, key)
            if r.completion_tokens > 1:
                self.tpot.record((r.latency_s - r.ttft_s) / (r.completion_tokens - 1), key)
        if r.prompt_tokens:
            count(self.tokens, r.prompt_tokens, *base, (A_DIRECTION, "in"))
        if r.completion_tokens:
            count(self.tokens, r.completion_tokens, *base, (A_DIRECTION, "out"))
        if r.cost_usd:
            count(self.cost, r.cost_usd, *base)
        for f in r.failures:
            count(self.fallbacks, 1, (A_TIER, f.tier), (A_REASON, f.reason), (A_TASK, r.task))
            self.attempt.record(f.seconds, (f.tier, f.reason))
            if f.check is not None:
                count(self.check_failures, 1, (A_CHECK, f.check), (A_TIER, f.tier))
        if r.cache is not None:
            self.cache.lookup(r.cache, count)
        if r.ok_attempt_s is not None and r.ttft_s is None:
            # a non-streamed answer's whole attempt; a stream's is its first token (TTFT)
            self.attempt.record(r.ok_attempt_s, (r.tier, "ok"))

    def prometheus(self) -> bytes:
        self.flush()
        out: bytes = generate_latest(self.registry)
        return out

    # -- traces ---------------------------------------------------------------------------
    def span(
        self,
        name: str,
        attrs: dict[str, Any] | None = None,
        kind: trace.SpanKind = trace.SpanKind.INTERNAL,
    ) -> AbstractContextManager[trace.Span]:
        """A span, or (tracing off) one shared do-nothing context: nothing built per call."""
        if not self.tracing:
            return _NO_SPAN
        return self.tracer.start_as_current_span(name, kind=kind, attributes=attrs)

    def run_checks(
        self, checks: Sequence[Check], out: Output, facts: RequestFacts
    ) -> CheckResult | None:
        """The checks in order, each timed (``gateway_check_seconds{check, result}``) and in
        its own child span when tracing is on; the first failure."""
        for c in checks:
            if self.tracing:
                with self.tracer.start_as_current_span(f"check {c.name}") as s:
                    res = self.timed_check(c, out, facts)
                    s.set_attribute("gateway.check.ok", res.ok)
                    if not res.ok:
                        s.set_attribute("gateway.check.reason", res.reason)
            else:
                res = self.timed_check(c, out, facts)
            if not res.ok:
                return res
        return None

    def timed_check(self, c: Check, out: Output, facts: RequestFacts) -> CheckResult:
        t0 = time.perf_counter()
        res = c.run(out, facts)
        self.checks.record(time.perf_counter() - t0, (c.name, "pass" if res.ok else "fail"))
        return res

    def check_verdict(self, name: str, ok: bool, seconds: float) -> None:
        """A verdict awaited (a remote check) or found on partial text, for the metrics."""
        self.checks.record(seconds, (name, "pass" if ok else "fail"))


def _buckets(b: tuple[float, ...]) -> ExplicitBucketHistogramAggregation:
    return ExplicitBucketHistogramAggregation(list(b))


def _otlp_metrics(endpoint: str) -> MetricReader:
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

    return PeriodicExportingMetricReader(
        OTLPMetricExporter(endpoint=endpoint.rstrip("/") + "/v1/metrics"),
        export_interval_millis=10_000,
    )


def _otlp_tracer(endpoint: str, resource: Resource) -> Any:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=resource)
    provider.add_span_processor(
        BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint.rstrip("/") + "/v1/traces"))
    )
    return provider
