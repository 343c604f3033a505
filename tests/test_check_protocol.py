"""A check says what it can do, and dispatch asks it: a new check (``example_check.py``
and this test) takes part in streams, stops a bad stream before the bad text goes out,
and the next tier continues from the good prefix the check reported (in memory)."""

from __future__ import annotations

import pytest
import yaml

from gateway.checks import registry
from gateway.checks.base import Abilities, Scan
from gateway.checks.config import CheckSettings
from gateway.checks.registry import BUILTINS, CHECK_NAMES, build_checks, discover
from gateway.dispatch.attempts import Dispatcher
from gateway.rules.schema import RulesError, parse_rules
from gateway.telemetry.recorder import Telemetry
from tests import example_check
from tests.conftest import RULES
from tests.memory_transport import Reply, events
from tests.test_dispatch_memory import Rig, Sink, aio, by_tier

# the catalogue as it would be with tests/example_check.py in gateway/checks/
CATALOGUE = discover([*registry._modules(), example_check])


def _rig(handler: object) -> Rig:
    rig = Rig(handler)  # type: ignore[arg-type]
    checks = (*rig.rules.default.checks, "shouting")
    default = rig.rules.default.model_copy(update={"checks": checks})
    rig.rules = rig.rules.model_copy(update={"default": default, "rules": ()})
    every = build_checks(rig.rules.checks, CATALOGUE)
    rig.dispatcher = Dispatcher(rig.pools, every, rig.rules.dispatch, Telemetry())
    return rig


def test_the_built_ins_state_their_abilities() -> None:
    checks = build_checks(CheckSettings())
    partial = {n for n, c in checks.items() if c.abilities.partial}
    assert partial == {"repetition", "template_leak", "json_valid"}
    assert checks["template_leak"].abilities.scan is Scan.DELTA
    assert checks["repetition"].guard() is not None
    assert all(checks[n].guard() is None for n in CHECK_NAMES if n != "repetition")
    assert checks["refusal"].abilities.opt_in
    text = "Tea is good. " + "again and again. " * 30
    assert (
        checks["repetition"].good_prefix(text, "stop") == text.index("again") - 2
    )  # from the ". "
    assert checks["template_leak"].good_prefix("ok <|im_end|>", "stop") == 3
    assert checks["non_empty"].good_prefix("", "stop") is None
    assert Abilities().describe() == "whole answer, cheap"


def test_the_catalogue_is_read_from_the_modules() -> None:
    assert tuple(CATALOGUE) == (*CHECK_NAMES, "shouting")  # in the order the checks state
    assert tuple(BUILTINS) == CHECK_NAMES and "shouting" not in BUILTINS
    assert isinstance(
        build_checks(CheckSettings(), CATALOGUE)["shouting"], example_check.ShoutingCheck
    )
    with pytest.raises(ValueError, match="names of their own"):
        discover([example_check, example_check])


def test_an_unknown_check_is_refused() -> None:
    data = yaml.safe_load(RULES.read_text())
    data["default"]["checks"] = ["shouting"]
    with pytest.raises(RulesError, match=r"default\.checks\[0\]: unknown check 'shouting'"):
        parse_rules(yaml.safe_dump(data))


@aio
async def test_a_new_partial_check_stops_a_stream_at_its_good_prefix() -> None:
    head = ["Tea ", "is ", "a ", "drink. "]
    fast = Reply(chunks=events([*head, "BUY IT NOW ", "TODAY! ", "Then ", "more."]))
    std = Reply(chunks=events(["It ", "is ", "brewed ", "from ", "leaves."]))
    rig = _rig(by_tier(highspeed=fast, standard=std))
    relay = await rig.dispatcher.stream(rig.call(stream=True))
    sink = Sink()
    await relay.run(sink)
    assert sink.text() == "Tea is a drink. It is brewed from leaves."  # one clean answer
    assert "BUY" not in sink.data.decode()  # the shout never went out
    assert [f.reason for f in relay.trail.failures] == ["check_shouting"]
    sent = rig.calls("standard")[0]
    assert sent["messages"][-1] == {"role": "assistant", "content": "Tea is a drink. "}
    assert sink.data.count(b"data: [DONE]") == 1


@aio
async def test_a_new_partial_check_fails_a_non_streamed_answer_early() -> None:
    texts = ["Tea ", "is ", "a ", "drink. ", "BUY IT NOW ", *["filler "] * 200]
    fast = Reply(chunks=events(texts), gap=0.001)
    std = Reply(chunks=events(["More ", "about ", "tea."]))
    rig = _rig(by_tier(highspeed=fast, standard=std))
    out = await rig.dispatcher.complete(rig.call())
    assert out.tier == "standard" and [f.reason for f in out.trail.failures] == ["check_shouting"]
    assert out.trail.continued == "highspeed:16"  # "Tea is a drink. "
    # the attempt stopped at the shout, not after the 200 events that followed it
    assert rig.transports.by_tier["highspeed"].streams[0]._i < 20


@aio
async def test_a_tiers_default_max_tokens_is_a_limit_set() -> None:
    """An answer that stops at the tier's ``request_defaults`` max_tokens is what the
    operator asked for: ``not_truncated`` does not move it to the next tier."""
    from gateway.upstream.pools import Pools
    from tests.memory_transport import Transports

    cut = Reply(chunks=events(["Tea ", "is "], finish="length"))
    handler = by_tier(highspeed=cut, standard=Reply(chunks=events(["Std."])))
    rig = Rig(handler)
    fast = rig.rules.tiers["highspeed"].model_copy(update={"request_defaults": {"max_tokens": 2}})
    rig.rules = rig.rules.model_copy(update={"tiers": {**rig.rules.tiers, "highspeed": fast}})
    rig.transports = Transports(handler)
    rig.pools = Pools(dict(rig.rules.tiers), rig.transports)
    rig.dispatcher = Dispatcher(
        rig.pools, build_checks(rig.rules.checks), rig.rules.dispatch, Telemetry()
    )
    out = await rig.dispatcher.complete(rig.call())
    assert out.tier == "highspeed" and not out.trail.failures
    assert rig.calls("highspeed")[0]["max_tokens"] == 2
    # the standard tier has no default: there, a cut answer is truncated
    rig2 = Rig(by_tier(highspeed=cut, standard=Reply(chunks=events(["Std."]))))
    out2 = await rig2.dispatcher.complete(rig2.call())
    assert out2.tier == "standard" and out2.trail.failures[0].reason == "check_not_truncated"
