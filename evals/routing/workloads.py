"""The workloads of ``python -m evals routing``: what users send a fleet, as sessions.

A session is a run of requests that grow one history (a chat, an agent loop) or a single
request (a question to a tenant's assistant or about a document). Each is planned before
the run from the seed (its start, its messages, its pauses); only the answers come from the
engines, and the simulator's answers depend on the request alone, so every router gets the
very same requests in the same order of starts. Sizes are in words, which the simulator
counts as tokens.

* ``multiturn``  chats over a few shared system prompts; every turn re-sends the history
* ``agent``      agent loops re-sending a long system prompt with its tool list, each step
                 adding the model's answer and a tool's observation
* ``tenants``    many tenants, each with its own system prompt, single questions (a few
                 tenants busier than the rest)
* ``docs``       a few long documents in the user message after one shared instruction,
                 asked many questions (one document busier than the others)
* ``noreuse``    unique prompts: the control, nothing to reuse

Times are model seconds (the engines' clock); the harness scales them to the wall clock.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from types import MappingProxyType

SYLLABLES = ("ka", "lo", "mi", "ne", "ru", "ta", "ve", "so", "pi", "da", "fe", "gu", "ho", "ji")


@dataclass(frozen=True, slots=True)
class Turn:
    content: str  # the message appended (role ``role``) before the request is sent
    think_s: float  # model seconds after the previous answer (or the session's start)
    role: str = "user"


@dataclass(frozen=True, slots=True)
class Session:
    start_s: float  # model seconds after the cell's start
    prefix: tuple[tuple[str, str], ...]  # (role, content) before the first turn
    turns: tuple[Turn, ...]
    max_tokens: int


@dataclass(frozen=True, slots=True)
class Workload:
    name: str
    what: str
    reuse: bool  # a workload with something to reuse (the bars apply), or the control
    turns: float  # requests per session, on average
    plan: Callable[[random.Random, float, float], list[Session]]  # (rng, sessions/s, seconds)


ANSWER_TOKENS = 128  # max_tokens of every request (the simulator's answers: ~80 words)


def words(rng: random.Random, n: int) -> str:
    """``n`` pseudo-words (two or three syllables): text no other draw repeats."""
    return " ".join("".join(rng.choices(SYLLABLES, k=rng.randint(2, 3))) for _ in range(n))


def _starts(rng: random.Random, rate: float, seconds: float) -> list[float]:
    """Poisson arrivals at ``rate`` per second over ``seconds``."""
    out, t = [], rng.expovariate(rate)
    while t < seconds:
        out.append(t)
        t += rng.expovariate(rate)
    return out


def _system(i: int, n: int, kind: str) -> str:
    rng = random.Random(f"{kind}:{i}")
    return f"You are assistant {i} of the {kind} service. " + words(rng, n)


def _tools(i: int, n: int) -> str:
    rng = random.Random(f"tools:{i}")
    tools = [
        f'{{"name": "tool_{i}_{k}", "description": "{words(rng, 12)}", "parameters": '
        f'{{"type": "object", "properties": {{"{words(rng, 1)}": {{"type": "string"}}}}}}}}'
        for k in range(n)
    ]
    return "Tools:\n" + "\n".join(tools)


def multiturn(rng: random.Random, rate: float, seconds: float) -> list[Session]:
    systems = [_system(i, 400, "chat") for i in range(4)]
    out = []
    for start in _starts(rng, rate, seconds):
        system = systems[rng.randrange(len(systems))]
        turns = tuple(
            Turn(words(rng, rng.randint(40, 80)) + "?", 0.0 if k == 0 else rng.expovariate(1.0))
            for k in range(6)
        )
        out.append(Session(start, (("system", system),), turns, ANSWER_TOKENS))
    return out


def agent(rng: random.Random, rate: float, seconds: float) -> list[Session]:
    prompts = [_system(i, 1200, "agent") + "\n" + _tools(i, 40) for i in range(3)]
    out = []
    for start in _starts(rng, rate, seconds):
        system = prompts[rng.randrange(len(prompts))]
        task = Turn("Task: " + words(rng, rng.randint(30, 60)), 0.0)
        steps = tuple(
            Turn("Observation: " + words(rng, rng.randint(120, 280)), rng.expovariate(2.0))
            for _ in range(7)
        )
        out.append(Session(start, (("system", system),), (task, *steps), ANSWER_TOKENS))
    return out


def _zipf(rng: random.Random, n: int, s: float) -> int:
    weights = [1.0 / (k + 1) ** s for k in range(n)]
    return rng.choices(range(n), weights)[0]


def tenants(rng: random.Random, rate: float, seconds: float) -> list[Session]:
    systems = [_system(i, 500 + 50 * (i % 9), "tenant") for i in range(48)]
    out = []
    for start in _starts(rng, rate, seconds):
        system = systems[_zipf(rng, len(systems), 0.8)]
        question = Turn(words(rng, rng.randint(20, 40)) + "?", 0.0)
        out.append(Session(start, (("system", system),), (question,), ANSWER_TOKENS))
    return out


DOC_POPULARITY = (0.3, 0.25, 0.15, 0.12, 0.1, 0.08)


def docs(rng: random.Random, rate: float, seconds: float) -> list[Session]:
    documents = [words(random.Random(f"doc:{i}"), 8000) for i in range(len(DOC_POPULARITY))]
    system = "Answer the question from the document the user gives. Quote it where you can."
    out = []
    for start in _starts(rng, rate, seconds):
        doc = documents[rng.choices(range(len(documents)), DOC_POPULARITY)[0]]
        ask = f"Document:\n{doc}\n\nQuestion: {words(rng, rng.randint(15, 30))}?"
        out.append(Session(start, (("system", system),), (Turn(ask, 0.0),), ANSWER_TOKENS))
    return out


def noreuse(rng: random.Random, rate: float, seconds: float) -> list[Session]:
    return [
        Session(start, (), (Turn(words(rng, rng.randint(500, 800)), 0.0),), ANSWER_TOKENS)
        for start in _starts(rng, rate, seconds)
    ]


WORKLOADS = MappingProxyType(
    {
        w.name: w
        for w in (
            Workload("multiturn", "chats over 4 system prompts, 6 turns", True, 6, multiturn),
            Workload("agent", "agent loops, 3 prompts with tools, 8 steps", True, 8, agent),
            Workload("tenants", "48 tenants' own system prompts, questions", True, 1, tenants),
            Workload("docs", "6 documents of 8k words, questions", True, 1, docs),
            Workload("noreuse", "unique prompts of 500-800 words", False, 1, noreuse),
        )
    }
)
LOADS = ("moderate", "near")
RATES = (45.0, 80.0)  # requests per model second into the fleet: moderate, near capacity


def sessions(name: str, load: str, seconds: float, seed: int, scale: float = 1.0) -> list[Session]:
    """The sessions of workload ``name`` at ``load`` (:data:`RATES` x ``scale`` requests per
    model second, as sessions of its turns) starting over ``seconds``."""
    w = WORKLOADS[name]
    rate = RATES[LOADS.index(load)] * scale / w.turns
    return w.plan(random.Random(f"{seed}:{name}:{load}"), rate, seconds)
