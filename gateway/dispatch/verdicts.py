"""The verdict of a call's checks on one whole answer.

The cheap checks run first, in the rule's order; then the remote ones (a webhook, a judge
that gates) together, each within its timeout and never past the attempt's end (which
keeps the next tiers' reserve). Report-only checks (a judge that scores) run after the
answer went out, in the background: their verdicts go to the metrics and to whoever
listens (the review queue), and delay no one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence

from gateway.checks.base import Check, CheckContext, CheckResult, Cost, Output, RequestFacts
from gateway.dispatch.call import Call
from gateway.telemetry.recorder import Telemetry

log = logging.getLogger("gateway.dispatch")
Reported = Callable[[Call, Output, CheckResult], Awaitable[None]]
REPORT_MAX_S = 120.0  # a report-only check is given at most this (its own timeout first)
MAX_REPORTS = 256  # report-only checks running at once, per process: more are skipped


class Verdicts:
    """Whole-answer verdicts of one dispatcher, and the report-only checks it started."""

    def __init__(self, telemetry: Telemetry, reported: Reported | None = None):
        self._tel = telemetry
        self._tasks: set[asyncio.Task[None]] = set()
        self.reported = reported  # a report-only check's verdict, to whoever keeps them

    async def whole(
        self,
        call: Call,
        out: Output,
        until: float,
        checks: Sequence[Check] | None = None,
        partial: bool = False,
        facts: RequestFacts | None = None,
    ) -> CheckResult | None:
        """The first failure of ``checks`` (default: the call's) on ``out``, or None;
        ``facts``: the request as the answering tier got it (default: as the client sent it)."""
        checks = call.checks if checks is None else checks
        facts = call.req.facts if facts is None else facts
        acting = [c for c in checks if not c.abilities.report_only]
        cheap = [c for c in acting if c.abilities.cost is Cost.CHEAP]
        bad = self._tel.run_checks(cheap, out, facts) if cheap else None
        if bad is not None or len(cheap) == len(acting):
            return bad
        remote = [c for c in acting if c.abilities.cost is not Cost.CHEAP]
        ctx = CheckContext(call.req.body, call.d.rule, until, partial)
        results = await asyncio.gather(*(self._awaited(c, out, facts, ctx) for c in remote))
        return next((r for r in results if not r.ok), None)

    async def _awaited(
        self, c: Check, out: Output, facts: RequestFacts, ctx: CheckContext
    ) -> CheckResult:
        t0 = time.perf_counter()
        res = await c.verdict(out, facts, ctx)
        self._tel.check_verdict(c.name, res.ok, time.perf_counter() - t0)
        return res

    def report(self, call: Call, out: Output) -> None:
        """Start the call's report-only checks on the answer that went out."""
        for c in call.checks:
            if not c.abilities.report_only:
                continue
            if len(self._tasks) >= MAX_REPORTS:
                log.warning("report-only check %s skipped: %d running", c.name, MAX_REPORTS)
                return
            task = asyncio.get_running_loop().create_task(self._report(c, call, out))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _report(self, c: Check, call: Call, out: Output) -> None:
        ctx = CheckContext(call.req.body, call.d.rule, time.monotonic() + REPORT_MAX_S)
        res = await self._awaited(c, out, call.req.facts, ctx)
        if self.reported is not None:
            try:
                await self.reported(call, out, res)
            except Exception:  # a listener's fault is logged, never the request's
                log.exception("a report-only verdict's listener failed")

    async def aclose_later(self) -> None:
        """A rules swap retired these verdicts: let the reports running finish (each is
        bounded by its check's timeout), then stop."""
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=REPORT_MAX_S)
        await self.aclose()

    async def aclose(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        for t in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
