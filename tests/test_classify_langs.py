# ruff: noqa: RUF001  (full-width marks are what CJK users type)
"""The task classifier in the languages users write, and on the noise real prompts carry:
table-driven cases (written for this file, none from the natural test set), the noise
stripping and the CJK features, the training data kept apart from the test set, and the
accuracy thresholds on the natural test set (read from its file: a regressed model fails)."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest

from evals.classify.run import NATURAL, load
from evals.data.classify_multilang import PROMPTS, build_rows, noisy
from gateway.request.model import parse_chat
from gateway.routing.classify import Classifier
from gateway.routing.textmodel import FeatureSpec, TextModel, _denoise
from tests.test_classify_model import RULES

CLF = Classifier(RULES)
MODEL = TextModel.load()


def task_of(text: str) -> str:
    body = {"model": "auto", "messages": [{"role": "user", "content": text}]}
    return CLF.classify(parse_chat(json.dumps(body).encode()), {}).task


FRIDGE = "How does a refrigerator keep food cold?"


@pytest.mark.parametrize(
    "text",
    [
        FRIDGE,
        FRIDGE + " (#1)",
        FRIDGE + " (#12)",
        "Q3: " + FRIDGE,
        "1. " + FRIDGE,
        "[7] " + FRIDGE,
        FRIDGE + " #4",
        FRIDGE + " [id: 99812]",
        FRIDGE + " (ref 2025-004)",
        "Question 2: " + FRIDGE + " (#2)",
        FRIDGE.rstrip("?").lower(),
    ],
)
def test_numbering_and_ids_do_not_change_the_task(text: str) -> None:
    assert task_of(text) == "chat"
    # and the model is about as sure as without them
    assert abs(MODEL.predict(text).confidence - MODEL.predict(FRIDGE).confidence) < 0.1


@pytest.mark.parametrize(
    ("text", "task"),
    [
        ("Write a Python function that sorts a list of tuples by the second item (#3)", "code"),
        ("Q5: Solve 3x + 4 = 19", "reasoning"),
        ("[2] What's a nice hobby to pick up in winter?", "chat"),
        (
            "Extract the phone numbers from this note: call Jo at 555-0199 or Al at 555-0142 #8",
            "extraction",
        ),
    ],
)
def test_noise_keeps_every_task(text: str, task: str) -> None:
    assert task_of(text) == task


@pytest.mark.parametrize(
    ("text", "expect"),
    [
        ("Q3: hello there", "hello there"),
        ("(#2) hello", "hello"),
        ("hello (#1)", "hello"),
        ("hello [id: 4821]", "hello"),
        ("hello -- ticket 9931", "hello"),
        ("3 grifos llenan un depósito", "3 grifos llenan un depósito"),  # a number, not a mark
        ("compute f(2)", "compute f(2)"),  # code's own parentheses stay
        ("print(x) (2)", "print(x)"),
    ],
)
def test_denoise_strips_only_marks_at_the_ends(text: str, expect: str) -> None:
    assert _denoise(text) == expect


def test_cjk_text_becomes_characters_and_pairs_and_ascii_words_stay_whole() -> None:
    spec = FeatureSpec(512, False, 0, unicode=True, prefix=5)
    feats = spec.of("Pythonで回文")
    assert {"python", "で", "回", "文", "で回", "回文", "~pytho"} <= feats
    assert "pythonで回文" not in feats
    assert {"función", "~funci"} <= spec.of("Una función")
    # ASCII text: the fast path finds the features the Unicode path finds
    text = "Sort a list (fast) quickly"
    assert spec.of(text) == spec._unicode(text.lower())[1]


@pytest.mark.parametrize(
    ("text", "task"),
    [
        ("¿Qué película me recomiendas para ver con mis hijos?", "chat"),
        ("Escribe un script en Python que descargue una página web", "code"),
        ("Resuelve: si 4 obreros tardan 6 días, ¿cuánto tardan 8 obreros?", "reasoning"),
        ("Quel est ton plat français préféré ?", "chat"),
        ("Écris une fonction JavaScript qui supprime les doublons d'un tableau", "code"),
        ("Wie spät ist es gerade in Tokio, ungefähr?", "chat"),
        ("Schreib eine Funktion in Go, die eine Datei zeilenweise liest", "code"),
        ("Qual é o melhor jeito de aprender violão sozinho?", "chat"),
        ("Escreva uma função em JavaScript que some os números de um array", "code"),
        ("你觉得猫和狗哪个更适合养在公寓里？", "chat"),
        ("用Go写一个读取文件的函数", "code"),
        ("一个数加上它的一半等于45，这个数是多少？", "reasoning"),
        ("猫と犬、一人暮らしで飼うならどっちがいい？", "chat"),
        ("Goでファイルを一行ずつ読む関数を書いて", "code"),
    ],
)
def test_prompts_in_other_languages(text: str, task: str) -> None:
    assert task_of(text) == task


# --- the training data and the natural test set -------------------------------------------


def test_training_prompts_cover_every_language_and_label_and_never_the_test_set() -> None:
    for lang in ("en", "es", "fr", "de", "pt", "zh", "ja"):
        for task in ("chat", "code", "extraction", "reasoning", "summarization"):
            assert len(PROMPTS[lang][task]) >= 6, (lang, task)
    test = {r["text"].strip().lower() for r in load(NATURAL)}
    rows = build_rows([], seed=14)
    assert not {r["text"].strip().lower() for r in rows} & test


def test_noisy_copies_keep_the_prompt() -> None:
    import random

    rnd = random.Random(1)
    for _ in range(50):
        out = noisy("Why do cats purr?", rnd)
        assert "why do cats purr" in out.lower()


def test_accuracy_on_the_natural_set_holds_in_every_language() -> None:
    hit: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for row in load(NATURAL):
        counts = hit[row["lang"]]
        counts[0] += task_of(row["text"]) == row["task"]
        counts[1] += 1
    other = [sum(v[i] for k, v in hit.items() if k != "en") for i in (0, 1)]
    assert hit["en"][0] / hit["en"][1] >= 0.95, hit["en"]
    assert other[0] / other[1] >= 0.90, dict(hit)
    for lang in ("es", "fr", "de", "pt", "zh", "ja"):  # no main language left far behind
        assert hit[lang][0] / hit[lang][1] >= 0.85, (lang, hit[lang])
