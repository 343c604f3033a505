"""Which model a tier's engines serve, when the rules do not name one, and its context window.

A tier without ``model`` asks each replica's ``GET /v1/models`` (at start-up, then with
every health probe) and sends the first model id listed. Replicas that list different
first models are reported (a warning in the log, ``/readyz`` detail): the model most
replicas serve is used, so one misconfigured replica does not rename the tier.

A tier without ``context_window`` reads it there too, where the engine reports it
(``max_model_len``: vLLM, SGLang, the simulator): the smallest any replica reports for
the model the tier sends. An engine's own "too long for my context" answer names its
window too (:mod:`.refusals`), and a hosted model's is in LiteLLM's model map
(``max_input_tokens``): the tier keeps those where the rules name none.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field

import orjson

log = logging.getLogger("gateway.upstream.pools")


def model_ids(body: bytes) -> tuple[str, ...]:
    """The ids of an OpenAI ``/v1/models`` answer (nothing when it is not one)."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return ()
    data = doc.get("data") if isinstance(doc, dict) else None
    if not isinstance(data, list):
        return ()
    return tuple(m["id"] for m in data if isinstance(m, dict) and isinstance(m.get("id"), str))


def model_windows(body: bytes) -> dict[str, int]:
    """Model id -> ``max_model_len``, for the models of a ``/v1/models`` answer that report it."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return {}
    data = doc.get("data") if isinstance(doc, dict) else None
    out: dict[str, int] = {}
    for m in data if isinstance(data, list) else ():
        if isinstance(m, dict) and isinstance(m.get("id"), str):
            n = m.get("max_model_len")
            if isinstance(n, int) and not isinstance(n, bool) and n > 0:
                out[m["id"]] = n
    return out


@dataclass(slots=True)
class ModelBook:
    """What each replica of one tier said it serves, and the model the tier sends."""

    configured: str | None
    served: dict[str, tuple[str, ...]] = field(default_factory=dict)  # replica url -> ids
    chosen: str | None = None
    disagree: bool = False
    windows: dict[str, dict[str, int]] = field(default_factory=dict)  # url -> model -> window
    # the window an engine named when it refused a long prompt (a hosted model: LiteLLM's map)
    learned: int | None = None

    def record(self, url: str, ids: tuple[str, ...], windows: dict[str, int] | None = None) -> None:
        if ids:
            self.served[url] = ids
        if windows:
            self.windows[url] = windows

    def window(self, model: str) -> int | None:
        """The context window of ``model``: the smallest a replica reports or an engine
        named when it refused a prompt; None when neither is known."""
        seen = [w[model] for w in self.windows.values() if model in w]
        if self.learned is not None:
            seen.append(self.learned)
        return min(seen) if seen else None

    def settle(self, tier: str) -> bool:
        """Choose the model from the answers so far; True when the choice changed."""
        firsts = Counter(ids[0] for ids in self.served.values())
        if not firsts:
            return False
        disagree = len(firsts) > 1
        if disagree and not self.disagree:
            log.warning(
                "replicas of tier %s serve different models: %s",
                tier,
                ", ".join(f"{u}: {ids[0]}" for u, ids in self.served.items()),
            )
        self.disagree = disagree
        chosen = firsts.most_common(1)[0][0]
        if chosen == self.chosen:
            return False
        if self.chosen is not None:
            log.warning("tier %s now sends model %r (was %r)", tier, chosen, self.chosen)
        self.chosen = chosen
        return True

    def state(self) -> dict[str, object]:
        source = "configured" if self.configured else ("discovered" if self.chosen else "unknown")
        out: dict[str, object] = {"model": self.configured or self.chosen, "source": source}
        if self.configured is None:
            out["replicas"] = {u: ids[0] for u, ids in self.served.items()}
            out["replicas_disagree"] = self.disagree
        return out
