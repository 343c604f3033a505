"""Finding degenerate loops in a text: the algorithm of the ``repetition`` check and of
its stream guard (:mod:`gateway.checks.loopguard`). No check lives here."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from gateway.checks.config import RepetitionSettings

__all__ = ("digits_as_zero", "find_any_loop", "find_loop_start", "numbered_unit")

_NEEDLE_CHARS: Final = 24
"""Characters before each probe point whose earlier occurrences give candidate periods.
Long enough that indentation or a common phrase rarely recurs by chance; at most half of
the smallest allowed ``min_span_chars`` so a loop always holds needle plus one period."""
_MAX_CANDIDATES: Final = 4
"""Candidate periods tried per probe point; bounds the cost on code full of repeats."""
_LETTER: Final = re.compile(r"[^\W\d_]")  # any letter, CJK included
_NONZERO_DIGIT: Final = re.compile(r"[1-9]")  # each read as 0: every index is kept
_ZEROS: Final = bytes.maketrans(b"123456789", b"000000000")
_CLOSING: Final = " \t\r\n\"']})"  # what may follow a loop that ran to a value's end
NUMBERED_MIN_UNIT: Final = 12
"""Shortest unit of a numbered loop: a counted item ("4. Restart the server."), not a
counter with a word ("word1 word2 ...", "item 1, item 2, ...")."""


def _span_factor(unit: str) -> int:
    """How many times ``min_span_chars`` a loop of this unit must span to count.

    Units with letters: 1. Units of digits and punctuation only: 2, because data and layout
    legitimately repeat verbatim for a while (a printed 10x10 zero matrix is 200-340 chars,
    empty Markdown table rows, "=====" rules), while a model stuck on "!!!!" goes on for
    thousands. Whitespace only: 4, as padded table cells and aligned columns hold runs of a
    few hundred blanks, while a model stuck emitting newlines produces thousands.
    """
    if unit.isspace():
        return 4
    return 1 if _LETTER.search(unit) else 2


@dataclass(frozen=True, slots=True)
class _Loop:
    start: int
    end: int
    period: int


def _extend_back(text: str, start: int, p: int) -> int:
    """Smallest ``u <= start`` with ``text[i] == text[i + p]`` for all ``i`` in [u, start)."""
    good = start
    step = max(p, 16)
    bad = 0
    while good > 0:  # gallop backwards, doubling the step
        bad = max(good - step, 0)
        if text[bad:good] != text[bad + p : good + p]:
            break
        good = bad
        step *= 2
    else:
        return 0
    while good - bad > 1:  # the boundary is in (bad, good]
        mid = (bad + good) // 2
        if text[mid:good] == text[mid + p : good + p]:
            good = mid
        else:
            bad = mid
    return good


def _extend_forward(text: str, end: int, p: int) -> int:
    """Largest ``v >= end`` with ``text[i] == text[i - p]`` for all ``i`` in [end, v)."""
    n = len(text)
    good = end
    step = max(p, 16)
    bad = n
    while good < n:  # gallop forwards
        bad = min(good + step, n)
        if text[good:bad] != text[good - p : bad - p]:
            break
        good = bad
        step *= 2
    else:
        return n
    while bad - good > 1:  # the boundary is in [good, bad)
        mid = (good + bad) // 2
        if text[good:mid] == text[good - p : mid - p]:
            good = mid
        else:
            bad = mid
    return good


def _find_loop(text: str, st: RepetitionSettings, numbered: bool = False) -> _Loop | None:
    """The first (leftmost) loop in ``text``, or None.

    Probe points ``a`` are spaced ``stride`` apart, plus the end of the text (with and
    without trailing whitespace). At each, the ``_NEEDLE_CHARS`` characters before ``a`` are
    searched backwards (``str.rfind``, C speed) within ``max_period``; an earlier occurrence
    at distance ``p`` makes ``p`` a candidate period, tried smallest first. A candidate is a
    loop when ``text[a - span : a]`` is ``p``-periodic, ``span = max(min_span, repeats * p)``,
    which is one slice comparison. The loop is then widened both ways by galloping slice
    comparisons. Normal text costs one short ``rfind`` per probe point.
    """
    n = len(text)
    min_span = st.min_span_chars
    if n < min_span:
        return None
    m = _NEEDLE_CHARS
    max_period = st.max_period
    repeats = st.min_repeats
    stride = max(st.probe_stride, -(-n // st.max_probes))
    # Trailing whitespace would hide a loop from the end probe: probe before it as well;
    # and before what closes a JSON string, array or object (a loop inside a JSON value
    # ends the answer as much as one at its end does).
    end = len(text.rstrip()) if text[-1].isspace() else n
    closed = len(text.rstrip(_CLOSING))
    anchors = list(range(min_span, end, stride))
    if min_span <= closed < end:
        anchors.append(closed)
    if end >= min_span:
        anchors.append(end)
    if end < n:
        anchors.append(n)
    for a in anchors:
        needle = text[a - m : a]
        lo = max(a - m - max_period, 0)
        pos = text.rfind(needle, lo, a - 1)
        tries = 0
        while pos >= 0 and tries < _MAX_CANDIDATES:
            p = a - m - pos
            s = a - max(min_span, repeats * p)
            if s < 0:
                break  # longer periods need even longer spans
            if numbered and not numbered_unit(text[a - p : a]):
                tries += 1  # a counter ("word0 word0 "): not the unit of a numbered loop
                pos = text.rfind(needle, lo, pos + m - 1)
                continue
            # Cheap look at the far end of the span first, then the whole span at once.
            if text[s : s + m] == text[s + p : s + p + m] and text[s : a - p] == text[s + p : a]:
                loop = _Loop(_extend_back(text, s, p), _extend_forward(text, a, p), p)
                if loop.end - loop.start >= min_span * _span_factor(text[a - p : a]):
                    return loop
            tries += 1
            pos = text.rfind(needle, lo, pos + m - 1)
    return None


def digits_as_zero(text: str) -> str:
    """``text`` with every digit read as 0, every index kept. ASCII text goes through
    ``bytes.translate`` (0.3 us for 350 characters); ``re.sub`` otherwise (``str.translate``
    is slower still on non-ASCII text)."""
    if text.isascii():
        return text.encode().translate(_ZEROS).decode()
    return _NONZERO_DIGIT.sub("0", text)


def numbered_unit(unit: str) -> bool:
    """A unit a numbered loop may repeat: letters in it, and ``NUMBERED_MIN_UNIT`` or more
    characters once any shorter period within it is taken (``word0 word0 `` is two)."""
    return (unit + unit).find(unit, 1) >= NUMBERED_MIN_UNIT and bool(_LETTER.search(unit))


def _find_numbered(text: str, st: RepetitionSettings, at_limit: bool) -> _Loop | None:
    """A numbered loop ("4. Restart it.", "5. Restart it.", ...): periodic once every digit
    reads 0, letters in the unit, and many copies (or the answer hit its token limit)."""
    if _NONZERO_DIGIT.search(text) is None:
        return None
    norm = digits_as_zero(text)
    enough = st.min_repeats if at_limit else st.numbered_min_copies
    at = 0
    for _ in range(8):  # a run can break where numbers grow a digit (9 -> 10): look on
        loop = _find_loop(norm[at:], st, numbered=True)
        if loop is None:
            return None
        start, end, p = at + loop.start, at + loop.end, loop.period
        if (end - start) // p >= enough and numbered_unit(norm[start : start + p]):
            return _Loop(start, end, p)
        at = end
    return None


def find_any_loop(text: str, st: RepetitionSettings, at_limit: bool = False) -> _Loop | None:
    """The first exact loop, else a numbered one."""
    return _find_loop(text, st) or _find_numbered(text, st, at_limit)


def find_loop_start(text: str, settings: RepetitionSettings, at_limit: bool = False) -> int | None:
    """Index where the first detected loop begins, or None when there is no loop.

    ``text[:index]`` is the clean part before the loop (generation can continue from it). The
    index is where exact periodicity starts, so it can sit up to one period before the first
    full copy of the repeated unit when the clean text happens to end like the unit does.
    ``at_limit``: the answer ran into its token limit (numbered loops count from fewer copies).
    """
    loop = find_any_loop(text, settings, at_limit)
    return None if loop is None else loop.start
