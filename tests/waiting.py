"""Waiting in tests: poll for the state a test needs, with a deadline; never a fixed sleep.

A fixed sleep is too short on a busy machine (the test flakes) and too long on an idle
one (the suite crawls). These helpers check a condition every ``interval`` seconds until
it holds, and fail after ``timeout`` seconds saying what they waited for:

* ``wait_until(predicate, what)`` returns the predicate's first truthy value;
* ``await wait_until_async(predicate, what)`` is the same inside an event loop (the
  predicate may be a plain or a coroutine function; each poll yields to the loop);
* ``wait_for_log(proc, text, since=...)`` waits for ``text`` in a child process's output
  (``since``: an offset into it, taken before the event, to skip older lines);
* ``engine_got(engines, marker)`` says whether a fake engine (tests/fake_engine.py) has
  received a request whose text holds ``marker``;
* ``until(predicate)`` is True or False, for ``assert until(...)`` where reaching the
  state is itself the assertion.

The deadline (``TIMEOUT``) is generous: a passing test returns as soon as the state is
reached, so only a failing one waits it out. A test whose claim is the time itself (a
propagation that must beat a cache's expiry, say) passes its own timeout and says why.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import time
import urllib.request
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Protocol, TypeVar, overload

T = TypeVar("T")

TIMEOUT = 15.0  # seconds: generous on a busy machine, waited out only by a failing test
INTERVAL = 0.02  # between polls of another process (an HTTP request or a log read each)
ASYNC_INTERVAL = 0.002  # between polls of in-process state (each lets the loop run)


class WaitTimeout(AssertionError):
    """The awaited state did not come within the deadline (a test failure, not an error)."""


class HasLog(Protocol):
    def log(self) -> str: ...


def _failure(what: str, timeout: float, last: object, error: BaseException | None) -> str:
    msg = f"waited {timeout:g} s for {what}; last seen: {last!r}"
    return msg + (f" (last error: {error!r})" if error is not None else "")


def wait_until(
    predicate: Callable[[], T | None],
    what: str,
    *,
    timeout: float = TIMEOUT,
    interval: float = INTERVAL,
    ignore: tuple[type[BaseException], ...] = (),
) -> T:
    """Poll ``predicate`` until it returns something truthy, and return that.

    ``ignore``: exceptions that mean "not yet" (a port that does not answer yet); any
    other exception from the predicate ends the wait at once.
    """
    deadline = time.monotonic() + timeout
    last: Any = None
    error: BaseException | None = None
    while True:
        try:
            value = predicate()
        except ignore as e:
            error = e
        else:
            if value:
                return value
            last = value
        if time.monotonic() >= deadline:
            raise WaitTimeout(_failure(what, timeout, last, error))
        time.sleep(interval)


@overload
async def wait_until_async(
    predicate: Callable[[], Awaitable[T | None]],
    what: str,
    *,
    timeout: float = ...,
    interval: float = ...,
) -> T: ...


@overload
async def wait_until_async(
    predicate: Callable[[], T | None],
    what: str,
    *,
    timeout: float = ...,
    interval: float = ...,
) -> T: ...


async def wait_until_async(
    predicate: Callable[[], T | Awaitable[T | None] | None],
    what: str,
    *,
    timeout: float = TIMEOUT,
    interval: float = ASYNC_INTERVAL,
) -> T:
    """:func:`wait_until` inside an event loop: the loop runs between polls."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        last = value
        if time.monotonic() >= deadline:
            raise WaitTimeout(_failure(what, timeout, last, None))
        await asyncio.sleep(interval)


def wait_for_log(proc: HasLog, text: str, *, since: int = 0, timeout: float = TIMEOUT) -> str:
    """Wait until ``text`` is in ``proc``'s output after offset ``since``; the whole log."""

    def seen() -> str:
        log = proc.log()
        return log if text in log[since:] else ""

    try:
        return wait_until(seen, f"{text!r} in the log", timeout=timeout)
    except WaitTimeout as e:
        tail = proc.log()[since:][-4000:]
        raise WaitTimeout(f"{e}\n--- the log since offset {since}, its end:\n{tail}") from None


def engine_got(engines: Iterable[str], marker: str) -> bool:
    """Whether one of these fake engines has received a request whose text holds ``marker``."""
    for base in engines:
        with urllib.request.urlopen(f"{base}/_requests", timeout=5) as r:
            if marker in json.dumps(json.loads(r.read())):
                return True
    return False


def until(predicate: Callable[[], object], timeout: float = TIMEOUT) -> bool:
    """True once ``predicate()`` is truthy, False after ``timeout`` seconds."""
    try:
        wait_until(predicate, "the condition", timeout=timeout)
    except WaitTimeout:
        return False
    return True
