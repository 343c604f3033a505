"""The semantic cache's guard: when two close prompts may share one answer.

Embeddings place "convert Celsius to Fahrenheit" and "convert Fahrenheit to Celsius" at
cosine 0.99, "which plants are safe for cats" and "... not safe ..." at 0.95, "what is
15 % of 80" and "... of 90" at 0.98 (all-MiniLM-L6-v2; ``python -m evals semcache``). No
threshold separates those from true rephrasings, so a semantic hit needs both a close
embedding and this guard: the prompts' significant words, in order, are the same, or
differ by a slip of the keyboard. What it ignores: casing, punctuation, contractions
(``what's`` is ``what is``), politeness and filler (``hi``, ``please``, ``could you``),
articles and auxiliaries. What it keeps: every number and symbol, negations, question
words, prepositions (``to``/``from`` aside: a reversed conversion also reorders its
words), every other word — and their order.

A slip: two words of 4+ letters with the same first letter and one edit between them
(insert, delete, substitute, or swap two neighbours; two edits from 8 letters on): so
``pasword`` is ``password`` and ``recursoin`` is ``recursion``, while ``enable`` and
``disable``, ``mute`` and ``unmute``, ``401`` and ``403`` stay apart.
"""

from __future__ import annotations

import re

_CONTRACTIONS = (
    (re.compile(r"\b(can|ca)n'?t\b"), r"\1n not"),
    (re.compile(r"\bwon'?t\b"), "will not"),
    (re.compile(r"n't\b"), " not"),
    (re.compile(r"'re\b"), " are"),
    (re.compile(r"'m\b"), " am"),
    (re.compile(r"'ll\b"), " will"),
    (re.compile(r"'ve\b"), " have"),
    (re.compile(r"'d\b"), " would"),
    (re.compile(r"\b(what|that|it|there|here|who|where|how|when)'s\b"), r"\1 is"),
)
_TOKEN = re.compile(r"[a-z]+|\d+(?:[.,]\d+)*|[%$€£#+*/=<>&@^~-]")
FILLER = frozenset(
    (
        "a",
        "an",
        "the",
        "i",
        "me",
        "you",
        "please",
        "pls",
        "kindly",
        "could",
        "can",
        "would",
        "will",
        "do",
        "does",
        "did",
        "is",
        "are",
        "am",
        "be",
        "hi",
        "hello",
        "hey",
        "there",
        "thanks",
        "thank",
        "so",
        "just",
        "quick",
        "question",
        "curious",
        "wondering",
        "was",
        "tell",
        "let",
        "know",
        "some",
        "to",
    )
)


def signature(text: str) -> tuple[str, ...]:
    """The prompt's significant tokens, in order (see the module's docstring)."""
    t = text.lower().replace("\u2019", "'")
    for pattern, repl in _CONTRACTIONS:
        t = pattern.sub(repl, t)
    return tuple(w for w in _TOKEN.findall(t) if w not in FILLER)


def same_question(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    """Whether two signatures ask the same thing: equal, word for word, up to slips."""
    if len(a) != len(b):
        return False
    return all(x == y or slip(x, y) for x, y in zip(a, b, strict=True))


def slip(x: str, y: str) -> bool:
    if not (x.isalpha() and y.isalpha()) or min(len(x), len(y)) < 4 or x[0] != y[0]:
        return False
    most = 2 if min(len(x), len(y)) >= 8 else 1
    return abs(len(x) - len(y)) <= most and _edits(x, y, most) <= most


def _edits(x: str, y: str, most: int) -> int:
    """Damerau-Levenshtein distance (optimal string alignment), stopping past ``most``."""
    prev2: list[int] = []
    prev = list(range(len(y) + 1))
    for i in range(1, len(x) + 1):
        cur = [i] + [0] * len(y)
        for j in range(1, len(y) + 1):
            cost = 0 if x[i - 1] == y[j - 1] else 1
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
            if i > 1 and j > 1 and x[i - 1] == y[j - 2] and x[i - 2] == y[j - 1]:
                cur[j] = min(cur[j], prev2[j - 2] + 1)
        if min(cur) > most:
            return most + 1
        prev2, prev = prev, cur
    return prev[-1]
