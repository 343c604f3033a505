"""Pseudo-English, one word per token, and JSON values that satisfy simple schemas; every
draw from a ``random.Random`` the caller seeds, so the same seed gives the same text."""

from __future__ import annotations

import math
import random
import re
from typing import Any

from engines.sim.config import Json

DETS = ("the", "a", "each", "every", "this", "that", "our", "their", "one", "another")
ADJS = (
    "careful", "stable", "simple", "modern", "small", "large", "quiet", "rapid", "useful",
    "clear", "robust", "shared", "recent", "common", "local", "narrow", "broad", "steady",
    "efficient", "reliable", "complex", "gentle", "precise", "open",
)  # fmt: skip
NOUNS = (
    "system", "model", "network", "river", "garden", "process", "answer", "question",
    "method", "signal", "teacher", "library", "market", "engine", "pattern", "record",
    "window", "result", "village", "journey", "update", "request", "server", "forest",
    "report", "budget", "design", "problem", "reason", "history",
)  # fmt: skip
VERBS = (
    "improves", "explains", "follows", "supports", "changes", "describes", "reaches",
    "builds", "measures", "protects", "connects", "reveals", "shapes", "carries",
    "balances", "extends", "guides", "tracks", "combines", "handles",
)  # fmt: skip
PREPS = ("across", "within", "under", "beyond", "through", "near", "after", "before")
CONJS = ("and", "while", "because", "although", "so")


def _noun_phrase(rng: random.Random) -> list[str]:
    words = [rng.choice(DETS)]
    if rng.random() < 0.6:
        words.append(rng.choice(ADJS))
    words.append(rng.choice(NOUNS))
    return words


def _clause(rng: random.Random) -> list[str]:
    words = [*_noun_phrase(rng), rng.choice(VERBS), *_noun_phrase(rng)]
    if rng.random() < 0.5:
        words += [rng.choice(PREPS), *_noun_phrase(rng)]
    return words


def sentence(rng: random.Random) -> list[str]:
    """One plausible sentence, as words; the first capitalised, the last with a period."""
    words = _clause(rng)
    if rng.random() < 0.35:
        words[-1] += ","
        words += [rng.choice(CONJS), *_clause(rng)]
    words[0] = words[0].capitalize()
    words[-1] += "."
    return words


def prose(rng: random.Random, target: int, lead_space: bool, capital: bool) -> list[str]:
    """Whole sentences, at least ``target`` words, as pieces (one per token)."""
    pieces: list[str] = []
    while len(pieces) < target:
        words = sentence(rng)
        if not capital and not pieces:
            words[0] = words[0].lower()
        sep = "\n\n" if pieces and rng.random() < 0.15 else " "
        for w in words:
            first = not pieces
            pieces.append((" " if lead_space else "") + w if first else sep + w)
            sep = " "
    return pieces


def split_pieces(text: str) -> list[str]:
    """Token-sized pieces (about 4 characters each) whose concatenation is ``text``."""
    return re.findall(r"\s*\S{1,4}|\s+$", text)


def answer_length(rng: random.Random) -> int:
    """Natural answer length in tokens: log-normal around 80, clipped to 20-300."""
    return max(20, min(300, round(rng.lognormvariate(math.log(80), 0.7))))


def value_for(schema: Any, rng: random.Random, depth: int = 0) -> Any:
    """A JSON value satisfying a simple JSON schema."""
    if not isinstance(schema, dict) or depth > 6:
        return " ".join(sentence(rng)[:3]).rstrip(".,")
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return rng.choice(schema["enum"])
    for key in ("anyOf", "oneOf", "allOf"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            return value_for(options[0], rng, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind is None and "properties" in schema:
        kind = "object"
    return _typed_value(schema, str(kind or "string"), rng, depth)


def _typed_value(schema: Json, kind: str, rng: random.Random, depth: int) -> Any:
    if kind == "object":
        props = schema.get("properties")
        props = props if isinstance(props, dict) else {}
        return {k: value_for(v, rng, depth + 1) for k, v in props.items()}
    if kind == "array":
        count = max(int(schema.get("minItems", 1)), 1)
        count = min(count + rng.randint(0, 1), int(schema.get("maxItems", count + 1)))
        return [value_for(schema.get("items", {}), rng, depth + 1) for _ in range(count)]
    if kind in ("integer", "number"):
        lo = float(schema.get("minimum", 0))
        hi = max(lo, float(schema.get("maximum", lo + 100)))
        if kind == "integer":
            return rng.randint(math.ceil(lo), max(math.ceil(lo), math.floor(hi)))
        return round(rng.uniform(lo, hi), 2)
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "null":
        return None
    return _string_value(schema, rng)


def _string_value(schema: Json, rng: random.Random) -> str:
    fmt = schema.get("format")
    if fmt == "date":
        return f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    if fmt == "email":
        return f"{rng.choice(NOUNS)}@example.com"
    text = " ".join(sentence(rng)[: rng.randint(2, 4)]).rstrip(".,")
    text = text.ljust(int(schema.get("minLength", 0)), "x")
    return text[: int(schema.get("maxLength", len(text)))]
