"""Loops inside JSON: a JSON-mode answer that loops inside a string (a small model did, for
73 s, in a client's ``.parse()`` stream) is caught like a text loop — by the repetition
check, which every rule with a fallback runs (a guard), and by the live loop guard — and
finished from before the loop on the next tier, without the grammar that would start a
new value there."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest

from gateway.checks.base import Output, RequestFacts
from gateway.checks.config import RepetitionSettings
from gateway.checks.repetition import RepetitionCheck
from tests.memory_transport import Reply, events
from tests.test_dispatch_memory import Rig, Sink, _guard_run, aio, by_tier

JSON_FORMAT = {"type": "json_object"}
SENTENCE = "The product is a great product. "
HEAD = '{"name": "Kettle", "summary": "Boils water quickly! '
LOOPING = HEAD + SENTENCE * 30  # stuck inside the string, never closed
ESCAPED = '{"lines": "' + "one\\ttwo\\nthree four\\n" * 20 + '"}'  # escapes repeat too
SHORT_CLOSED = '{"a": "' + "one two three\\n" * 16 + '"}'  # no probe inside it but the end
ARRAY_LOOP = '{"tags": [' + '"kitchen appliance", ' * 40 + '"x"]}'


def _facts(**kw: Any) -> RequestFacts:
    base: dict[str, Any] = dict(
        max_tokens_set=True,
        json_mode=True,
        json_schema=None,
        tools={},
        other_tools=frozenset(),
    )
    return RequestFacts(**(base | kw))


GOOD = json.dumps(
    {"items": [{"id": i, "name": f"part {i}", "stock": i * 7 % 13} for i in range(40)]}
)


@pytest.mark.parametrize(
    ("name", "text", "loops"),
    [
        ("a sentence repeated inside a string", LOOPING, True),
        ("the same, closed", LOOPING + '"}', True),
        ("escapes repeated inside a string, closed", ESCAPED, True),
        ("a short loop closed by the string's end", SHORT_CLOSED, True),
        ("an array of one value over and over", ARRAY_LOOP, True),
        ("a long array of distinct records", GOOD, False),
        ("a short object", '{"a": 1, "b": "two"}', False),
    ],
)
def test_the_repetition_check_reads_json_like_text(name: str, text: str, loops: bool) -> None:
    result = RepetitionCheck(RepetitionSettings()).run(Output(text, "stop", []), _facts())
    assert result.ok is not loops, name


def test_the_live_loop_guard_sees_a_loop_inside_a_json_string() -> None:
    held, confirmed = _guard_run([HEAD, *[SENTENCE] * 20])
    assert held and confirmed


def test_json_rules_get_the_repetition_guard() -> None:
    rig = Rig(by_tier(highspeed=Reply(), standard=Reply()))
    call = rig.call(response_format=JSON_FORMAT)
    assert call.d.rule == "extraction" and "repetition" in call.d.checks


REST = ["grown ", "in ", 'China."}']


@aio
async def test_a_json_stream_that_loops_in_a_string_is_finished_from_before_the_loop() -> None:
    fast = Reply(chunks=events([HEAD, *[SENTENCE] * 40], finish=None, done=False))
    rig = Rig(by_tier(highspeed=fast, standard=Reply(chunks=events(REST))))
    relay = await rig.dispatcher.stream(rig.call(stream=True, response_format=JSON_FORMAT))
    sink = Sink()
    await relay.run(sink)
    assert not relay.broken and relay.tier == "standard"
    text = sink.text()
    assert text.count(SENTENCE.strip()) <= 2  # what the client had before the guard held it
    assert text.endswith('grown in China."}') and json.loads(text)["name"] == "Kettle"
    asked = rig.calls("standard")[0]
    assert "response_format" not in asked  # no grammar: it would start a new value
    assert asked["messages"][-1]["role"] == "assistant"
    assert asked["messages"][-1]["content"] == HEAD.rstrip()  # the text before the loop


@aio
async def test_a_non_streamed_json_answer_that_loops_is_joined_and_judged_whole() -> None:
    fast = Reply(chunks=events([HEAD, *[SENTENCE] * 40], finish=None, done=False))
    rig = Rig(by_tier(highspeed=fast, standard=Reply(chunks=events(REST))))
    out = await rig.dispatcher.complete(rig.call(response_format=JSON_FORMAT))
    assert out.tier == "standard" and out.trail.failures[0].reason == "check_repetition"
    text = orjson.loads(out.body)["choices"][0]["message"]["content"]
    assert json.loads(text)["summary"].startswith("Boils water quickly!")
    assert SENTENCE.strip() not in text  # nothing was sent: the loop is gone
    assert "response_format" not in rig.calls("standard")[0]
    assert out.trail.checks_failed is None  # the joined answer passed json_valid too


@aio
async def test_a_json_stream_that_does_not_begin_as_json_falls_back_before_its_first_byte() -> None:
    fenced = Reply(chunks=events(["Here is the JSON:\n```json\n", '{"a": 1}', "\n```"]))
    rig = Rig(by_tier(highspeed=fenced, standard=Reply(chunks=events(['{"a": ', "1}"]))))
    relay = await rig.dispatcher.stream(rig.call(stream=True, response_format=JSON_FORMAT))
    assert relay.tier == "standard"  # nothing of the fenced answer went out
    assert [f.reason for f in relay.trail.failures] == ["check_json_valid"]
    sink = Sink()
    await relay.run(sink)
    assert json.loads(sink.text()) == {"a": 1}
