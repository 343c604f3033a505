"""The prompt's routing key: which parts of it an engine's prefix cache could already hold.

An engine's radix cache reuses the longest prefix of a prompt it has seen, so replica choice
needs the prompt's prefixes, not only its first words. :func:`chat_key` renders the
messages as one text (role and content, with separators) and hashes it once, keeping the
running hash every :data:`BLOCK` bytes: the *chain*, where the n-th value stands for the
whole prompt up to block n. A later turn of a conversation repeats the earlier turn's
prompt, so its chain starts with that turn's chain, however long the history grows.

Beside the chain, two keys every gateway replica computes alike (CRC-32, not ``hash()``):

* ``head``: the first message's first 256 characters (its system prompt, or the question);
* ``unit``: the prompt up to the end of its first user message, at most :data:`UNIT_CHARS`
  characters of it: one conversation, one agent run, one document asked about, or one
  single question (with ``lead``, the characters before that user message).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass

BLOCK = 1024  # bytes of rendered prompt per link of the chain (~250 tokens)
MAX_BLOCKS = 64  # the chain covers the first 64 KiB; a longer prompt is known by those
UNIT_CHARS = 1024  # of the first user message in ``unit`` (a long pasted text: its start)
HEAD_CHARS = 256


def _crc(text: str) -> int:
    return zlib.crc32(text.encode("utf-8", "surrogatepass"))


@dataclass(frozen=True, slots=True)
class PromptKey:
    head: int
    unit: int
    lead: int = 0  # bytes of the rendered prompt before its first user message
    chain: tuple[int, ...] = ()
    continued: bool = False  # the history holds an answer: a later turn of a conversation
    prior: int = 0  # bytes before the last answer: the previous turn's whole prompt

    @classmethod
    def of_hash(cls, h: int) -> PromptKey:
        """A key that is only a hash (an embedding's input, a caller's own affinity)."""
        return cls(h, h)


def chat_key(messages: Sequence[tuple[str, str]]) -> PromptKey:
    """The key of a chat prompt, from its messages' (role, text) in order."""
    if not messages:
        return PromptKey(0, 0)
    head = _crc(messages[0][1][:HEAD_CHARS])
    parts, lead, unit_end, prior = [], -1, -1, 0
    size = 0
    for role, text in messages:
        if role == "user" and lead < 0:
            lead = size
            unit_end = size + len(f"{role}\x1f{text[:UNIT_CHARS]}".encode("utf-8", "surrogatepass"))
        elif role == "assistant":
            prior = size
        part = f"{role}\x1f{text}\x1e".encode("utf-8", "surrogatepass")
        parts.append(part)
        size += len(part)
        if size >= BLOCK * MAX_BLOCKS and unit_end >= 0:
            break
    data = b"".join(parts)
    if unit_end < 0:  # no user message: the unit is the first block
        lead, unit_end = 0, min(len(data), BLOCK)
    unit = zlib.crc32(data[:unit_end])
    return PromptKey(head, unit, lead, _chain(data), prior > 0, prior)


def text_key(text: str) -> PromptKey:
    """The key of a completion prompt: the whole text is the first (user) message."""
    data = text.encode("utf-8", "surrogatepass")[: BLOCK * MAX_BLOCKS]
    return PromptKey(_crc(text[:HEAD_CHARS]), zlib.crc32(data[:UNIT_CHARS]), 0, _chain(data))


def _chain(data: bytes) -> tuple[int, ...]:
    out, h = [], 0
    for i in range(0, min(len(data), BLOCK * MAX_BLOCKS) - BLOCK + 1, BLOCK):
        h = zlib.crc32(data[i : i + BLOCK], h)
        out.append(h)
    return tuple(out)
