"""Deterministic texts and request shapes for the in-process benchmarks: English-like
prose that no code keyword, reasoning cue or template token of the rules matches, a
Markdown answer, and the request bodies :mod:`evals.bench.micro` classifies.
"""

from __future__ import annotations

import json
import random
from typing import Any

from evals.bench.common import chat_body

SUMMARY_PROMPT_CHARS = 20_000


# Plain prose words: none is a code keyword, reasoning cue or template token of the rules.
_WORD_LIST = (
    "river valley village farmers harvest season water mountain morning evening market "
    "people travel long quiet green old new bridge stone road town council decided build "
    "small large school children learned about history region many families moved north "
    "south after storm winter summer spring autumn trade grew slowly over years local museum "
    "records show early settlers planted wheat barley orchards apples pears mill wheel turned "
    "near forest path walked visitors often describe light clear air bright fields of grain "
    "between hills where sheep graze under wide skies and rain falls softly on roofs while "
    "bakers open their shops before dawn to sell warm bread with honey from nearby farms"
)
_WORDS = tuple(_WORD_LIST.split())


def prose(n_chars: int, seed: int) -> str:
    """Deterministic, non-repeating English-like paragraphs of at least ``n_chars``."""
    rng = random.Random(seed)
    paragraphs: list[str] = []
    size = 0
    while size < n_chars:
        sentences = []
        for _ in range(rng.randint(4, 7)):
            words = rng.choices(_WORDS, k=rng.randint(8, 18))
            sentences.append(" ".join(words).capitalize() + ".")
        paragraphs.append(" ".join(sentences))
        size += len(paragraphs[-1]) + 2
    return "\n\n".join(paragraphs)[:n_chars].rsplit(".", 1)[0] + "."


def markdown_answer(n_chars: int) -> str:
    """Prose with a list and an HTML code block: '<' and '[' make template_leak look twice."""
    body = prose(n_chars - 400, seed=3)
    code = (
        '```html\n<div class="card">\n  <a href="/docs">[docs]</a>\n</div>\n```\n\n'
        "- first point about the river\n- second point about the [market](/m)\n\n"
    )
    half = len(body) // 2
    return body[:half] + "\n\n" + code + body[half:]


def request_body(messages: list[dict[str, str]], **extra: Any) -> bytes:
    return json.dumps({"model": "auto", "messages": messages, **extra}).encode()


def request_shapes() -> list[tuple[str, bytes, str]]:
    """(name, request body, task the classifier must find)."""
    system = {"role": "system", "content": "You are a helpful assistant."}
    weather_tool = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city",
            "parameters": {
                "type": "object",
                "required": ["city"],
                "properties": {
                    "city": {"type": "string"},
                    "unit": {"type": "string", "enum": ["c", "f"]},
                },
            },
        },
    }
    person = {
        "type": "json_schema",
        "json_schema": {
            "name": "person",
            "schema": {
                "type": "object",
                "required": ["name", "age"],
                "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
            },
        },
    }
    code = (
        "Why does this raise a TypeError?\n```python\ndef add(a, b):\n    return a + b\n\n"
        "print(add(1))\n```"
    )
    summary = prose(SUMMARY_PROMPT_CHARS, seed=2) + (
        "\n\nSummarize the text above in five key points."
    )
    return [
        ("short chat", chat_body(False), "chat"),
        (
            "tools",
            request_body(
                [system, {"role": "user", "content": "What's the weather in Oslo?"}],
                tools=[weather_tool],
            ),
            "agent",
        ),
        (
            "JSON mode (schema)",
            request_body(
                [{"role": "user", "content": "Extract: Ada, 36 years."}], response_format=person
            ),
            "extraction",
        ),
        ("code", request_body([system, {"role": "user", "content": code}]), "code"),
        (
            "20 KB summarization",
            request_body([system, {"role": "user", "content": summary}]),
            "summarization",
        ),
    ]
