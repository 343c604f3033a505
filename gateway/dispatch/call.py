"""One request as the dispatcher sees it: a small frozen context passed down the path."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from gateway.checks.base import Check, RequestFacts, StreamGuard, TextSource
from gateway.request.model import ClientRequest
from gateway.routing.router import RouteDecision
from gateway.upstream.failures import CheckFailed
from gateway.upstream.pools import Pool
from gateway.upstream.responses_events import RESPONSES_PATH
from gateway.upstream.scheduler import ANYONE, Ticket

_LIMITS = frozenset(("max_tokens", "max_completion_tokens"))
PATHS = MappingProxyType({"chat": "/v1/chat/completions", "completions": "/v1/completions"})


@dataclass(frozen=True, slots=True)
class Call:
    req: ClientRequest
    d: RouteDecision
    deadline_at: float  # monotonic: the whole request, every attempt, ends by then
    checks: tuple[Check, ...]
    ticket: Ticket = ANYONE  # who asks (tenant, priority band): the pools' queue order
    registry: Mapping[str, Check] = field(default_factory=dict)  # every check, by name
    review_opt_out: bool = False  # the tenant's policy keeps it out of the review queue

    def facts_for(self, pool: Pool) -> RequestFacts:
        """What the checks know of the request as ``pool``'s tier receives it: a
        ``max_tokens`` from the tier's ``request_defaults`` is a limit set (an answer that
        stops there is not truncated against the client's wish)."""
        f = self.req.facts
        if f.max_tokens_set or not _LIMITS.intersection(pool.tier.request_defaults):
            return f
        return replace(f, max_tokens_set=True)

    def good_prefix(self, e: CheckFailed, text: str, finish_reason: str | None) -> int | None:
        """Where the good text before ``e`` ends in ``text``: what the failed check says
        (``Check.good_prefix``), and no further than what the failure knew (``e.at``)."""
        check = self.registry.get(e.check)
        at = check.good_prefix(text, finish_reason) if check is not None else None
        if e.at is not None:
            at = e.at if at is None else min(at, e.at)
        return at

    def guards(self, ahead_only: bool = False) -> Guards | None:
        """New stream guards of the route's checks, as one (checks that hold a stream's
        text while it may be the start of a failure: a loop, a forbidden phrase);
        ``ahead_only``: only those whose holding is worth a continuation opened early."""
        named = [(c.name, g) for c in self.checks if (g := c.guard()) is not None]
        if ahead_only:
            named = [(n, g) for n, g in named if g.ahead]
        return Guards(named) if named else None

    @property
    def path(self) -> str:
        return PATHS[self.req.kind]

    def path_for(self, pool: Pool) -> str:
        return RESPONSES_PATH if self.native(pool) else PATHS[self.req.kind]

    def native(self, pool: Pool) -> bool:
        """Whether ``pool`` gets the client's own Responses API body (its engines serve it)."""
        return self.req.native is not None and pool.tier.responses_api

    def body_for(self, pool: Pool, **fields: Any) -> dict[str, Any]:
        """The client's body for ``pool``'s tier: its model, its defaults where the client set
        none, and ``fields`` on top. A new dict: the client's own is never changed."""
        if self.req.native is not None and pool.tier.responses_api:
            stream = fields.get("stream", self.req.stream)
            return {
                **pool.tier.request_defaults,
                **self.req.native,
                "model": pool.model,
                "stream": stream,
            }
        return {**pool.tier.request_defaults, **self.req.body, "model": pool.model, **fields}

    @property
    def wants_usage(self) -> bool:
        """The client asked for a stream's usage chunk (``stream_options.include_usage``)."""
        so = self.req.body.get("stream_options")
        return isinstance(so, dict) and bool(so.get("include_usage"))

    def stream_body(self, pool: Pool) -> dict[str, Any]:
        """The body of a streamed attempt: the engine is always asked for its usage (a
        stream is charged for its prompt and completion tokens like any request); the
        relay strips that chunk when the client did not ask for it."""
        if self.wants_usage:
            return self.body_for(pool)
        so = self.req.body.get("stream_options")
        return self.body_for(
            pool, stream_options={**(so if isinstance(so, dict) else {}), "include_usage": True}
        )

    def can_be_continued(self) -> bool:
        """Whether a stream of this request could be continued on another tier at all."""
        if self.req.kind == "completions" and not isinstance(self.req.body.get("prompt"), str):
            return False
        return self.req.body.get("n", 1) in (1, None)


class Guards:
    """Several checks' stream guards as one: it holds while any holds, from the earliest
    start; ``confirmed`` names the check whose guard confirmed what it held."""

    __slots__ = ("_named", "start")

    def __init__(self, named: list[tuple[str, StreamGuard]]):
        self._named = named
        self.start = 0

    @property
    def holding(self) -> bool:
        return any(g.holding for _, g in self._named)

    @property
    def ahead(self) -> bool:
        """A guard that holds now says its failure is likely (a candidate loop)."""
        return any(g.holding and g.ahead for _, g in self._named)

    def update(self, state: TextSource) -> bool:
        held = [g.start for _, g in self._named if g.update(state)]  # each sees every text
        self.start = min(held) if held else state.chars
        return bool(held)

    def confirmed(self, state: TextSource) -> str | None:
        for name, g in self._named:
            if g.holding and g.confirmed(state):
                return name
        return None
