"""Any model name a client sends, decided by the operator: the alias patterns of the rules.

The repository's rules take any name (``"*": null``: the rules decide); a pattern may pin a
family to a tier; without one, an unknown name is a 404 (the strict choice). The route
header and the access log say the name sent and the model that answered; ``/v1/models``
lists what is configured, never a pattern.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from gateway.errors import ModelNotFound
from gateway.request.model import parse_chat
from gateway.routing.classify import Classifier
from gateway.rules.schema import Rules, load_rules
from tests.conftest import Proc, rules_for_tests, start_gateway
from tests.waiting import wait_until

ROOT = Path(__file__).resolve().parent.parent
RULES = load_rules(ROOT / "routing_rules.yaml")


def _with_aliases(aliases: dict[str, str | None]) -> Rules:
    return RULES.model_copy(update={"aliases": aliases})


def _classify(rules: Rules, model: str) -> Any:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
    return Classifier(rules).classify(parse_chat(json.dumps(body).encode()), {})


def test_the_repositorys_rules_take_any_name() -> None:
    assert RULES.aliases["*"] is None
    c = _classify(RULES, "gpt-4o-mini")
    assert (c.tier_hint, c.alias, c.model) == (None, "*", "gpt-4o-mini")
    named = _classify(RULES, "standard")  # a name of its own is not taken by the pattern
    assert (named.tier_hint, named.alias) == ("standard", None)


def test_the_most_specific_pattern_after_every_name() -> None:
    rules = _with_aliases(  # in any order (a YAML round trip may sort the keys)
        {"*": None, "auto": None, "claude-*": "standard", "claude-*haiku*": "highspeed"}
    )
    assert _classify(rules, "claude-haiku-4-5").tier_hint == "highspeed"
    assert _classify(rules, "claude-sonnet-4-5").tier_hint == "standard"
    assert _classify(rules, "gpt-4.1").tier_hint is None
    assert _classify(rules, "auto").alias is None


def test_the_strict_choice_is_a_404_naming_what_is_served() -> None:
    with pytest.raises(ModelNotFound) as e:
        _classify(_with_aliases({"auto": None, "fast": "highspeed"}), "gpt-4o-mini")
    assert e.value.status == 404 and e.value.param == "model"
    assert "gpt-4o-mini" in e.value.message and "auto, fast" in e.value.message
    with pytest.raises(ModelNotFound) as p:
        _classify(_with_aliases({"auto": None, "claude-*": "standard"}), "gpt-4o-mini")
    assert "names matching claude-*" in p.value.message


# --- real clients, real processes ---------------------------------------------------------------


@pytest.fixture(scope="module")
def logged(
    engines: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Proc, str]]:
    """The repository's rules with a family pinned, and the access log on."""
    rules = rules_for_tests()
    rules["aliases"] = {"claude-*haiku*": "standard", **rules["aliases"]}
    env = {"GATEWAY_ACCESS_LOG": "true"}
    proc, url = start_gateway(tmp_path_factory.mktemp("gw"), rules, engines, env)
    yield proc, url
    proc.stop()


def _access(proc: Proc, model: str) -> dict[str, Any]:
    def found() -> list[dict[str, Any]]:
        lines = [json.loads(x) for x in proc.log().splitlines() if '"gateway.access"' in x]
        return [x for x in lines if x.get("fields", x).get("model") == model]

    rec = wait_until(found, f"an access log line for {model}")[-1]
    return rec.get("fields", rec)  # type: ignore[no-any-return]


@pytest.mark.processes
def test_a_clients_own_model_name_answers_and_is_told(logged: tuple[Proc, str]) -> None:
    proc, url = logged
    with openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0) as oa:
        raw = oa.chat.completions.with_raw_response.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}]
        )
        assert raw.parse().choices[0].message.content == "Echo (highspeed): hi"
        route = raw.headers["x-gateway-route"]
        assert 'model "gpt-4o-mini" by alias "*"' in route
        assert route.endswith('served by "fake-highspeed"')
        pinned = oa.chat.completions.with_raw_response.create(
            model="claude-3-5-haiku-latest", messages=[{"role": "user", "content": "hi"}]
        )
        assert pinned.headers["x-gateway-tier"] == "standard"
        assert "pinned by model" in pinned.headers["x-gateway-route"]
        ids = [m.id for m in oa.models.list()]
        assert "auto" in ids and "fake-highspeed" in ids
        assert not any("*" in i for i in ids)  # a pattern is not a model
    rec = _access(proc, "gpt-4o-mini")
    assert rec["served_model"] == "fake-highspeed" and rec["tier"] == "highspeed"
    assert _access(proc, "claude-3-5-haiku-latest")["served_model"] == "fake-standard"


@pytest.mark.processes
def test_langchains_default_model_name_answers(gateway: str) -> None:
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(base_url=f"{gateway}/v1", api_key="x", max_retries=0)  # type: ignore[arg-type]
    assert llm.invoke("hi").content == "Echo (highspeed): hi"
