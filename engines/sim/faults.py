"""Fault modes: their names, which ones a request draws, and what they do to an answer.

A request's faults are drawn by rate (``--fault NAME=RATE``: in request order from the
seed, or with ``--fault-draw content`` from the seed and the request's content) plus those
its ``x-sim-fault`` header names (``none`` turns the drawn ones off). The functions below
change an answer's text (loop, leak, bad_json, bad_tool) or its first token's time
(slow_ttft); the plan ends an answer early (stall, cut, error_event) and the server acts
out the rest (500, 429, hang). Every fault's effect is listed in :mod:`engines.sim`.
"""

from __future__ import annotations

import random

from engines.sim.config import SimConfig
from engines.sim.request import BadRequest
from engines.sim.text import sentence

FAULTS = (
    "500",
    "429",
    "hang",
    "slow_ttft",
    "stall",
    "cut",
    "loop",
    "leak",
    "bad_json",
    "bad_tool",
    "error_event",
)
LOOP_DEFAULT_TOKENS = 400
SLOW_TTFT_MIN_S = 5.0
SLOW_TTFT_FACTOR = 20.0
LEAK_PIECES = (" <|im_end|>", "\n<|im_start|>", "user", "\n")


class FaultDraw:
    """The faults of each request of one replica. ``rates`` starts as the command line's
    and may be replaced while it runs (``POST /sim/faults``: a bad deploy, then its fix)."""

    def __init__(self, cfg: SimConfig):
        self.cfg = cfg
        self.rng = random.Random(f"{cfg.seed}:faults")
        self.rates: dict[str, float] = dict(cfg.faults)

    def set_rates(self, rates: object) -> None:
        """Replace the rates: a mapping of fault names to rates in [0, 1]."""
        if not isinstance(rates, dict):
            raise BadRequest('expected {"faults": {NAME: RATE, ...}}')
        for name, rate in rates.items():
            if name not in FAULTS:
                raise BadRequest(f"unknown fault {name!r}; known: {', '.join(FAULTS)}")
            if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 <= rate <= 1:
                raise BadRequest(f"the rate of {name} must be a number within [0, 1]")
        self.rates = {n: float(r) for n, r in rates.items()}

    def draw(self, header: str, digest: str) -> set[str]:
        """Faults of this request: drawn by rate (always, to keep the sequence) + header."""
        rng = self.rng
        if self.cfg.fault_draw == "content":
            rng = random.Random(f"{self.cfg.seed}:{digest}:faults")
        drawn = {n for n, rate in sorted(self.rates.items()) if rng.random() < rate}
        asked = {f.strip() for f in header.split(";") if f.strip()}
        unknown = asked - set(FAULTS) - {"none"}
        if unknown:
            raise BadRequest(f"unknown x-sim-fault {sorted(unknown)}; known: {', '.join(FAULTS)}")
        if "none" in asked:
            return asked - {"none"}
        return drawn | asked


def slow_ttft(ttft: float) -> float:
    """``slow_ttft``: the first token comes at TTFT + max(19 x TTFT, 5 s)."""
    return ttft + max(SLOW_TTFT_FACTOR * ttft - ttft, SLOW_TTFT_MIN_S)


def looped(pieces: list[str], max_tokens: int | None, frng: random.Random) -> list[str]:
    """``loop``: a few words of the answer, then one sentence over and over up to
    ``max_tokens`` (or :data:`LOOP_DEFAULT_TOKENS`)."""
    head = pieces[: frng.randint(8, 20)]
    again = [" " + w for w in sentence(frng)]
    limit = max_tokens or LOOP_DEFAULT_TOKENS
    out = list(head)
    while len(out) < limit:
        out += again
    return out[:limit]


def leaked(pieces: list[str], frng: random.Random) -> list[str]:
    """``leak``: the chat template's end-of-turn and a new user turn inside the text."""
    at = min(len(pieces), frng.randint(8, 24))
    return [*pieces[:at], *LEAK_PIECES, *pieces[at:]]


def corrupt_json(text: str, frng: random.Random) -> str:
    """``bad_json``: truncated, a trailing comma, or wrapped in prose and a fence."""
    variant = frng.randrange(3)
    if variant == 0:
        return text[: max(1, len(text) * 2 // 3)]  # truncated
    if variant == 1:
        return text[:-1] + ", }" if text.endswith("}") else text + ","  # trailing comma
    return f"Here is the JSON you asked for:\n```json\n{text}\n```"


def corrupt_call(name: str, args: str, frng: random.Random) -> tuple[str, str]:
    """``bad_tool``: a call to a function that does not exist, or arguments that do not
    parse."""
    if frng.random() < 0.5:
        return f"{name}_undefined", args
    return name, args[:-1] + ', "'
