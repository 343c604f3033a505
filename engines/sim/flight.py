"""One admitted request's clock: its first token's time, its decode steps coalesced into
wake-ups, and the figures it reports (``sim`` in the answer)."""

from __future__ import annotations

import random
from dataclasses import dataclass

from engines.sim.config import Json
from engines.sim.plan import Plan
from engines.sim_model import Admission, Replica


@dataclass
class Flight:
    """Timing state of one admitted request (model seconds)."""

    replica: Replica
    adm: Admission
    plan: Plan
    burst: random.Random
    t: float  # model time of the next emission
    prompt_len: int = 0
    ttft_s: float = 0.0
    produced: int = 0
    steps: int = 0
    decode_s: float = 0.0
    busy_seen: float = 0.0
    holds_slot: bool = True

    def release(self) -> None:
        if self.holds_slot:
            self.holds_slot = False
            self.replica.release()

    def next_steps(self, limit: int, min_sleep: float) -> tuple[int, float]:
        """Coalesce decode steps into one wake-up: (tokens, model seconds)."""
        prof, rep = self.replica.profile, self.replica
        tokens, dt = 0, 0.0
        while self.produced + tokens < limit and (tokens == 0 or dt * rep.time_scale < min_sleep):
            b = rep.running
            mean = prof.accept_len(b)
            k = int(mean) + (1 if self.burst.random() < mean - int(mean) else 0)
            tokens += max(k, 1)
            dt += prof.step_ms(b) / 1000.0
            self.steps += 1
        stall = rep.prefill_busy_s - self.busy_seen  # decode waits while others prefill
        self.busy_seen = rep.prefill_busy_s
        self.decode_s += dt + stall
        self.t += dt + stall
        return min(tokens, limit - self.produced), dt

    def figures(self) -> Json:
        prof, adm = self.replica.profile, self.adm
        decoded = max(self.produced - 1, 0)
        return {
            "profile": prof.name,
            "batch": adm.batch,
            "queue_ms": round(adm.queue_s * 1000, 3),
            "prefill_ms": round((adm.lane_wait_s + adm.prefill_s) * 1000, 3),
            "cached_tokens": adm.cached_tokens,
            "ttft_ms": round(self.ttft_s * 1000, 3),
            "tpot_ms": round(self.decode_s * 1000 / decoded, 3) if decoded else 0.0,
            "tpot_model_ms": round(prof.tpot_ms(adm.batch), 3),
            "e2e_ms": round((self.ttft_s + self.decode_s) * 1000, 3),
            "steps": self.steps,
            "accept_len": round(decoded / self.steps, 3) if self.steps else 0.0,
        }
