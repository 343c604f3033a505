"""The headline's task mix (``python -m evals headline --mix tasks``): the kinds of request a
new user sends on the first day — chat, code, tool calls, JSON extraction, summarization
and reasoning, a quarter of them not in English — each through the rule the classifier
gives it, with the answer judged for what that kind can get wrong (a loop, a leak, a cut;
JSON that does not parse; a tool call missing or with arguments that do not parse).

Prompt ``i`` is ``PROMPTS[i % len(PROMPTS)]`` with ``(i)`` appended, so every target gets
the same prompt for the same index, and the simulator draws the same faults for it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather forecast for a city and a day.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "day": {"type": "string"}},
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search_flights",
            "description": "Flights between two cities on a date.",
            "parameters": {
                "type": "object",
                "properties": {
                    "origin": {"type": "string"},
                    "destination": {"type": "string"},
                    "date": {"type": "string"},
                },
                "required": ["origin", "destination"],
            },
        },
    },
]
CONTACT_SCHEMA = {
    "type": "json_schema",
    "json_schema": {
        "name": "contact",
        "schema": {
            "type": "object",
            "properties": {"name": {"type": "string"}, "email": {"type": "string"}},
            "required": ["name", "email"],
        },
    },
}
JSON_OBJECT = {"type": "json_object"}
NOTES = (
    "Meeting notes, platform team, Tuesday. Attendees: Ana, Bo, Chen, Dara. The migration "
    "of the billing service to the new cluster slipped by a week because the load tests "
    "showed a memory leak in the invoice renderer; Bo has a fix in review. Chen reported "
    "that the on-call load fell by a third since the alert clean-up. Dara asked for a "
    "decision on the logging vendor before the contract renews next month; the team "
    "prefers to stay but wants a discount. Next meeting moves to Thursday."
)
TEXT_DE = (
    "Die Stadtbibliothek verlängert ab dem ersten Mai ihre Öffnungszeiten. Montags bis "
    "freitags ist sie dann bis zwanzig Uhr geöffnet, samstags bis sechzehn Uhr. Außerdem "
    "können Bücher künftig rund um die Uhr an einem Automaten im Eingangsbereich "
    "zurückgegeben werden. Die Stadt finanziert zwei zusätzliche Stellen für das Projekt."
)
ARTICLE = (
    "Cities around the world are experimenting with car-free streets. In the first year of "
    "a pilot in one European capital, foot traffic on the closed streets rose by a fifth, "
    "shops reported steady or higher sales, and measured nitrogen dioxide fell sharply. "
    "Critics point to longer delivery routes and to traffic pushed onto nearby roads, and "
    "some residents with limited mobility say access has become harder. The city plans to "
    "extend the scheme while adding delivery windows and more accessible parking."
)


@dataclass(frozen=True)
class MixPrompt:
    kind: str  # chat, code, tools, json, summary, reasoning
    text: str
    extra: dict[str, Any] = field(default_factory=dict)  # tools, response_format ...
    lang: str = "en"


PROMPTS: tuple[MixPrompt, ...] = (
    MixPrompt("chat", "How does a refrigerator keep food cold?"),
    MixPrompt("code", "Write a Python function that returns the n-th Fibonacci number."),
    MixPrompt("tools", "What's the weather in Lisbon tomorrow?", {"tools": TOOLS}),
    MixPrompt(
        "json",
        "Extract the company, date and total from: 'Invoice from ACME Corp, dated "
        "2024-03-12, total 1,250.00 EUR.' Answer in JSON.",
        {"response_format": JSON_OBJECT},
    ),
    MixPrompt("summary", f"Summarize these meeting notes in three bullet points:\n{NOTES}"),
    MixPrompt(
        "reasoning",
        "Solve step by step: a train leaves at 9:40 and covers 210 km at 84 km/h. "
        "When does it arrive?",
    ),
    MixPrompt("chat", "¿Qué puedo cocinar esta noche con arroz y verduras?", lang="es"),
    MixPrompt(
        "code",
        "Why does this fail?\n```js\nconst doubled = [1, 2, 3].map(n => n * 2;\n```",
    ),
    MixPrompt("tools", "Find me a flight from Berlin to Madrid on May 3rd.", {"tools": TOOLS}),
    MixPrompt(
        "json",
        "Extraia o contato: 'Fale com Maria Souza pelo maria@exemplo.com.br.'",
        {"response_format": CONTACT_SCHEMA},
        lang="pt",
    ),
    MixPrompt(
        "summary", f"Fasse den folgenden Text in zwei Sätzen zusammen:\n{TEXT_DE}", lang="de"
    ),
    MixPrompt("reasoning", "Prove that the sum of two even numbers is always even."),
    MixPrompt("chat", "What should I pack for a weekend hike in autumn?"),
    MixPrompt("code", "Écris une fonction Python qui inverse une chaîne de caractères.", lang="fr"),
    MixPrompt("tools", "東京の明日の天気を教えてください。", {"tools": TOOLS}, lang="ja"),
    MixPrompt(
        "json",
        "Extrae el producto y el precio: 'La cafetera cuesta 49 euros.' Responde en JSON.",
        {"response_format": JSON_OBJECT},
        lang="es",
    ),
    MixPrompt("summary", f"TL;DR of this article, in one paragraph:\n{ARTICLE}"),
    MixPrompt(
        "reasoning",
        "请一步一步推理：笼子里有鸡和兔共35只，脚共94只，鸡和兔各有多少只？",  # noqa: RUF001
        lang="zh",
    ),
    MixPrompt("chat", "Wie lange dauert es ungefähr, eine neue Sprache zu lernen?", lang="de"),
    MixPrompt("code", "SQL: select the ten customers with the highest total order value."),
    MixPrompt("tools", "Is it going to rain in Paris on Saturday?", {"tools": TOOLS}),
    MixPrompt(
        "json",
        "Return the city and country of 'the Eiffel Tower' as JSON.",
        {"response_format": JSON_OBJECT},
    ),
    MixPrompt("summary", f"Give me the key points of these notes:\n{NOTES}"),
    MixPrompt("reasoning", "What is the probability of two sixes in three rolls of a die?"),
)


def prompt(i: int) -> MixPrompt:
    return PROMPTS[i % len(PROMPTS)]


def body(model: str, i: int, stream: bool) -> dict[str, Any]:
    """The ``i``-th request of the mix for ``model``."""
    p = prompt(i)
    out: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": f"{p.text} ({i})"}],
        "max_tokens": 200,
        "stream": stream,
        **p.extra,
    }
    if stream:
        out["stream_options"] = {"include_usage": True}
    return out


def shape_defect(kind: str, text: str, tool_args: list[str]) -> str | None:
    """What a JSON or tool answer got wrong for its kind (text defects are judged apart)."""
    if kind == "json":
        try:
            json.loads(text)
        except ValueError:
            return "bad_json"
    if kind == "tools":
        if not tool_args:
            return "bad_tool"
        for args in tool_args:
            try:
                if not isinstance(json.loads(args), dict):
                    return "bad_tool"
            except ValueError:
                return "bad_tool"
    return None
