"""The replayed workload of the response-cache benchmark: a deterministic trace of an eval
run twice, agent loops whose steps are sometimes re-asked, and users asking a few common
questions (Zipf), some rephrased and some sampled; and its replay through one gateway.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass, field
from typing import Any

from evals.cache.procs import post

TOPICS = (
    "photosynthesis",
    "TCP handshakes",
    "compound interest",
    "the water cycle",
    "binary search",
    "vaccines",
    "plate tectonics",
    "hash tables",
    "inflation",
    "the French Revolution",
    "black holes",
    "recursion",
    "supply chains",
    "DNS",
)
FAQ = (
    "How do I reset my password?",
    "How do I cancel my subscription?",
    "Where can I download my invoice?",
    "How do I change my shipping address?",
    "What are your opening hours?",
    "How do I contact support?",
    "How do I delete my account?",
    "Can I get a refund?",
    "How do I track my order?",
    "Do you ship internationally?",
    "How do I update my payment method?",
    "How do I enable two-factor authentication?",
)


@dataclass
class Step:
    kind: str  # eval | eval-replay | agent | agent-retry | faq | faq-variant | faq-sampled
    body: dict[str, Any]
    session: str = ""  # an agent: its answers become its history


def _variant(q: str, rng: random.Random) -> str:
    return rng.choice(
        [
            q.lower().rstrip("?"),
            "Hi! " + q,
            q.replace("?", "? Thanks."),
            "Quick question: " + q[0].lower() + q[1:],
            q.upper(),
        ]
    )


def workload(scale: int, seed: int = 11) -> list[Step]:
    rng = random.Random(seed)
    chat = {"model": "auto", "max_tokens": 256, "temperature": 0}  # answers end by themselves
    evals = [
        Step(
            "eval",
            {
                **chat,
                "messages": [
                    {
                        "role": "user",
                        "content": f"Explain {TOPICS[i % len(TOPICS)]} to a student (item {i}).",
                    }
                ],
            },
        )
        for i in range(10 * scale)
    ]
    mixed: list[Step] = []
    for a in range(4 * scale):
        for k in range(5):
            mixed.append(Step("agent", {}, session=f"agent{a}:{k}"))
            if rng.random() < 0.35:
                mixed.append(Step("agent-retry", {}, session=f"agent{a}:{k}"))
    weights = [1 / (i + 1) ** 1.1 for i in range(len(FAQ))]
    for _ in range(30 * scale):
        q = rng.choices(FAQ, weights)[0]
        kind, body = "faq", {**chat, "messages": [{"role": "user", "content": q}]}
        roll = rng.random()
        if roll < 0.2:
            kind, body = "faq-sampled", {**body, "temperature": 0.7}
        elif roll < 0.45:
            kind = "faq-variant"
            body = {**body, "messages": [{"role": "user", "content": _variant(q, rng)}]}
        mixed.append(Step(kind, body))
    lanes: dict[str, list[Step]] = {}
    for st in mixed:  # each agent's steps, in the order it takes them
        if st.session:
            lanes.setdefault(st.session.split(":")[0], []).append(st)
    rng.shuffle(mixed)
    nxt = {a: iter(v) for a, v in lanes.items()}  # shuffled slots, each agent's steps in order
    mixed = [next(nxt[st.session.split(":")[0]]) if st.session else st for st in mixed]
    replay = [Step("eval-replay", s.body) for s in evals]
    return [*evals, *mixed, *replay]


@dataclass
class Tally:
    kinds: dict[str, dict[str, int]] = field(default_factory=dict)
    hit_ms: list[float] = field(default_factory=list)
    miss_ms: list[float] = field(default_factory=list)
    saved_tokens: int = 0  # prompt + completion tokens of the hits' stored answers
    saved_completion: int = 0
    requests: int = 0


def replay(url: str, steps: list[Step]) -> Tally:
    t = Tally()
    history: dict[str, list[dict[str, str]]] = {}
    asked: dict[str, dict[str, Any]] = {}
    for s in steps:
        body = s.body
        if s.session:
            agent, k = s.session.split(":")
            if s.kind == "agent":
                task = TOPICS[int(agent.removeprefix("agent")) % len(TOPICS)]
                system = {"role": "system", "content": f"You are an agent researching {task}."}
                msgs = history.setdefault(agent, [system])
                msgs.append({"role": "user", "content": f"Observation {k}: continue the plan."})
                asked[s.session] = {
                    "model": "auto",
                    "max_tokens": 256,
                    "temperature": 0,
                    "messages": list(msgs),
                }
            body = asked[s.session]
        t0 = time.perf_counter()
        headers, raw = post(url, body)
        ms = (time.perf_counter() - t0) * 1000
        answer = json.loads(raw)
        if s.kind == "agent":
            history[s.session.split(":")[0]].append(
                {"role": "assistant", "content": answer["choices"][0]["message"]["content"] or ""}
            )
        state = headers.get("x-gateway-cache", "none")
        match = headers.get("x-gateway-cache-match", "").split(" ")[0]
        key = f"hit/{match}" if state == "hit" else state
        row = t.kinds.setdefault(s.kind, {})
        row[key] = row.get(key, 0) + 1
        t.requests += 1
        if state == "hit":
            t.hit_ms.append(ms)
            usage = answer.get("usage") or {}
            t.saved_tokens += int(usage.get("total_tokens") or 0)
            t.saved_completion += int(usage.get("completion_tokens") or 0)
        else:
            t.miss_ms.append(ms)
    return t
