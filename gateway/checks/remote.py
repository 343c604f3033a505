"""The checks that ask someone else: a ``webhook`` users run and a ``judge`` model.

Their time comes from the request's deadline: a verdict is awaited for at most the check's
``timeout`` and never past the attempt's end (which already keeps the next tiers' reserve),
so the fallback always has its time. Each has a concurrency cap and its own circuit: after
``circuit.failures`` errors in a row it is open for ``circuit.cooldown`` seconds, and its
verdict is ``on_error`` at once (a dead webhook costs nothing), then one call probes it.
The I/O is the gateway's (:class:`CheckServices`, given when the checks are built): the
checks see a function that posts and one that asks a tier, never sockets.
"""

from __future__ import annotations

import asyncio
import random
import re
import time
from collections.abc import Mapping
from typing import Any, Final, Protocol

import orjson

from gateway.checks.base import (
    Abilities,
    BaseCheck,
    CheckContext,
    CheckResult,
    Cost,
    Output,
    RequestFacts,
    fail,
    snippet,
)
from gateway.checks.kinds import CircuitSpec, JudgeSpec, WebhookSpec

__all__ = ("CheckContext", "CheckServices", "JudgeCheck", "RemoteError", "WebhookCheck")

MAX_TEXT_CHARS: Final = 200_000  # what a webhook or a judge is sent of an answer, at most


class RemoteError(Exception):
    """The webhook or the judge did not give a verdict (an error, a bad answer)."""


class CheckServices(Protocol):
    """The gateway's I/O, for the checks that need it."""

    async def post(
        self, url: str, body: bytes, headers: Mapping[str, str], timeout: float
    ) -> bytes:
        """POST ``body``; the 2xx answer's body. Raises on anything else."""
        ...

    async def ask(
        self, tier: str, messages: list[dict[str, Any]], max_tokens: int, timeout: float
    ) -> str:
        """A tier's answer to ``messages`` (not checked, not retried)."""
        ...


class _Circuit:
    __slots__ = ("_cooldown", "_failures", "_threshold", "opened_at", "probing")

    def __init__(self, spec: CircuitSpec):
        self._threshold, self._cooldown = spec.failures, spec.cooldown
        self._failures = 0
        self.opened_at: float | None = None
        self.probing = False

    def allows(self, now: float) -> bool:
        if self.opened_at is None:
            return True
        if now - self.opened_at < self._cooldown or self.probing:
            return False
        self.probing = True  # half-open: this call is the probe
        return True

    def record(self, ok: bool, now: float) -> None:
        if ok:
            self._failures, self.opened_at, self.probing = 0, None, False
            return
        self._failures += 1
        if self.probing or self._failures >= self._threshold:
            self.opened_at, self.probing = now, False

    @property
    def is_open(self) -> bool:
        return self.opened_at is not None


class _Remote(BaseCheck):
    """What a webhook and a judge share: budget, cap, circuit, ``on_error``."""

    __slots__ = ("_cap", "_circuit", "_io", "_ok", "_on_error", "_timeout", "abilities", "name")

    def __init__(self, name: str, spec: WebhookSpec | JudgeSpec, io: CheckServices | None):
        self.name = name
        self._io = io
        self._ok = CheckResult(True, name)
        self._timeout = spec.timeout
        self._on_error = spec.on_error
        self._cap = asyncio.Semaphore(spec.max_concurrency)
        self._circuit = _Circuit(spec.circuit)

    @property
    def circuit_open(self) -> bool:
        return self._circuit.is_open

    def run(self, out: Output, req: RequestFacts) -> CheckResult:
        return self._ok  # never asked synchronously: see ``verdict``

    def _error(self, why: str) -> CheckResult:
        if self._on_error == "pass":
            return self._ok
        return fail(self.name, f"no verdict ({why}); on_error: fail")

    async def verdict(self, out: Output, req: RequestFacts, ctx: CheckContext) -> CheckResult:
        """The verdict within ``min(timeout, ctx.until - now)``; ``on_error`` without one."""
        now = time.monotonic()
        budget = min(self._timeout, ctx.until - now)
        if self._io is None:
            return self._error("no I/O")
        if budget <= 0.001:
            return self._error("no time left")
        if not self._circuit.allows(now):
            return self._error("circuit open")
        probe = self._circuit.probing  # this call is the half-open circuit's one probe
        asked = False  # past the cap: a failure from here on is the service's
        try:
            async with asyncio.timeout(budget):
                async with self._cap:
                    asked = True
                    result = await self._ask(out, req, ctx, budget)
        except TimeoutError:
            if asked:
                self._circuit.record(False, time.monotonic())
            elif probe:
                self._circuit.probing = False  # it never asked: the next call probes
            return self._error("timeout" if asked else "at its concurrency cap")
        except asyncio.CancelledError:
            if probe:  # a cancelled probe proved nothing: the next call probes
                self._circuit.probing = False
            raise
        except (RemoteError, OSError, ValueError) as e:
            self._circuit.record(False, time.monotonic())
            return self._error(snippet(str(e), 60))
        except Exception as e:  # whatever the I/O raised: a verdict is never a 500
            self._circuit.record(False, time.monotonic())
            return self._error(type(e).__name__)
        self._circuit.record(True, time.monotonic())
        return result

    async def _ask(
        self, out: Output, req: RequestFacts, ctx: CheckContext, budget: float
    ) -> CheckResult:
        raise NotImplementedError  # pragma: no cover


class WebhookCheck(_Remote):
    """POSTs ``{"text", "partial", "request", "rule", "check", "finish_reason",
    "tool_calls"}``; the answer is ``{"pass": bool, "reason": str}``."""

    __slots__ = ("_headers", "_url")

    def __init__(self, name: str, spec: WebhookSpec, io: CheckServices | None):
        super().__init__(name, spec, io)
        self._url = spec.url
        self._headers = {"content-type": "application/json", **spec.headers}
        hold = spec.stream == "hold"
        self.abilities = Abilities(
            cost=Cost.REMOTE, needs_request=True, hold_stream=hold, report_stream=not hold
        )

    async def _ask(
        self, out: Output, req: RequestFacts, ctx: CheckContext, budget: float
    ) -> CheckResult:
        assert self._io is not None
        body = orjson.dumps(
            {
                "check": self.name,
                "rule": ctx.rule,
                "partial": ctx.partial,
                "text": out.text[:MAX_TEXT_CHARS],
                "finish_reason": out.finish_reason,
                "tool_calls": out.tool_calls,
                "request": ctx.request,
            }
        )
        raw = await self._io.post(self._url, body, self._headers, budget)
        try:
            answer = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise RemoteError("the webhook's answer is not JSON") from None
        if not isinstance(answer, dict) or not isinstance(answer.get("pass"), bool):
            raise RemoteError('the webhook\'s answer has no boolean "pass"')
        if answer["pass"]:
            return self._ok
        reason = answer.get("reason")
        return fail(self.name, reason if isinstance(reason, str) and reason else "rejected")


_VERDICT: Final = re.compile(r"(PASS|FAIL)\b", re.IGNORECASE)  # "PASS:", not "Passing"
_JUDGE_SYSTEM: Final = (
    "You grade an assistant's answer against a rubric. Reply with one line: PASS or FAIL, "
    "then a colon and a short reason."
)


class JudgeCheck(_Remote):
    """Asks ``tier`` whether the answer meets ``rubric`` (PASS/FAIL and a reason), for a
    ``sample`` share of answers. ``gate``: the answer waits for the verdict; ``score``:
    the verdict is recorded after the answer went out (``abilities.report_only``)."""

    __slots__ = ("_max_tokens", "_rubric", "_sample", "_tier")

    def __init__(self, name: str, spec: JudgeSpec, io: CheckServices | None):
        super().__init__(name, spec, io)
        self._tier, self._rubric = spec.tier, spec.rubric
        self._sample, self._max_tokens = spec.sample, spec.max_tokens
        gate = spec.mode == "gate"
        self.abilities = Abilities(
            cost=Cost.REMOTE,
            needs_request=True,
            hold_stream=gate and spec.stream == "hold",
            report_stream=gate and spec.stream == "report",
            report_only=not gate,
        )

    async def verdict(self, out: Output, req: RequestFacts, ctx: CheckContext) -> CheckResult:
        if self._sample < 1.0 and random.random() >= self._sample:
            return self._ok  # not in the sample: not graded
        return await super().verdict(out, req, ctx)

    async def _ask(
        self, out: Output, req: RequestFacts, ctx: CheckContext, budget: float
    ) -> CheckResult:
        assert self._io is not None
        asked = req.last_user[:20_000]
        prompt = (
            f"Rubric:\n{self._rubric}\n\nThe user asked:\n{asked}\n\n"
            f"The answer:\n{out.text[:MAX_TEXT_CHARS]}\n\nPASS or FAIL?"
        )
        messages = [
            {"role": "system", "content": _JUDGE_SYSTEM},
            {"role": "user", "content": prompt},
        ]
        reply = (await self._io.ask(self._tier, messages, self._max_tokens, budget)).strip()
        word = _VERDICT.match(reply.lstrip("*# "))
        why = reply.split(":", 1)[1].strip() if ":" in reply else reply
        if word is not None and word.group(1).upper() == "PASS":
            return self._ok
        if word is not None:
            return fail(self.name, f"judge: {why or 'FAIL'}")
        raise RemoteError(f"the judge answered neither PASS nor FAIL: {reply[:40]!r}")
