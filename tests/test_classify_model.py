"""The learned task classifier: the model file, what decides a task (and says so), the
confidence threshold, explain's scores, rules on max_tokens and a rule's SLA, the corpus
and the trainer; and the route header through a real gateway."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

import openai
import pytest

from evals.classify.run import CORPUS, NATURAL, load
from gateway.request.model import parse_chat
from gateway.routing.classify import Classifier
from gateway.routing.explain import explain
from gateway.routing.router import Router
from gateway.routing.textmodel import MODEL_PATH, FeatureSpec, ModelFiles, TextModel
from gateway.rules.schema import Rules, RulesError, load_rules, parse_rules
from tests.conftest import rules_for_tests, start_gateway

ROOT = Path(__file__).resolve().parent.parent
RULES = load_rules(ROOT / "routing_rules.yaml")
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]


def body(content: str, **kw: Any) -> bytes:
    return json.dumps(
        {"model": "auto", "messages": [{"role": "user", "content": content}], **kw}
    ).encode()


def with_classify(rules: Rules, **model: Any) -> Rules:
    data = rules.model_dump(mode="json")
    data["classify"]["model"].update(model)
    return Rules.model_validate(data)


# --- the model file -----------------------------------------------------------------------


def test_shipped_model_loads_and_predicts_a_distribution() -> None:
    m = TextModel.load()
    assert set(m.labels) == {"chat", "code", "extraction", "reasoning", "summarization"}
    p = m.predict("Write a Python function that reverses a string.")
    assert p.label == "code"
    assert abs(sum(s for _, s in p.ranked) - 1.0) < 1e-9
    assert [s for _, s in p.ranked] == sorted((s for _, s in p.ranked), reverse=True)


def test_model_round_trips_through_its_file(tmp_path: Path) -> None:
    m = TextModel.load()
    path = tmp_path / "m.json"
    path.write_bytes(m.dump())
    again = TextModel.load(path)
    text = "Summarize this for me: the council met and agreed on the budget."
    assert again.predict(text) == m.predict(text)


def test_features_read_only_the_head_and_tail_of_a_long_text() -> None:
    spec = FeatureSpec(scan_chars=64, bigrams=True, edge=2)
    long = "alpha " + "filler " * 1000 + "omega"
    f = spec.of(long)
    assert {"alpha", "omega", "^alpha", "$omega", "filler omega"} <= f
    assert len(f) < 20
    assert spec.of("Is 42 > 7?") >= {"is", "4", "2", ">", "7", "?"}


def test_a_bad_model_file_is_refused() -> None:
    with pytest.raises(ValueError, match="one value per label"):
        TextModel(("a", "b"), (0.0, 0.0), {"x": (1.0,)})


# --- what decides, and the route header says so -------------------------------------------

# The natural prompts (none of them has a cue word of the rules).
NATURAL_TABLE = [
    ("Write a Python function that reverses a string.", "code"),
    ("Implement binary search in Java.", "code"),
    ("How do I get the number of orders per customer in SQL?", "code"),
    ("Extract every email address from this: write to ann@x.example or bo@y.example", "extraction"),
    ("If 5 workers build a wall in 8 days, how long would 4 workers take?", "reasoning"),
    ("Hey, how's it going?", "chat"),
    ("Write me a short poem about the sea at night.", "chat"),
]


@pytest.mark.parametrize(("prompt", "task"), NATURAL_TABLE)
def test_natural_prompts_are_read_by_the_model(prompt: str, task: str) -> None:
    c = Classifier(RULES).classify(parse_chat(body(prompt)), {})
    assert c.task == task
    assert re.fullmatch(r"model 0\.\d\d|model 1\.00", c.task_source)
    assert c.scores[0][0] == task and len(c.scores) == 3


@pytest.mark.parametrize(
    ("raw", "headers", "task", "source"),
    [
        (body("Write a Python function", tools=TOOLS), {}, "agent", "tools"),
        (
            body("Write a Python function", response_format={"type": "json_object"}),
            {},
            "extraction",
            "json",
        ),
        (body("Write a Python function"), {"x-gateway-task": "chat"}, "chat", "header"),
        (body("Can you prove that this poem is sad?"), {}, "reasoning", 'cue "prove"'),
        (body("Fix:\n```\nx = 1\n```"), {}, "code", 'cue "```"'),
    ],
    ids=["tools", "json-mode", "header", "yaml-cue", "fence"],
)
def test_overrides_win_over_the_model(
    raw: bytes, headers: dict[str, str], task: str, source: str
) -> None:
    c = Classifier(RULES).classify(parse_chat(raw), headers)
    assert (c.task, c.task_source, c.scores) == (task, source, ())


def test_operator_cue_wins_over_a_confident_model() -> None:
    data = RULES.model_dump(mode="json")
    data["classify"]["reasoning"]["cues"] = ["reverses"]
    rules = Rules.model_validate(data)
    c = Classifier(rules).classify(parse_chat(body("Write a Python function that reverses")), {})
    assert (c.task, c.task_source) == ("reasoning", 'cue "reverses"')


def test_cue_in_the_header_is_printable_ascii() -> None:
    data = RULES.model_dump(mode="json")
    data["classify"]["reasoning"]["cues"] = ['beweis "ß"']
    rules = Rules.model_validate(data)
    c = Classifier(rules).classify(parse_chat(body('ein beweis "ß" bitte')), {})
    d = Router(rules).decide(c, {})
    assert c.task_source == 'cue "beweis ?\\xdf?"'
    d.route_header.encode("ascii")


def test_uncertain_requests_go_to_the_configured_task() -> None:
    rules = with_classify(RULES, min_confidence=0.999, uncertain_task="summarization")
    c = Classifier(rules).classify(parse_chat(body("Implement binary search in Java.")), {})
    assert c.task == "summarization"
    assert re.fullmatch(r"uncertain code 0\.\d\d", c.task_source)
    d = Router(rules).decide(c, {})
    assert "task=summarization(uncertain code 0." in d.route_header


def test_model_off_falls_back_to_the_default_task() -> None:
    rules = with_classify(RULES, enabled=False)
    c = Classifier(rules).classify(parse_chat(body("Implement binary search in Java.")), {})
    assert (c.task, c.task_source, c.scores) == ("chat", "default", ())


def test_model_path_must_exist() -> None:
    data = RULES.model_dump(mode="json")
    data["classify"]["model"]["path"] = "/nonexistent/model.json"
    with pytest.raises(RulesError, match=r"classify\.model\.path"):
        parse_rules(json.dumps(data))


def test_the_model_file_is_read_again_only_when_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    path.write_bytes(TextModel.load().dump())
    files = ModelFiles()
    first = files.get(path)
    assert files.get(path) is first  # every rules change builds a classifier
    data = json.loads(path.read_bytes())
    data["bias"] = [b + 1.0 for b in data["bias"]]
    mtime = path.stat().st_mtime_ns
    path.write_text(json.dumps(data))
    os.utime(path, ns=(mtime + 10**9, mtime + 10**9))
    again = files.get(path)
    assert again is not first and again.bias == tuple(b + 1.0 for b in first.bias)
    path.write_text("not json")
    os.utime(path, ns=(mtime + 2 * 10**9, mtime + 2 * 10**9))
    with pytest.raises(ValueError, match="not a model"):
        files.get(path)


def test_uncertain_task_must_be_a_task() -> None:
    data = RULES.model_dump(mode="json")
    data["classify"]["model"]["uncertain_task"] = "nope"
    with pytest.raises(RulesError, match=r"classify\.model\.uncertain_task: unknown task"):
        parse_rules(json.dumps(data))


def test_explain_shows_the_top_classes_and_what_decided() -> None:
    out = explain(RULES, {"model": "auto", "messages": [{"role": "user", "content": "hi there"}]})
    top = out["classifier"]["top"]
    assert top[0]["task"] == "chat" and len(top) == 3
    assert top[0]["score"] >= top[1]["score"] >= top[2]["score"]
    assert out["classifier"]["decided_by"].startswith("model ")
    # where an override decided, the model's view is still shown
    req = {"model": "auto", "messages": [{"role": "user", "content": "hi"}], "tools": TOOLS}
    out = explain(RULES, req)
    assert out["classifier"]["decided_by"] == "tools" and len(out["classifier"]["top"]) == 3


def test_classification_is_fast_enough_for_the_hot_path() -> None:
    clf = Classifier(RULES)
    req = parse_chat(body("Implement binary search in Java. " * 600))  # ~20 KB
    clf.classify(req, {})
    t0 = time.process_time()
    for _ in range(50):
        clf.classify(req, {})
    # CPU time, which a busy machine does not stretch as it does the wall clock; loose:
    # python -m evals classify measures the real P99
    assert (time.process_time() - t0) / 50 < 0.005


# --- rules: prompt length, max_tokens, a rule's SLA ---------------------------------------

LONG_GEN = {
    "name": "long-generations",
    "when": {"min_max_tokens": 4000},
    "tier": "standard",
    "sla": "batch",
}


def rules_with(rule: dict[str, Any]) -> Rules:
    data = RULES.model_dump(mode="json")
    data["rules"] = [rule, *data["rules"]]
    return Rules.model_validate(data)


@pytest.mark.parametrize(
    ("extra", "headers", "rule", "sla", "sla_source"),
    [
        ({"max_tokens": 8000}, {}, "long-generations", "batch", "rule long-generations"),
        ({"max_completion_tokens": 4000}, {}, "long-generations", "batch", "rule long-generations"),
        ({"max_tokens": 100}, {}, "default", "interactive", "task"),
        ({}, {}, "default", "interactive", "task"),
        (
            {"max_tokens": 8000},
            {"x-gateway-sla": "interactive"},
            "long-generations",
            "interactive",
            "header",
        ),
    ],
    ids=["long", "long-completion-tokens", "short", "unset", "header-wins"],
)
def test_rules_key_on_max_tokens_and_set_the_sla(
    extra: dict[str, Any], headers: dict[str, str], rule: str, sla: str, sla_source: str
) -> None:
    rules = rules_with(LONG_GEN)
    c = Classifier(rules).classify(parse_chat(body("hello there", **extra)), headers)
    d = Router(rules).decide(c, {})
    assert (d.rule, d.cls.sla, d.cls.sla_source) == (rule, sla, sla_source)
    assert d.deadline == rules.sla_classes[sla].deadline


def test_rules_key_on_prompt_length_and_max_tokens_together() -> None:
    rules = rules_with(
        {
            "name": "small",
            "when": {"max_prompt_tokens": 10, "max_max_tokens": 50},
            "tier": "standard",
        }
    )
    router, clf = Router(rules), Classifier(rules)
    assert (
        router.decide(clf.classify(parse_chat(body("hi", max_tokens=20)), {}), {}).rule == "small"
    )
    big = body("hi " * 100, max_tokens=20)
    assert router.decide(clf.classify(parse_chat(big), {}), {}).rule != "small"
    assert router.decide(clf.classify(parse_chat(body("hi")), {}), {}).rule != "small"


def test_a_rule_sla_must_be_a_known_class() -> None:
    data = RULES.model_dump(mode="json")
    data["rules"] = [{**LONG_GEN, "sla": "nope"}, *data["rules"]]
    with pytest.raises(RulesError, match=r"rules\[0\]\.sla: unknown SLA class"):
        parse_rules(json.dumps(data))


# --- the corpus and the trainer -----------------------------------------------------------


def test_corpus_is_large_varied_and_its_held_out_templates_never_trained_on() -> None:
    rows = load(CORPUS)
    assert len(rows) >= 1000
    tasks = {"chat", "code", "extraction", "reasoning", "summarization", "agent"}
    assert {r["task"] for r in rows if r["split"] == "test"} == tasks
    assert {r["task"] for r in rows if r["split"] == "train"} == tasks - {"agent"}
    train = {r["template"] for r in rows if r["split"] == "train"}
    test = {r["template"] for r in rows if r["split"] == "test"}
    assert not train & test
    texts = {r["text"] for r in rows if r["split"] == "train"}
    assert not texts & {r["text"] for r in load(NATURAL)}
    assert max(len(r["text"]) for r in rows) > 2000 and min(len(r["text"]) for r in rows) < 10


def test_training_is_reproducible() -> None:
    from evals.classify.train import train

    rows = [r for r in load(CORPUS) if r["split"] == "train"][::8]
    a = train(rows, seed=3, epochs=20, spec=FeatureSpec(512, False, 10))
    b = train(rows, seed=3, epochs=20, spec=FeatureSpec(512, False, 10))
    assert a.dump() == b.dump()
    assert a.predict("Implement quicksort in Rust.").label == "code"


def test_shipped_model_is_the_one_in_the_package() -> None:
    assert MODEL_PATH.parent == ROOT / "gateway" / "routing" and MODEL_PATH.is_file()
    assert MODEL_PATH.stat().st_size < 1_000_000


# --- through a real gateway ---------------------------------------------------------------


@pytest.mark.processes
def test_route_header_names_the_model_and_its_confidence(
    engines: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> None:
    rules = rules_for_tests()
    rules["classify"]["model"] = {"enabled": True, "min_confidence": 0.4}
    proc, url = start_gateway(tmp_path_factory.mktemp("gw"), rules, engines)
    try:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
        raw = client.chat.completions.with_raw_response.create(
            model="auto",
            messages=[{"role": "user", "content": "Implement binary search in Java."}],
        )
        route = raw.headers["x-gateway-route"]
        assert re.match(r"code; task=code\(model (0\.\d\d|1\.00)\) sla=interactive", route), route
        raw = client.chat.completions.with_raw_response.create(
            model="auto",
            messages=[{"role": "user", "content": "A train leaves at 3 pm at 60 km/h. When?"}],
            max_tokens=16,
        )
        assert raw.headers["x-gateway-route"].startswith("reasoning-to-standard; task=reasoning(")
        assert raw.headers["x-gateway-tier"] == "standard"
    finally:
        proc.stop()
