"""A stream that can always be finished (gateway/dispatch/finish.py), on the in-memory
transport: the plan told before the first byte, and a break after it finished by the next
tier whatever it can do — continue the text, go on from a continuation prompt, or restart
and send the client only what it has not seen."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from gateway.checks.registry import build_checks
from gateway.dispatch.attempts import Dispatcher
from gateway.dispatch.finish import PARAGRAPH, separator, way
from gateway.rules.schema import Rules
from gateway.telemetry.recorder import Telemetry
from gateway.upstream.pools import Pools
from tests.memory_transport import Handler, Reply, Transports, events
from tests.test_dispatch_memory import Rig, Sink, aio, by_tier

ANSWER = ["Green ", "tea ", "is ", "made ", "from ", "young ", "leaves."]
WHOLE = "".join(ANSWER)
UNIT = "I will repeat this sentence again. "
CUT = Reply(chunks=events(ANSWER[:3], finish=None, done=False))  # "Green tea is " then cut
LOOP = Reply(chunks=events([*ANSWER[:3], *[UNIT] * 40], finish=None, done=False))
REFUSED = Reply(status=400, body=b'{"error": {"message": "no assistant prefill"}}')


class _Rig(Rig):
    """The test rig, its standard tier with the settings ``std`` on top of the test rules'."""

    def __init__(
        self,
        handler: Handler,
        std: dict[str, Any] | None = None,
        fast: dict[str, Any] | None = None,
    ):
        super().__init__(handler)
        data = self.rules.model_dump()
        data["tiers"]["standard"] |= std or {}
        data["tiers"]["highspeed"] |= fast or {}
        self.rules = Rules.model_validate(data)
        self.transports = Transports(handler)
        self.pools = Pools(dict(self.rules.tiers), self.transports)
        self.dispatcher = Dispatcher(
            self.pools,
            build_checks(self.rules.checks),
            self.rules.dispatch,
            Telemetry(),
        )


def _no_prefill(answer: Reply) -> Callable[[dict[str, Any]], Reply]:
    """A standard tier that refuses an assistant prefix (400) and answers a fresh request."""

    def reply(body: dict[str, Any]) -> Reply:
        return REFUSED if body["messages"][-1]["role"] == "assistant" else answer

    return reply


def _handler(fast: Reply, std: Reply | Callable[[dict[str, Any]], Reply]) -> Handler:
    def handler(tier: str, body: dict[str, Any]) -> Reply:
        if tier == "highspeed":
            return fast
        return std(body) if callable(std) else std

    return handler


async def _stream(rig: Rig) -> tuple[Sink, Any]:
    relay = await rig.dispatcher.stream(rig.call(stream=True, text="Tell me about tea."))
    sink = Sink()
    await relay.run(sink)
    return sink, relay


def _comments(sink: Sink) -> dict[str, str]:
    out = {}
    for line in sink.data.split(b"\n"):
        if line.startswith(b": x-gateway-"):
            name, _, value = line[2:].decode().partition(" ")
            out[name] = value
    return out


def _clean_end(sink: Sink, relay: Any) -> None:
    assert not relay.broken and b'"error"' not in sink.data
    assert sink.data.count(b"data: [DONE]") == 1 and sink.eof
    assert {p["id"] for p in sink.payloads()} == {"chatcmpl-1"}


@aio
async def test_a_tier_that_refuses_the_continuation_restarts_and_skips_what_was_sent() -> None:
    rig = _Rig(_handler(CUT, _no_prefill(Reply(chunks=events(ANSWER)))))
    sink, relay = await _stream(rig)
    _clean_end(sink, relay)
    assert sink.text() == WHOLE  # the standard tier's whole answer, nothing repeated
    assert relay.tier == "standard" and rig.pools["standard"].continues is False
    c = _comments(sink)
    assert c["x-gateway-finish"] == "restart standard"
    assert c["x-gateway-fallback"] == "highspeed:stream_cut -> standard"
    asked = rig.calls("standard")
    assert asked[0]["messages"][-1]["role"] == "assistant"  # the continuation, refused
    assert asked[1]["messages"][-1] == {"role": "user", "content": "Tell me about tea."}
    # learned: the next stream's plan says so before its first byte, and no prefix is sent
    relay2 = await rig.dispatcher.stream(rig.call(stream=True))
    assert relay2.trail.finish == "restart standard"
    sink2 = Sink()
    await relay2.run(sink2)
    assert sink2.text() == WHOLE and len(rig.calls("standard")) == 3


@aio
async def test_a_loop_restarted_on_a_tier_that_cannot_continue_skips_the_text_before_it() -> None:
    rig = _Rig(_handler(LOOP, Reply(chunks=events(ANSWER))), {"continuation": "off"})
    sink, relay = await _stream(rig)
    _clean_end(sink, relay)
    text = sink.text()
    assert text.startswith("Green tea is ") and text.endswith("made from young leaves.")
    assert text.count(UNIT.strip()) <= 2  # the copies the client had before the loop guard
    assert text.replace(UNIT, "") == WHOLE  # then the standard answer's rest, once
    assert len(rig.calls("standard")) == 1  # no prefix was ever offered to it
    assert _comments(sink)["x-gateway-finish"] == "restart standard"


@aio
async def test_a_restart_that_begins_otherwise_follows_after_a_paragraph_whole() -> None:
    other = ["Tea ", "comes ", "from ", "Camellia."]
    rig = _Rig(_handler(CUT, Reply(chunks=events(other))), {"continuation": "off"})
    sink, relay = await _stream(rig)
    _clean_end(sink, relay)
    assert sink.text() == "Green tea is " + PARAGRAPH + "".join(other)
    assert _comments(sink)["x-gateway-finish"] == "restart standard diverged"
    assert sink.payloads()[-1]["choices"] == [] or sink.payloads()[-1]["choices"][0].get(
        "finish_reason"
    ) in ("stop", None)


@aio
async def test_a_continuation_prompt_where_the_operator_enables_one() -> None:
    ask = "Go on exactly where your last message stops, without repeating it."
    rest = Reply(chunks=events(ANSWER[3:]))
    rig = _Rig(_handler(CUT, rest), {"continuation": "off", "continuation_prompt": ask})
    sink, relay = await _stream(rig)
    _clean_end(sink, relay)
    assert sink.text() == WHOLE
    body = rig.calls("standard")[0]
    assert body["messages"][-2:] == [
        {"role": "assistant", "content": "Green tea is "},
        {"role": "user", "content": ask},
    ]
    assert _comments(sink)["x-gateway-finish"] == "prompt standard"


@aio
async def test_the_trailing_fallback_names_no_tier_when_nothing_could_finish() -> None:
    rig = _Rig(_handler(CUT, REFUSED))  # refuses the continuation, and the restart too
    sink, relay = await _stream(rig)
    assert relay.broken and sink.payloads()[-1]["error"]["code"] == "stream_broken"
    assert _comments(sink)["x-gateway-fallback"].endswith(" -> none")


HOLD = {"stream": {"hold_back_tokens": 4}}


@pytest.mark.parametrize(
    ("std", "fast", "body", "plan"),
    [
        ({}, {}, {}, "continue standard"),
        ({"continuation": "off"}, {}, {}, "restart standard"),
        ({"continuation": "off", "continuation_prompt": "Go on."}, {}, {}, "prompt standard"),
        ({}, HOLD, {"n": 2}, "held"),  # interleaved choices: no new answer lines up with them
        ({}, {}, {"n": 2}, "none"),  # ...and a tier without a window holds nothing back
    ],
)
@aio
async def test_the_plan_is_told_before_the_first_byte(
    std: dict[str, Any], fast: dict[str, Any], body: dict[str, Any], plan: str
) -> None:
    rig = _Rig(by_tier(highspeed=Reply(chunks=events(ANSWER)), standard=Reply()), std, fast)
    relay = await rig.dispatcher.stream(rig.call(stream=True, **body))
    assert relay.trail.finish == plan
    relay.abandon()


@aio
async def test_the_last_tier_has_no_plan() -> None:
    rig = _Rig(by_tier(standard=Reply(chunks=events(ANSWER)), highspeed=Reply()))
    relay = await rig.dispatcher.stream(
        rig.call(stream=True, headers={"x-gateway-tier": "standard"})
    )
    assert relay.tier == "standard" and relay.trail.finish == "none"
    relay.abandon()


def test_a_tier_whose_continuation_was_refused_restarts() -> None:
    rig = _Rig(by_tier(highspeed=Reply(), standard=Reply()))
    call = rig.call(stream=True)
    pool = rig.pools["standard"]
    assert way(call, pool) == "continue"
    pool.continues = False
    assert way(call, pool) == "restart"


@pytest.mark.parametrize(
    ("sent", "sep"),
    [("Green tea is", PARAGRAPH), ("A list:\n", "\n"), ("Done.\n\n", ""), ("", "")],
)
def test_separator(sent: str, sep: str) -> None:
    assert separator(sent) == sep
