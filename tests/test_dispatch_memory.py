"""Dispatch and relay on an in-memory transport: the attempt loop, budgets, assembly of a
non-streamed answer from an upstream stream, continuation and stream endings — no sockets."""

from __future__ import annotations

import asyncio
import functools
import random
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import orjson
import pytest
import yaml

from gateway.checks.registry import build_checks
from gateway.dispatch.attempts import Dispatcher
from gateway.dispatch.call import Call
from gateway.errors import UpstreamFailed
from gateway.request.model import parse_chat
from gateway.routing.classify import Classifier
from gateway.routing.router import Router
from gateway.rules.schema import Rules
from gateway.telemetry.recorder import Telemetry
from gateway.tenancy.tenants import OPEN
from gateway.upstream.failures import ClientRejected, TooSlow
from gateway.upstream.pools import Pools
from tests.conftest import RULES
from tests.memory_transport import Handler, MemoryTransport, Reply, Transports, events
from tests.waiting import wait_until_async

T = TypeVar("T")


def aio(f: Callable[..., Coroutine[Any, Any, T]]) -> Callable[..., T]:
    """Run an async test on a fresh event loop (no plugin needed)."""

    @functools.wraps(f)
    def run(*args: Any, **kwargs: Any) -> T:
        return asyncio.run(f(*args, **kwargs))

    return run


LOOP = ["I will repeat this sentence again. "] * 80


def _rules(
    hedge_after: float | None = None,
    rate: tuple[float, float] = (0.0, 5.0),
    continuation: str | None = None,  # the tiers' style; unset: the repository's (prefill)
    **dispatch: Any,
) -> Rules:
    data = yaml.safe_load(RULES.read_text())
    if continuation is not None:
        for tier in data["tiers"].values():
            tier["continuation"] = continuation
    for route in (data["default"], *data["rules"]):
        route["hedge_after"] = hedge_after
    for tier in data["tiers"].values():
        tier["timeouts"] = {"connect": 1.0, "ttft": 0.5, "total": 3.0, "stall": 0.5}
        tier["timeouts"] |= {"min_tokens_per_s": rate[0], "rate_window": rate[1]}
        tier["health"] = {"enabled": False}
        tier["circuit"] = {"failures": 1000, "cooldown": 1.0}
        tier["stream"] = {"hold_back_tokens": 0}
        tier["request_defaults"] = {}
    data["dispatch"] = {"backoff_initial": 0.01, "backoff_jitter": 0.0, **dispatch}
    return Rules.model_validate(data)


class Rig:
    def __init__(
        self,
        handler: Handler,
        hedge_after: float | None = None,
        rate: tuple[float, float] = (0.0, 5.0),
        continuation: str | None = None,
        **dispatch: Any,
    ):
        self.rules = _rules(hedge_after, rate, continuation, **dispatch)
        self.transports = Transports(handler)
        self.pools = Pools(dict(self.rules.tiers), self.transports)
        self.dispatcher = Dispatcher(
            self.pools,
            build_checks(self.rules.checks),
            self.rules.dispatch,
            Telemetry(),
        )

    def call(
        self,
        text: str = "Tell me about tea.",
        stream: bool = False,
        deadline: float = 5.0,
        headers: dict[str, str] | None = None,
        **body: Any,
    ) -> Call:
        raw = orjson.dumps(
            {
                "model": "auto",
                "stream": stream,
                "messages": [{"role": "user", "content": text}],
                **body,
            }
        )
        req = parse_chat(raw)
        cls = Classifier(self.rules).classify(req, headers or {})
        d = Router(self.rules).decide(cls, {}, OPEN)
        return self.dispatcher.call(req, d, time.monotonic() + deadline)

    def calls(self, tier: str) -> list[dict[str, Any]]:
        t = self.transports.by_tier[tier]
        return t.calls


def by_tier(**replies: Reply | list[Reply]) -> Handler:
    """highspeed=Reply(...) or a list of replies served in order."""
    queues = {k: (v if isinstance(v, list) else None) for k, v in replies.items()}

    def handler(tier: str, body: dict[str, Any]) -> Reply:
        q = queues.get(tier)
        if q is not None:
            return q.pop(0) if len(q) > 1 else q[0]
        r = replies[tier]
        assert isinstance(r, Reply)
        return r

    return handler


OK_FAST = Reply(
    chunks=events(
        ["Green ", "tea ", "is ", "good."], prompt_tokens=7, completion_tokens=4, total_tokens=11
    )
)
OK_STD = Reply(chunks=events(["Standard ", "answer."]))


@aio
async def test_non_stream_is_assembled_from_an_upstream_stream() -> None:
    rig = Rig(by_tier(highspeed=OK_FAST, standard=OK_STD))
    out = await rig.dispatcher.complete(rig.call())
    body = orjson.loads(out.body)
    assert out.tier == "highspeed"
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"] == {"role": "assistant", "content": "Green tea is good."}
    assert body["choices"][0]["finish_reason"] == "stop"
    assert body["usage"] == {"prompt_tokens": 7, "completion_tokens": 4, "total_tokens": 11}
    sent = rig.calls("highspeed")[0]
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}


@aio
async def test_a_finished_stream_without_done_is_complete() -> None:
    rig = Rig(by_tier(highspeed=Reply(chunks=events(["Fine."], done=False)), standard=OK_STD))
    out = await rig.dispatcher.complete(rig.call())
    assert out.tier == "highspeed" and not out.trail.failures


@pytest.mark.parametrize(
    ("fast", "kinds", "fast_calls"),
    [
        (Reply(status=500, body=b"boom"), ["http_500", "http_500"], 2),  # transient: once more
        (Reply(status=503, retry_after=0.05), ["http_503", "http_503"], 2),
        (Reply(status=408), ["http_408"], 1),  # not transient: straight to the next tier
        (Reply(hang_after=0), ["timeout_ttft"], 1),
        (Reply(chunks=events(["Hi"])[:2], hang_after=2), ["stall"], 1),
        (Reply(chunks=events(LOOP)), ["check_repetition"], 1),
        (Reply(chunks=[b"data: {not json\n\n"]), ["bad_stream"], 1),
        (Reply(chunks=events(["cut"], finish=None, done=False)), ["stream_cut"], 1),
    ],
)
@aio
async def test_faults_fall_back_to_standard(fast: Reply, kinds: list[str], fast_calls: int) -> None:
    rig = Rig(by_tier(highspeed=fast, standard=OK_STD))
    out = await rig.dispatcher.complete(rig.call())
    assert out.tier == "standard"
    assert [f.reason for f in out.trail.failures] == kinds
    assert len(rig.calls("highspeed")) == fast_calls
    assert all(s.closed or s.released for s in rig.transports.by_tier["highspeed"].streams)


@aio
async def test_no_backoff_before_another_tier_only_before_the_same_one() -> None:
    rig = Rig(by_tier(highspeed=Reply(status=408), standard=OK_STD))
    out = await rig.dispatcher.complete(rig.call())
    assert out.trail.backoff_s == 0.0
    rig = Rig(by_tier(highspeed=Reply(status=503, retry_after=0.05), standard=OK_STD))
    out = await rig.dispatcher.complete(rig.call())
    assert out.trail.backoff_s == pytest.approx(0.05)


@pytest.mark.parametrize(
    ("initial", "most", "waits"),
    [
        (0.02, 0.5, [0.02, 0.04, 0.08]),  # doubled for each retry after the first
        (0.02, 0.05, [0.02, 0.04, 0.05]),  # at most backoff_max
        (0.1, 0.03, [0.03, 0.03, 0.03]),  # even the first
    ],
)
def test_backoff_doubles_up_to_backoff_max(initial: float, most: float, waits: list[float]) -> None:
    rig = Rig(by_tier(highspeed=OK_FAST), backoff_initial=initial, backoff_max=most)
    assert [rig.dispatcher.backoff(n) for n in (1, 2, 3)] == pytest.approx(waits)


@pytest.mark.parametrize(("most", "waited"), [(0.5, 0.02 + 0.04 + 0.08), (0.03, 0.02 + 0.03 * 2)])
@aio
async def test_backoff_max_caps_the_waits_before_same_tier_retries(
    most: float, waited: float
) -> None:
    rig = Rig(
        by_tier(highspeed=Reply(status=503), standard=OK_STD),
        same_tier_retries=3,
        backoff_initial=0.02,
        backoff_max=most,
    )
    out = await rig.dispatcher.complete(rig.call())
    assert out.tier == "standard" and len(rig.calls("highspeed")) == 4
    assert out.trail.backoff_s == pytest.approx(waited)


@aio
async def test_a_loop_stops_generation_early() -> None:
    slow_loop = Reply(chunks=events(LOOP * 3), gap=0.002)
    rig = Rig(by_tier(highspeed=slow_loop, standard=OK_STD))
    out = await rig.dispatcher.complete(rig.call())
    assert out.tier == "standard"
    fast = rig.transports.by_tier["highspeed"].streams[0]
    assert fast.closed and fast._i < len(slow_loop.chunks) // 10  # not read to its end


@aio
async def test_engine_client_error_is_relayed_not_retried() -> None:
    rig = Rig(by_tier(highspeed=Reply(status=400, body=b'{"error": "no"}'), standard=OK_STD))
    with pytest.raises(ClientRejected) as e:
        await rig.dispatcher.complete(rig.call())
    assert e.value.status == 400 and e.value.body == b'{"error": "no"}'
    assert "standard" not in rig.transports.by_tier or not rig.calls("standard")


@aio
async def test_hung_fast_tier_leaves_the_standard_tier_its_reserve() -> None:
    # the fast tier's TTFT timeout is far away; the deadline minus the reserve is not
    rig = Rig(by_tier(highspeed=Reply(hang_after=0), standard=OK_STD), reserve_floor=0.3)
    rig.rules.tiers["highspeed"].timeouts.__dict__["ttft"] = 30.0
    t0 = time.monotonic()
    out = await rig.dispatcher.complete(rig.call(deadline=0.8))
    # the fast tier had its time (the deadline less the reserve: 0.5 s); the standard tier
    # still answered, which it could not have done past the deadline
    assert out.tier == "standard"
    assert time.monotonic() - t0 > 0.4


@aio
async def test_last_tier_check_failure_is_delivered_with_its_name() -> None:
    rig = Rig(
        by_tier(highspeed=Reply(status=500), standard=Reply(chunks=events([""], finish="stop")))
    )
    out = await rig.dispatcher.complete(rig.call())
    assert out.tier == "standard"
    assert out.trail.checks_failed == "non_empty"


@aio
async def test_every_tier_failing_is_an_upstream_error() -> None:
    rig = Rig(by_tier(highspeed=Reply(status=500), standard=Reply(status=502)))
    with pytest.raises(UpstreamFailed):
        await rig.dispatcher.complete(rig.call())


class Sink:
    def __init__(self) -> None:
        self.data = b""
        self.eof = False

    async def write(self, data: bytes) -> None:
        self.data += data

    async def write_eof(self, data: bytes = b"") -> None:
        self.eof = True

    def payloads(self) -> list[Any]:
        out = []
        for line in self.data.split(b"\n"):
            if line.startswith(b"data: ") and line != b"data: [DONE]":
                out.append(orjson.loads(line[6:]))
        return out

    def text(self) -> str:
        return "".join(
            (c.get("delta") or {}).get("content") or ""
            for p in self.payloads()
            for c in p.get("choices") or ()
        )


async def _relay(rig: Rig, **call: Any) -> tuple[Sink, Any]:
    relay = await rig.dispatcher.stream(rig.call(stream=True, **call))
    sink = Sink()
    await relay.run(sink)
    return sink, relay


@aio
async def test_stream_relayed_untouched_and_finished() -> None:
    rig = Rig(by_tier(highspeed=OK_FAST, standard=OK_STD))
    sink, relay = await _relay(rig, stream_options={"include_usage": True})
    assert sink.data.startswith(b"".join(OK_FAST.chunks))
    assert sink.data.count(b"data: [DONE]") == 1 and sink.eof and not relay.broken


@aio
async def test_stream_asks_for_usage_and_strips_it_when_the_client_did_not() -> None:
    rig = Rig(by_tier(highspeed=OK_FAST, standard=OK_STD))
    sink, relay = await _relay(rig)
    assert rig.calls("highspeed")[0]["stream_options"] == {"include_usage": True}
    assert b'"usage"' not in sink.data and sink.data.endswith(b"data: [DONE]\n\n")
    assert sink.text() == "Green tea is good."
    assert relay.usage() == {"prompt_tokens": 7, "completion_tokens": 4, "total_tokens": 11}


@aio
async def test_stream_without_usage_is_charged_an_estimate() -> None:
    rig = Rig(by_tier(highspeed=OK_STD, standard=OK_STD))
    _, relay = await _relay(rig, text="x" * 400)
    assert relay.usage() == {"prompt_tokens": 100, "completion_tokens": 2}


@aio
async def test_stream_without_done_after_finish_gets_one_done_and_no_continuation() -> None:
    fast = Reply(chunks=events(["All ", "good."], done=False))
    rig = Rig(by_tier(highspeed=fast, standard=OK_STD))
    sink, relay = await _relay(rig)
    assert sink.data.count(b"data: [DONE]") == 1
    assert sink.text() == "All good."
    assert "standard" not in rig.transports.by_tier or not rig.calls("standard")
    assert not relay.broken


@aio
async def test_mid_stream_cut_is_continued_on_standard() -> None:
    fast = Reply(chunks=events(["Green ", "tea "], finish=None, done=False))
    std = Reply(chunks=events(["is ", "good."]))
    rig = Rig(by_tier(highspeed=fast, standard=std))
    sink, relay = await _relay(rig)
    assert sink.text() == "Green tea is good."
    assert relay.tier == "standard" and not relay.broken
    cont = rig.calls("standard")[0]
    assert cont["messages"][-1] == {"role": "assistant", "content": "Green tea "}


@aio
async def test_continuation_refused_with_4xx_ends_with_an_error_event() -> None:
    fast = Reply(chunks=events(["Green ", "tea "], finish=None, done=False))
    rig = Rig(by_tier(highspeed=fast, standard=Reply(status=400, body=b'{"error":"no prefill"}')))
    sink, relay = await _relay(rig)
    assert relay.broken
    assert b"HTTP/1.1" not in sink.data
    assert sink.payloads()[-1]["error"]["code"] == "stream_broken"
    data_lines = [ln for ln in sink.data.split(b"\n") if ln.startswith(b"data: ")]
    assert data_lines[-1] == b"data: [DONE]" and sink.eof
    assert rig.pools["standard"].continues is False  # learned: never sent a prefix again


@aio
async def test_client_leaving_closes_the_upstream() -> None:
    fast = Reply(chunks=events(["x "] * 50), gap=0.01)
    rig = Rig(by_tier(highspeed=fast, standard=OK_STD))
    relay = await rig.dispatcher.stream(rig.call(stream=True))
    sink = Sink()
    task = asyncio.ensure_future(relay.run(sink))
    await wait_until_async(lambda: b"x " in sink.data, "the stream under way")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert rig.transports.by_tier["highspeed"].streams[0].closed
    assert rig.pools["highspeed"].replicas[0].in_flight == 0


@aio
async def test_a_slow_first_token_is_hedged_and_the_loser_closed() -> None:
    slow = Reply(chunks=events(["Late."]), delay=0.45)
    rig = Rig(by_tier(highspeed=slow, standard=OK_STD), hedge_after=0.05)
    for stream in (False, True):
        if stream:
            relay = await rig.dispatcher.stream(rig.call(stream=True))
            tier, trail = relay.tier, relay.trail
            relay.abandon()
        else:
            out = await rig.dispatcher.complete(rig.call())
            tier, trail = out.tier, out.trail
        # the race's winner says the hedge worked; the slow stream never giving its first
        # chunk says nothing waited for it
        assert tier == "standard" and trail.hedge == "standard after 0.05s; standard won"
        assert rig.transports.by_tier["highspeed"].streams[-1]._i == 0
    assert all(s.closed for s in rig.transports.by_tier["highspeed"].streams)
    assert rig.pools["highspeed"].replicas[0].in_flight == 0


@pytest.mark.parametrize(
    ("setting", "ttft_samples", "delay"),
    [
        (0.3, [], 0.3),  # a number is the delay
        ("auto", [], 1.0),  # no sample yet
        ("auto", [0.005] * 10, 0.02),  # 3x 5 ms is under the floor
        ("auto", [0.007] * 14 + [0.1] * 2, 0.3),  # 3x the p90
        ("auto", [0.9] * 10, 2.0),  # the ceiling
    ],
)
def test_the_hedge_delay(setting: float | str, ttft_samples: list[float], delay: float) -> None:
    rig = Rig(by_tier(highspeed=OK_FAST, standard=OK_STD))
    for s in ttft_samples:
        rig.dispatcher.book.add("highspeed", "ttft", s)
    assert rig.dispatcher._hedge_delay(setting, "highspeed") == pytest.approx(delay)


@aio
async def test_hedges_are_capped_by_their_budget() -> None:
    slow = Reply(chunks=events(["Late."]), delay=0.12)
    rig = Rig(
        by_tier(highspeed=slow, standard=OK_STD), hedge_after=0.02, hedge_share=0.0, hedge_burst=1
    )
    outs = [await rig.dispatcher.complete(rig.call()) for _ in range(3)]
    assert [o.tier for o in outs] == ["standard", "highspeed", "highspeed"]  # one saved hedge
    assert rig.dispatcher.hedges.fired == 1


@aio
async def test_a_fast_first_token_is_never_hedged() -> None:
    rig = Rig(by_tier(highspeed=OK_FAST, standard=OK_STD), hedge_after=0.05)
    out = await rig.dispatcher.complete(rig.call())
    assert out.tier == "highspeed" and out.trail.hedge is None
    assert "standard" not in rig.transports.by_tier or not rig.calls("standard")


def _guard_run(pieces: list[str]) -> tuple[bool, bool]:
    """Feed pieces to a LoopGuard: (held at the end, confirmed at some point)."""
    from gateway.checks.loopguard import LoopGuard
    from gateway.upstream.sse import StreamState

    state, guard, confirmed, held = StreamState(True), LoopGuard(), False, False
    for piece in pieces:
        state.parts.append(piece)
        state.chars += len(piece)
        held = guard.update(state)
        confirmed = confirmed or guard.confirmed(state)
    return held, confirmed


@pytest.mark.parametrize(
    ("name", "pieces", "held", "confirmed"),
    [
        (
            "prose",
            [f"{w} grows by the river; " for w in ("Ash", "Birch", "Cedar", "Elm", "Fir")],
            False,
            False,
        ),
        ("a loop", ["Intro text here. ", *["I will repeat this sentence again. "] * 8], True, True),
        (
            "a numbered list of 12 same items: held while it runs, not a loop",
            ["Steps: ", *[f"{i}. Open the door. " for i in range(3, 15)]],
            True,
            False,
        ),
        (
            "a numbered loop",
            ["Steps: ", *[f"{i}. Restart the build server.\n" for i in range(10, 45)]],
            True,
            True,
        ),
        ("a counter is not a numbered loop", [f"word{i} " for i in range(60)], False, False),
        (
            "numbers in a table",
            ["| a | b |\n", *[f"| {i} | {i * 7} |\n" for i in range(10, 99)]],
            False,
            False,
        ),
        (
            "two copies only",
            ["Hello there friend. ", "Hello there friend. ", "Bye now."],
            False,
            False,
        ),
        ("same rows", ["| a | b |\n", *["| 1 | 2 |\n"] * 3], True, False),  # held, not a loop
        ("table then prose", [*[f"| {i} | x |\n" for i in range(4)], "That is all."], False, False),
    ],
)
def test_loop_guard(name: str, pieces: list[str], held: bool, confirmed: bool) -> None:
    assert _guard_run(pieces) == (held, confirmed), name


@aio
async def test_a_live_loop_reaches_the_client_at_most_twice() -> None:
    unit = "I will repeat this sentence again. "
    fast = Reply(chunks=events(["Green ", "tea ", "is ", *[unit] * 40], finish=None, done=False))
    std = Reply(chunks=events(["good."]))
    rig = Rig(by_tier(highspeed=fast, standard=std))
    sink, relay = await _relay(rig)
    assert sink.text().count(unit.strip()) <= 2
    assert sink.text().endswith("good.") and relay.tier == "standard"
    # from before the loop (it may start at the space it shares with the text)
    assert rig.calls("standard")[0]["messages"][-1]["content"] in ("Green tea is ", "Green tea is")


def _noting_reads(fast: Reply, std: Reply) -> tuple[Rig, list[int]]:
    """A rig whose standard tier notes, each time it is called, how many chunks the fast
    tier's stream had given by then."""
    reads: list[int] = []

    def handler(tier: str, body: dict[str, Any]) -> Reply:
        if tier == "highspeed":
            return fast
        reads.append(rig.transports.by_tier["highspeed"].streams[0]._i)
        return std

    rig = Rig(handler)
    return rig, reads


@aio
async def test_a_candidate_loop_opens_its_continuation_ahead() -> None:
    # held from its second copy, confirmed at 200 characters (the sixth copy of this
    # 35-character unit): the continuation is asked for at the second copy, and used
    unit = "I will repeat this sentence again. "
    texts = ["Green ", "tea ", "is ", *[unit] * 40]
    fast = Reply(chunks=events(texts, finish=None, done=False), gap=0.003)
    rig, read_when_called = _noting_reads(fast, Reply(chunks=events(["good."])))
    sink, relay = await _relay(rig)
    assert sink.text().count(unit.strip()) <= 2 and sink.text().endswith("good.")
    assert relay.tier == "standard" and len(rig.calls("standard")) == 1  # opened once
    second_copy = 1 + 3 + 2  # chunks read by then: the role chunk, three words, two copies
    assert read_when_called[0] in (second_copy, second_copy + 1)  # not at the sixth
    assert rig.calls("standard")[0]["messages"][-1]["content"] in ("Green tea is ", "Green tea is")
    assert [f.reason for f in relay.trail.failures] == ["check_repetition"]
    assert rig.pools["standard"].replicas[0].in_flight == 0


@pytest.mark.parametrize(
    ("name", "rows", "opened"),
    [
        ("a table whose rows repeat, then prose", [["| 1 | 2 | 3 | 4 |\n"] * 4], 1),
        (
            "three such tables: at most two continuations ahead",
            [[f"| {c} | {c} | {c} | {c} |\n"] * 4 for c in "xyz"],
            2,
        ),
    ],
)
@aio
async def test_a_candidate_that_breaks_off_drops_its_continuation(
    name: str, rows: list[list[str]], opened: int
) -> None:
    texts = ["Rows:\n"]
    for table in rows:
        texts += [*table, "That is all there is to say here.\n"]
    fast = Reply(chunks=events(texts), gap=0.01)
    std = Reply(chunks=events(["unused."]), delay=0.5)  # still opening when it is dropped
    rig = Rig(by_tier(highspeed=fast, standard=std))
    sink, relay = await _relay(rig)
    assert sink.text() == "".join(texts) and relay.tier == "highspeed", name
    assert not relay.trail.failures and not relay.broken
    assert len(rig.calls("standard")) == opened, name
    await _unwound(rig, "standard")  # the dropped openings


@pytest.mark.parametrize(
    ("done", "finish", "ends_in_error"),
    [(True, "stop", False), (False, "stop", False), (False, None, True)],
    ids=["done", "finish-without-done", "cut"],
)
@aio
async def test_passthrough_stream_endings(
    done: bool, finish: str | None, ends_in_error: bool
) -> None:
    # batch SLA -> the standard tier alone, checks [non_empty]: bytes relayed unparsed
    std = Reply(chunks=events(["Fine ", "answer."], finish=finish, done=done))
    rig = Rig(by_tier(highspeed=OK_FAST, standard=std))
    relay = await rig.dispatcher.stream(rig.call(stream=True, headers={"x-gateway-sla": "batch"}))
    assert relay.tier == "standard" and not relay.start.live
    sink = Sink()
    await relay.run(sink)
    assert sink.data.count(b"data: [DONE]") == 1
    assert relay.broken is ends_in_error
    assert sink.text() == "Fine answer."


@aio
async def test_last_tier_check_failure_is_delivered_on_streams_too() -> None:
    leak = Reply(chunks=events(["Answer<|im_end|>", " more."]))
    rig = Rig(by_tier(highspeed=Reply(status=500), standard=leak))
    relay = await rig.dispatcher.stream(rig.call(stream=True))
    assert relay.tier == "standard" and relay.trail.checks_failed == "template_leak"
    relay.abandon()


@aio
async def test_a_client_leaving_during_the_hedge_delay_cancels_the_first_attempt() -> None:
    from gateway.dispatch.hedge import race

    started, cancelled = asyncio.Event(), asyncio.Event()

    async def first() -> str:
        started.set()
        try:
            await asyncio.sleep(10)  # an attempt that never ends by itself
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "late"

    async def second() -> str:
        return "never"

    waiting = asyncio.ensure_future(race(first, second, asyncio.Event(), 5.0, lambda: True))
    await asyncio.wait_for(started.wait(), 5.0)  # the race waits out its 5 s hedge delay
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    await asyncio.wait_for(cancelled.wait(), 5.0)


@aio
async def test_the_race_wakes_when_the_first_attempt_ends_before_the_delay() -> None:
    from gateway.dispatch.hedge import race

    async def first() -> str:
        await asyncio.sleep(0.01)  # it ends well before the hedge delay
        return "fast"

    async def second() -> str:
        raise AssertionError("no hedge for an attempt that ended")

    t0 = time.monotonic()
    assert await race(first, second, asyncio.Event(), 60.0, lambda: True) == (0, False, "fast")
    assert time.monotonic() - t0 < 30.0  # woken by the end, not the 60 s delay: any busy machine


@pytest.mark.parametrize(
    ("finish", "chars", "passed"),
    [
        ("stop", 300, {"repetition", "template_leak"}),
        ("length", 300, {"template_leak"}),  # "length" changes the repetition verdict
        ("stop", 5000, {"template_leak"}),  # longer than the window: not all of it was seen
    ],
)
def test_what_the_live_phase_passed_on_the_whole_text(
    finish: str, chars: int, passed: set[str]
) -> None:
    """The final check of a non-streamed answer skips only what the live phase settled."""
    from gateway.checks.base import RequestFacts
    from gateway.checks.config import CheckSettings
    from gateway.checks.registry import build_checks as build
    from gateway.dispatch.live import LiveChecks
    from gateway.upstream.sse import StreamState

    checks = build(CheckSettings())
    live = LiveChecks(
        [checks["repetition"], checks["template_leak"]],
        RequestFacts(False, False, None, {}),
        256,
        4096,
    )
    state = StreamState(True)
    rnd = random.Random(7)
    text = "".join(rnd.choice("abcdefghij klmnop") for _ in range(chars))
    state.parts, state.chars = [text], chars
    assert live.maybe_run(state) is None
    state.finish_reason = finish
    assert live.passed_whole(state) == {id(checks[name]) for name in passed}


@aio
async def test_a_leak_in_a_short_answer_is_caught_non_streamed() -> None:
    fast = Reply(chunks=events(["Sure, here it is.", "<|im_end|>", " More."]))
    rig = Rig(by_tier(highspeed=fast, standard=OK_STD))
    out = await rig.dispatcher.complete(rig.call())
    assert out.tier == "standard"
    assert [f.reason for f in out.trail.failures] == ["check_template_leak"]


@pytest.mark.parametrize("leaves_first", [True, False])
@aio
async def test_a_hedges_answer_that_arrives_as_the_client_leaves_gives_its_slot_back(
    leaves_first: bool,
) -> None:
    """The hedge answers in the same turn of the loop as the client leaves (before or after
    the hedge's own stop of the first attempt): the race ends cancelled, and the hedge's
    answer, used by no one, gives its slot back."""
    from gateway.dispatch.hedge import race

    class Start:
        discarded = False

        def discard(self) -> None:
            self.discarded = True

    start = Start()
    outer: asyncio.Future[Any] | None = None
    first_stopped = asyncio.Event()

    async def first() -> Start:
        try:
            await asyncio.sleep(10)  # a first tier that never answers
        finally:
            first_stopped.set()
        return Start()

    async def second() -> Start:
        await asyncio.sleep(0.01)  # the hedge's answer arrives a moment later
        assert outer is not None
        loop = asyncio.get_running_loop()
        if leaves_first:
            loop.call_soon(outer.cancel)  # runs before the hedge's done callback
        else:
            cancel = outer.cancel
            loop.call_soon(lambda: loop.call_soon(cancel))  # runs after it
        return start

    outer = asyncio.ensure_future(race(first, second, asyncio.Event(), 0.01, lambda: True))
    with pytest.raises(asyncio.CancelledError):
        await outer
    assert first_stopped.is_set()
    assert start.discarded


@aio
async def test_the_hedge_that_wins_stops_the_first_attempt_and_the_task_goes_on() -> None:
    """The hedge's answer wins: the first attempt is stopped where it waits, and the task
    that ran the race is not left cancelled (its next wait does not raise)."""
    from gateway.dispatch.hedge import race

    stopped = asyncio.Event()

    async def first() -> str:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            stopped.set()
            raise
        return "late"

    async def second() -> str:
        return "hedge"

    assert await race(first, second, asyncio.Event(), 0.01, lambda: True) == (1, True, "hedge")
    assert stopped.is_set()
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0
    await asyncio.sleep(0)  # no cancellation left pending


@pytest.mark.parametrize(
    ("first_fails", "second_fails", "want"),
    [
        (True, False, (1, True, "hedge")),  # the first failed: the hedge's answer
        (False, True, (0, True, "first")),  # the hedge failed: the first still answers
        (True, True, "BothFailed"),
    ],
)
@aio
async def test_a_hedged_race_takes_the_answer_that_did_not_fail(
    first_fails: bool, second_fails: bool, want: Any
) -> None:
    from gateway.dispatch.hedge import BothFailed, race
    from gateway.upstream.failures import StreamCut

    async def first() -> str:
        await asyncio.sleep(0.05)
        if first_fails:
            raise StreamCut("first cut")
        return "first"

    async def second() -> str:
        await asyncio.sleep(0.01 if second_fails else 0.1)
        if second_fails:
            raise StreamCut("hedge cut")
        return "hedge"

    if want == "BothFailed":
        with pytest.raises(BothFailed):
            await race(first, second, asyncio.Event(), 0.01, lambda: True)
    else:
        assert await race(first, second, asyncio.Event(), 0.01, lambda: True) == want


@aio
async def test_hedged_attempts_waiting_side_by_side_count_their_wait_once() -> None:
    """Both tiers are slow to a token: summed, their waits would exceed the time the race
    took and zero the overhead the gateway reports."""
    slow = Reply(chunks=events(["Late."]), delay=0.4)
    std = Reply(chunks=events(["Standard answer."]), delay=0.2)
    rig = Rig(by_tier(highspeed=slow, standard=std), hedge_after=0.05)
    t0 = time.monotonic()
    out = await rig.dispatcher.complete(rig.call())
    took = time.monotonic() - t0
    assert out.tier == "standard" and out.trail.hedge is not None
    assert 0.2 <= out.trail.upstream_s <= took + 0.01


# -- the minimum-rate guard ---------------------------------------------------------------------
WORDS = [f"word{i} " for i in range(40)]
TRICKLE = Reply(chunks=events(WORDS), gap=0.05)  # ~20 tokens/s for 2 s


@aio
async def test_a_trickling_answer_goes_to_the_next_tier() -> None:
    rig = Rig(by_tier(highspeed=TRICKLE, standard=OK_STD), rate=(40.0, 0.25))
    out = await rig.dispatcher.complete(rig.call())
    assert out.tier == "standard" and [f.reason for f in out.trail.failures] == ["too_slow"]
    trickle = rig.transports.by_tier["highspeed"].streams[0]
    assert trickle.closed  # the engine stops
    assert trickle._i < len(WORDS) // 2  # within the guard's 0.25 s window, not at the end


@aio
async def test_a_trickling_stream_is_continued_on_the_next_tier() -> None:
    rig = Rig(by_tier(highspeed=TRICKLE, standard=OK_STD), rate=(40.0, 0.25))
    sink, relay = await _relay(rig)
    assert relay.tier == "standard" and not relay.broken
    assert sink.text().startswith("word0 ") and sink.text().endswith("Standard answer.")
    assert [f.reason for f in relay.trail.failures] == ["too_slow"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("rate", "headers", "tier"),
    [
        ((10.0, 0.25), None, "highspeed"),  # fast enough for the guard
        ((0.0, 0.25), None, "highspeed"),  # off
        ((40.0, 0.25), {"x-gateway-tier": "standard"}, "standard"),  # the last tier: no guard
    ],
)
def test_what_the_rate_guard_leaves_alone(
    rate: tuple[float, float], headers: dict[str, str] | None, tier: str
) -> None:
    rig = Rig(by_tier(highspeed=TRICKLE, standard=TRICKLE), rate=rate)
    out = asyncio.run(rig.dispatcher.complete(rig.call(headers=headers)))
    assert out.tier == tier and not out.trail.failures, out.trail.failures
    assert orjson.loads(out.body)["choices"][0]["message"]["content"] == "".join(WORDS)


@pytest.mark.parametrize(
    ("arrivals", "fails_at"),
    [
        ([(0.0, 0), (0.5, 0), (1.0, 1)], None),  # the clock starts at the first token
        ([(1.0, 1), (1.5, 2), (2.0, 11)], None),  # 10 events in the 1 s window: enough
        ([(1.0, 1), (1.9, 9), (2.0, 10)], 2),  # 9 in 1 s: too slow
        ([(1.0, 1), (4.0, 31)], None),  # a burst after a long gap: 10/s on average
        ([(1.0, 1), (2.0, 11), (3.0, 15)], 2),  # the second window is too slow
    ],
)
def test_rate_guard_windows(arrivals: list[tuple[float, int]], fails_at: int | None) -> None:
    from gateway.dispatch.rate import RateGuard

    guard = RateGuard(10.0, 1.0)
    for i, (now, events_so_far) in enumerate(arrivals):
        try:
            guard.check(events_so_far, now)
        except TooSlow:
            assert i == fails_at
            return
    assert fails_at is None


# -- a non-streamed answer continues the good text of a tier that broke off ------------------
HEAD = ["Tea ", "is ", "a ", "drink. "]


def _content(out: Any) -> str:
    return str(orjson.loads(out.body)["choices"][0]["message"]["content"])


@pytest.mark.parametrize(
    ("fast", "prefix", "kind"),
    [  # what came before a loop (here its periodic run begins with the ". " before the
        # first copy) or a leaked template token; before a cut or a stall, all of it
        (Reply(chunks=events(HEAD + LOOP)), "Tea is a drink", "check_repetition"),
        (Reply(chunks=events(HEAD, finish=None, done=False)), "Tea is a drink. ", "stream_cut"),
        (
            Reply(chunks=events([*HEAD, "<|im_end|>", "x"])),
            "Tea is a drink. ",
            "check_template_leak",
        ),
        (Reply(chunks=events(HEAD)[:5], hang_after=5), "Tea is a drink. ", "stall"),
        (  # in the first token's event: the attempt fails while it is being opened
            Reply(chunks=events(["Tea is a drink. <|im_end|>", "x"])),
            "Tea is a drink. ",
            "check_template_leak",
        ),
    ],
)
@aio
async def test_a_non_streamed_answer_continues_what_the_first_tier_got_right(
    fast: Reply, prefix: str, kind: str
) -> None:
    std = Reply(chunks=events(["More ", "about ", "tea."], prompt_tokens=30, completion_tokens=3))
    rig = Rig(by_tier(highspeed=fast, standard=std))
    out = await rig.dispatcher.complete(rig.call())
    assert out.tier == "standard" and [f.reason for f in out.trail.failures] == [kind]
    assert _content(out) == prefix + "More about tea."
    assert out.trail.continued == f"highspeed:{len(prefix)}"
    sent = rig.calls("standard")[0]
    assert sent["messages"][-1] == {"role": "assistant", "content": prefix} and sent["stream"]
    usage = orjson.loads(out.body)["usage"]  # both tiers: the prefix's tokens are the first's
    assert usage["completion_tokens"] > 3 and usage["prompt_tokens"] > 30
    rig = Rig(by_tier(highspeed=Reply(chunks=events(LOOP)), standard=std))
    out = await rig.dispatcher.complete(rig.call())
    assert _content(out) == "More about tea." and out.trail.continued is None  # nothing to keep


@aio
async def test_a_non_streamed_candidate_loop_opens_its_continuation_ahead() -> None:
    texts = [*HEAD, *LOOP]
    fast = Reply(chunks=events(texts, finish=None, done=False), gap=0.003)
    rig, read_when_called = _noting_reads(fast, Reply(chunks=events(["More ", "about ", "tea."])))
    out = await rig.dispatcher.complete(rig.call())
    assert out.tier == "standard" and _content(out) == "Tea is a drinkMore about tea."
    assert len(rig.calls("standard")) == 1 and out.trail.continued == "highspeed:14"
    second_copy = 1 + len(HEAD) + 2  # the role chunk, the head, two copies
    assert read_when_called[0] in (second_copy, second_copy + 1)  # not at the sixth copy
    # failed when the guard confirmed it (200 characters: the sixth copy), not at the
    # repetition check's next run (every 128 characters: the seventh)
    assert rig.transports.by_tier["highspeed"].streams[0]._i == 1 + len(HEAD) + 6
    assert rig.pools["standard"].replicas[0].in_flight == 0


@aio
async def test_a_non_streamed_candidate_that_breaks_off_drops_its_continuation() -> None:
    texts = ["Rows:\n", *["| 1 | 2 | 3 | 4 |\n"] * 4, "That is all there is to say here.\n"]
    fast = Reply(chunks=events(texts), gap=0.01)
    std = Reply(chunks=events(["unused."]), delay=0.5)  # still opening when it is dropped
    rig = Rig(by_tier(highspeed=fast, standard=std))
    out = await rig.dispatcher.complete(rig.call())
    assert out.tier == "highspeed" and _content(out) == "".join(texts)
    assert not out.trail.failures and len(rig.calls("standard")) == 1
    await _unwound(rig, "standard")  # the dropped opening


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "plain"])
@pytest.mark.parametrize(
    ("min_tokens", "continued_min"),  # the first tier gave 20: the rest is the continuation's
    [(None, None), (95, 75), (10, 0), (100, 80)],
)
@aio
async def test_a_continuation_never_runs_past_the_clients_max_tokens(
    stream: bool, min_tokens: int | None, continued_min: int | None
) -> None:
    # an engine that decodes speculatively sends several tokens an event: 20 words in 5
    # events are 20 tokens or more, not 5 (the continuation may have 80 of 100, not 95)
    texts = ["Tea is a fine drink ", "that many people enjoy ", "in the morning and "]
    texts += ["in the late evening ", "with some milk "]
    fast = Reply(chunks=events(texts, finish=None, done=False))
    std = Reply(chunks=events(["More."], prompt_tokens=40, completion_tokens=2))
    rig = Rig(by_tier(highspeed=fast, standard=std))
    limits: dict[str, Any] = (
        {"max_tokens": 100} if min_tokens is None else {"max_tokens": 100, "min_tokens": min_tokens}
    )
    if stream:
        sink, _ = await _relay(rig, **limits, stream_options={"include_usage": True})
        usage = sink.payloads()[-1]["usage"]
    else:
        out = await rig.dispatcher.complete(rig.call(**limits))
        usage = orjson.loads(out.body)["usage"]
    assert rig.calls("standard")[0]["max_tokens"] == 100 - 20
    assert rig.calls("standard")[0].get("min_tokens") == continued_min
    assert usage["completion_tokens"] == 20 + 2  # both tiers' tokens, the first estimated


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "plain"])
@aio
async def test_a_clients_own_assistant_prefix_is_continued_as_one_message(stream: bool) -> None:
    fast = Reply(chunks=events([" a ", "drink. "], finish=None, done=False))
    std = Reply(chunks=events(["More."]))
    rig = Rig(by_tier(highspeed=fast, standard=std), continuation="continue_final_message")
    own = [{"role": "user", "content": "Tea?"}, {"role": "assistant", "content": "Tea is"}]
    if stream:
        sink, _ = await _relay(rig, messages=own, continue_final_message=True)
        assert sink.text() == " a drink. More."
    else:
        out = await rig.dispatcher.complete(rig.call(messages=own, continue_final_message=True))
        assert _content(out) == " a drink. More."
    sent = rig.calls("standard")[0]
    assert sent["messages"] == [own[0], {"role": "assistant", "content": "Tea is a drink. "}]
    assert sent["continue_final_message"] is True


@aio
async def test_a_tier_that_refuses_a_prefix_starts_over_and_is_not_asked_again() -> None:
    refuse = Reply(status=400, body=b'{"error": "no prefill"}')
    fast = Reply(chunks=events(HEAD, finish=None, done=False))
    rig = Rig(by_tier(highspeed=fast, standard=[refuse, OK_STD]))
    out = await rig.dispatcher.complete(rig.call())
    assert out.tier == "standard" and _content(out) == "Standard answer."
    assert out.trail.continued is None and rig.pools["standard"].continues is False
    assert [c["messages"][-1]["role"] for c in rig.calls("standard")] == ["assistant", "user"]


@aio
async def test_no_continuation_where_it_cannot_be_one() -> None:
    fast = Reply(chunks=events(HEAD, finish=None, done=False))
    rig = Rig(by_tier(highspeed=fast, standard=OK_STD))
    out = await rig.dispatcher.complete(rig.call(n=2))  # n > 1: every choice starts over
    assert out.tier == "standard" and out.trail.continued is None
    assert rig.calls("standard")[0]["messages"][-1]["role"] == "user"


# -- a hedge the standard tier won, handed back to the fast tier (bridge.py) --------------------
SLOW_FIRST = Reply(chunks=events(["Late."]), delay=0.45)  # the fast tier's first request
STD_LONG = Reply(
    chunks=events(["Tea ", "is ", "a ", "drink ", "too."], prompt_tokens=9, completion_tokens=5),
    gap=0.02,
)


def _fast(texts: list[str], **kw: Any) -> Reply:
    """The fast tier's continuation, with an id of its own (the client must not see it)."""
    chunks = events(texts, prompt_tokens=12, completion_tokens=len(texts))
    return Reply(chunks=[c.replace(b"chatcmpl-1", b"chatcmpl-F") for c in chunks], **kw)


async def _answer(rig: Rig, stream: bool, **call: Any) -> tuple[str, str, Any, dict[str, Any]]:
    """(text, answering tier, trail, usage) of one request, streamed or not."""
    if stream:
        sink, relay = await _relay(rig, stream_options={"include_usage": True}, **call)
        assert not relay.broken and sink.data.count(b"data: [DONE]") == 1
        assert {p["id"] for p in sink.payloads()} == {
            "chatcmpl-1"
        }  # one stream, as the client sees
        roles = [c for p in sink.payloads() for c in p["choices"] if "role" in c.get("delta", {})]
        assert len(roles) == 1
        if relay.trail.bridged:
            assert f": x-gateway-continued {relay.trail.bridged}".encode() in sink.data
        return sink.text(), relay.tier, relay.trail, sink.payloads()[-1]["usage"]
    out = await rig.dispatcher.complete(rig.call(**call))
    body = orjson.loads(out.body)
    assert body["id"] == "chatcmpl-1"
    return _content(out), out.tier, out.trail, body["usage"]


async def _closed_and_free(rig: Rig) -> None:
    """Until every stream is closed or released and every slot free (an attempt that lost
    unwinds in its own task, after the answer)."""
    for tier, t in rig.transports.by_tier.items():

        def settled(t: MemoryTransport = t, tier: str = tier) -> bool:
            return (
                all(s.closed or s.released for s in t.streams)
                and rig.pools[tier].replicas[0].in_flight == 0
            )

        await wait_until_async(settled, f"every {tier} stream closed or released and its slot free")


async def _unwound(rig: Rig, tier: str) -> None:
    """Until every stream of ``tier`` is closed and its slot free (dropped attempts unwind
    in their own tasks)."""
    await wait_until_async(
        lambda: (
            all(s.closed for s in rig.transports.by_tier[tier].streams)
            and rig.pools[tier].replicas[0].in_flight == 0
        ),
        f"every {tier} stream closed and its slot free",
    )


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "plain"])
@aio
async def test_a_hedge_the_standard_tier_won_is_handed_back_to_the_fast_tier(stream: bool) -> None:
    fast = [SLOW_FIRST, _fast(["is ", "a ", "fine ", "drink."])]
    rig = Rig(
        by_tier(highspeed=fast, standard=STD_LONG),
        hedge_after=0.05,
        continuation="continue_final_message",
    )
    text, tier, trail, usage = await _answer(rig, stream, max_tokens=50)
    assert rig.transports.by_tier["highspeed"].streams[0]._i == 0  # nothing waited for it
    assert text == "Tea is a fine drink." and tier == "highspeed"
    assert trail.hedge == "standard after 0.05s; standard won" and trail.bridged == "standard:4"
    assert not trail.failures
    sent = rig.calls("highspeed")[1]  # the continuation of what the standard tier began
    assert sent["messages"][-1] == {"role": "assistant", "content": "Tea "}
    assert sent["continue_final_message"] is True and sent["max_tokens"] == 49
    assert usage["completion_tokens"] == 1 + 4  # the standard tier's token, the fast tier's
    await _unwound(rig, "standard")  # its engine stops
    await _closed_and_free(rig)


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "plain"])
@pytest.mark.parametrize(
    ("fast_again", "continuation", "dispatch"),
    [
        (_fast(["is ", "a ", "fine ", "drink."], delay=0.3), "continue_final_message", {}),
        (Reply(status=503), "continue_final_message", {}),  # refused: the standard goes on
        (_fast(["is ", "fine."]), "prefill", {}),  # an engine that repeats the prefix
        (_fast(["is ", "fine."]), "continue_final_message", {"bridge": False}),
    ],
    ids=["too-late", "fails", "repeats-prefix", "off"],
)
@aio
async def test_where_a_hedge_is_not_handed_back_the_standard_tier_answers_it_all(
    stream: bool, fast_again: Reply, continuation: str, dispatch: dict[str, Any]
) -> None:
    rig = Rig(
        by_tier(highspeed=[SLOW_FIRST, fast_again], standard=STD_LONG),
        hedge_after=0.05,
        continuation=continuation,
        **dispatch,
    )
    text, tier, trail, _ = await _answer(rig, stream)
    assert text == "Tea is a drink too." and tier == "standard"
    assert trail.bridged is None and not trail.failures  # the bridge was only ever an option
    await _closed_and_free(rig)


@pytest.mark.parametrize(
    ("body", "continuation", "possible"),
    [
        ({}, "continue_final_message", True),
        ({}, "continue_final_message_no_gen", True),
        ({}, "prefill", False),  # it repeats the prefix in front of its answer
        ({}, "off", False),
        ({"n": 2}, "continue_final_message", False),
        ({"response_format": {"type": "json_object"}}, "continue_final_message", False),
        (
            {"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]},
            "continue_final_message",
            False,
        ),
    ],
)
def test_where_a_hedge_can_be_handed_back(
    body: dict[str, Any], continuation: str, possible: bool
) -> None:
    from gateway.dispatch.bridge import possible as bridge_possible
    from gateway.dispatch.outcome import BridgePlan

    rig = Rig(by_tier(highspeed=OK_FAST, standard=OK_STD), continuation=continuation)
    plan = BridgePlan("highspeed", 0.05, time.monotonic() + 5)
    assert bridge_possible(rig.call(**body), rig.pools, plan) is possible


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "plain"])
@aio
async def test_a_handed_back_answer_that_loops_is_continued_on_the_standard_tier(
    stream: bool,
) -> None:
    fast = [SLOW_FIRST, _fast(["is ", "a ", "drink. ", *LOOP], gap=0.001)]
    std_rest = Reply(chunks=events(["More ", "about ", "tea."], prompt_tokens=30))
    rig = Rig(
        by_tier(highspeed=fast, standard=[STD_LONG, std_rest]),
        hedge_after=0.05,
        continuation="continue_final_message",
    )
    text, tier, trail, _ = await _answer(rig, stream)
    assert tier == "standard" and [f.short() for f in trail.failures] == [
        "highspeed:check_repetition"
    ]
    assert text.startswith("Tea is a drink") and text.endswith("More about tea.")
    assert text.count("I will repeat") <= (2 if stream else 0)  # what the loop guard lets out
    cont = rig.calls("standard")[1]  # the standard tier continues the whole text: its own too
    assert cont["messages"][-1]["content"].startswith("Tea is a drink")
    await _closed_and_free(rig)


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "plain"])
@aio
async def test_a_client_leaving_while_a_hedge_is_handed_back_frees_every_slot(
    stream: bool,
) -> None:
    fast = [Reply(chunks=events(["Late."]), delay=2.0), _fast(["is ", "fine."], delay=1.0)]
    rig = Rig(
        by_tier(highspeed=fast, standard=STD_LONG),
        hedge_after=0.2,
        continuation="continue_final_message",
    )

    async def ask() -> None:
        if stream:
            await _relay(rig)
        else:
            await rig.dispatcher.complete(rig.call())

    task = asyncio.ensure_future(ask())
    # the hedge at 0.2 s, its first token, the hand-back asked for; its answer takes 1 s
    await wait_until_async(lambda: len(rig.calls("highspeed")) == 2, "the hand-back")
    assert not task.done()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for tier, t in rig.transports.by_tier.items():
        assert len(t.streams) == len(rig.calls(tier)), tier
        await _unwound(rig, tier)


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "plain"])
@aio
async def test_a_handed_back_answer_that_trickles_is_continued_on_the_standard_tier(
    stream: bool,
) -> None:
    """The minimum rate guards a hand-back like the fast tier's first attempt: the
    standard tier is still after it."""
    late = Reply(chunks=events(["Late."]), delay=3.0)  # not done before the trickle is seen
    fast = [late, _fast(WORDS, gap=0.05)]  # ~20 tokens/s for 2 s
    std_rest = Reply(chunks=events(["More ", "about ", "tea."], prompt_tokens=30))
    rig = Rig(
        by_tier(highspeed=fast, standard=[STD_LONG, std_rest]),
        hedge_after=0.15,  # the trickle's first token (0.1 s) comes within it
        rate=(40.0, 0.25),
        continuation="continue_final_message",
    )
    text, tier, trail, _ = await _answer(rig, stream)
    # (non-streamed, the first attempt's own first-token timeout comes before it)
    assert tier == "standard" and trail.failures[-1].short() == "highspeed:too_slow"
    assert text.startswith("Tea word0 ") and text.endswith("More about tea.")
    trickle = rig.transports.by_tier["highspeed"].streams[1]
    assert trickle._i < len(WORDS) // 2  # cut while it trickled, not read to its end
    await _closed_and_free(rig)
