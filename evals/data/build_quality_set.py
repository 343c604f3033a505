"""Write ``evals/data/quality_set.jsonl``: the fixed evaluation set of ``evals quality``.

Each case: ``{"id", "task", "body": <a chat request>, "expect": {...}}``, where
``expect`` holds what the task's metric needs: ``keywords`` (chat), ``number``
(reasoning), ``tests`` (code: Python asserts), ``fields`` (extraction: exact values),
``tool`` + ``args`` (tool calls), ``reference`` (summarization). Greedy decoding
(temperature 0), so "the two tiers agree" is meaningful. Run this file to rebuild.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

OUT = Path(__file__).with_name("quality_set.jsonl")


def chat(prompt: str, max_tokens: int = 128, **extra: Any) -> dict[str, Any]:
    return {
        "model": "auto",
        "temperature": 0,
        "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": prompt}],
        **extra,
    }


CHAT = [
    ("capital-japan", "What is the capital of Japan?", ["tokyo"]),
    ("primary-colors", "Name three primary colors.", ["red", "blue", "yellow"]),
    ("water-boils", "What is the boiling point of water in Celsius?", ["100"]),
    ("largest-planet", "Which planet is the largest in our solar system?", ["jupiter"]),
    ("photosynthesis", "What gas do plants take in for photosynthesis?", ["carbon dioxide"]),
    ("shakespeare", "Who wrote Romeo and Juliet?", ["shakespeare"]),
    ("days-week", "How many days are in a week?", ["7"]),
    ("opposite-hot", "What is the opposite of hot?", ["cold"]),
]

REASONING = [
    ("add", "What is 17 + 25? Answer with just the number.", 42),
    ("sub", "What is 100 - 37? Answer with just the number.", 63),
    ("mul", "What is 6 times 7? Answer with just the number.", 42),
    (
        "apples",
        "I have 3 apples and buy 4 more. How many apples do I have? Answer with just the number.",
        7,
    ),
    ("legs", "How many legs do 2 dogs have in total? Answer with just the number.", 8),
    ("half", "What is half of 50? Answer with just the number.", 25),
]

CODE = [
    (
        "add",
        "Write a Python function add(a, b) that returns a + b. Reply with only the code.",
        ["assert add(2, 3) == 5", "assert add(-1, 1) == 0"],
    ),
    (
        "square",
        "Write a Python function square(x) that returns x squared. Reply with only the code.",
        ["assert square(4) == 16", "assert square(0) == 0"],
    ),
    (
        "is-even",
        "Write a Python function is_even(n) that returns True if n is even. Reply "
        "with only the code.",
        ["assert is_even(4) is True", "assert is_even(3) is False"],
    ),
    (
        "reverse",
        "Write a Python function reverse(s) that returns the string s reversed. Reply "
        "with only the code.",
        ["assert reverse('abc') == 'cba'", "assert reverse('') == ''"],
    ),
    (
        "maximum",
        "Write a Python function maximum(xs) that returns the largest number in the "
        "list xs. Reply with only the code.",
        ["assert maximum([1, 5, 3]) == 5"],
    ),
    (
        "greet",
        "Write a Python function greet(name) that returns 'Hello, ' + name. Reply with "
        "only the code.",
        ["assert greet('Ann') == 'Hello, Ann'"],
    ),
]

PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
}
CITY = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
    "required": ["city", "country"],
}
EXTRACTION = [
    (
        "alice",
        "Extract the person's name and age as JSON: 'Alice is 30 years old.'",
        PERSON,
        {"name": "Alice", "age": 30},
    ),
    (
        "bob",
        "Extract the person's name and age as JSON: 'Bob, aged 45, lives in Leeds.'",
        PERSON,
        {"name": "Bob", "age": 45},
    ),
    (
        "carol",
        "Extract the person's name and age as JSON: 'My friend Carol turned 22 today.'",
        PERSON,
        {"name": "Carol", "age": 22},
    ),
    (
        "paris",
        "Extract the city and country as JSON: 'I flew to Paris, France last week.'",
        CITY,
        {"city": "Paris", "country": "France"},
    ),
    (
        "tokyo",
        "Extract the city and country as JSON: 'The conference is in Tokyo, Japan.'",
        CITY,
        {"city": "Tokyo", "country": "Japan"},
    ),
]

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Current local time in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
TOOLS = [
    ("weather-oslo", "What's the weather in Oslo?", "get_weather", {"city": "Oslo"}),
    ("weather-rome", "Is it raining in Rome right now?", "get_weather", {"city": "Rome"}),
    ("time-tokyo", "What time is it in Tokyo?", "get_time", {"city": "Tokyo"}),
    ("time-lima", "Tell me the current time in Lima.", "get_time", {"city": "Lima"}),
]

SUMMARIES = [
    (
        "library",
        "The city council voted on Tuesday to extend the opening hours of the central "
        "library. From next month the library will stay open until 9 pm on weekdays, and it will "
        "also open on Sunday afternoons. The council said the change responds to requests from "
        "students who need a quiet place to study in the evening.",
        "The council extended the central library's hours: open until 9 pm on weekdays and on "
        "Sunday afternoons, for students who study in the evening.",
    ),
    (
        "bakery",
        "A small bakery on Elm Street has won the regional bread competition for the "
        "third year in a row. The owners, a married couple, start baking at four every morning "
        "and use only local flour. They plan to open a second shop next spring.",
        "An Elm Street bakery won the regional bread competition for the third year running and "
        "plans a second shop next spring.",
    ),
    (
        "train",
        "Train services between the two cities were suspended for six hours on Monday "
        "after a storm brought down trees on the line. Engineers cleared the track overnight and "
        "normal service resumed on Tuesday morning.",
        "A storm suspended trains between the cities for six hours on Monday; service resumed "
        "on Tuesday after the track was cleared.",
    ),
    (
        "robot",
        "Researchers have built a small robot that can climb walls using suction cups. "
        "It weighs less than a kilogram and could be used to inspect bridges and buildings for "
        "cracks without putting workers at risk.",
        "Researchers built a light wall-climbing robot with suction cups to inspect bridges and "
        "buildings for cracks safely.",
    ),
]


def build() -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = []
    for cid, q, kws in CHAT:
        cases.append(
            {"id": f"chat/{cid}", "task": "chat", "body": chat(q), "expect": {"keywords": kws}}
        )
    for cid, q, n in REASONING:
        cases.append(
            {
                "id": f"reasoning/{cid}",
                "task": "reasoning",
                "body": chat(q, 64),
                "expect": {"number": n},
            }
        )
    for cid, q, tests in CODE:
        cases.append(
            {"id": f"code/{cid}", "task": "code", "body": chat(q, 200), "expect": {"tests": tests}}
        )
    for cid, q, schema, fields in EXTRACTION:
        rf = {"type": "json_schema", "json_schema": {"name": "extract", "schema": schema}}
        cases.append(
            {
                "id": f"extraction/{cid}",
                "task": "extraction",
                "body": chat(q, 96, response_format=rf),
                "expect": {"schema": schema, "fields": fields},
            }
        )
    for cid, q, tool, args in TOOLS:
        cases.append(
            {
                "id": f"tools/{cid}",
                "task": "tools",
                "body": chat(q, 96, tools=[WEATHER, TIME]),
                "expect": {"tool": tool, "args": args},
            }
        )
    for cid, text, ref in SUMMARIES:
        cases.append(
            {
                "id": f"summarization/{cid}",
                "task": "summarization",
                "body": chat(f"Summarize in one sentence:\n\n{text}", 96),
                "expect": {"reference": ref},
            }
        )
    return cases


def main() -> None:
    lines = [json.dumps(c, ensure_ascii=False) for c in build()]
    OUT.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"{len(lines)} cases -> {OUT}")


if __name__ == "__main__":
    main()
