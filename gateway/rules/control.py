"""Live routing-rule changes: file watch, upload, rollback, and every replica in step.

Rules come in as YAML text from three places — the file on disk (watched), an admin
upload, a rollback to a stored version — and go through one gate,
:meth:`RulesControl.submit`: parse and validate; on failure nothing changes and the
errors are kept for the admin API; on success the text becomes a new version in the
store, is published, and every replica (this one included) swaps to it. A replica
that starts, or reconnects after a gap, adopts the store's current version.

Parsing runs in a worker thread: a large document takes a second or more, and every
replica parses each new version, so on the event loop it would pause every replica's
requests at once. Changes on one replica are applied one at a time, in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from gateway.errors import StoreUnavailable
from gateway.rules.schema import Rules, RulesError, parse_rules


class RulesVersions(Protocol):
    """What rule changes need of the store: numbered versions and the current one. Making a
    version current announces it to every replica (the store does, on that write). The
    store implements it; the rules do not import it."""

    async def save_rules(self, text: str, meta: dict[str, Any]) -> int: ...
    async def set_current_rules(self, version: int) -> None: ...
    async def claim_first_rules(
        self, text: str, meta: dict[str, Any]
    ) -> tuple[int, str, bool]: ...  # (current version, its text, whether it is this text)
    async def current_rules(self) -> tuple[int, str] | None: ...
    async def rules_versions(self) -> list[dict[str, Any]]: ...
    async def rules_text(self, version: int) -> str | None: ...


log = logging.getLogger("gateway.rules.schema")


class RulesControl:
    def __init__(
        self,
        store: RulesVersions | None,
        path: Path,
        text: str,
        apply: Callable[[Rules], None],
        prepare: Callable[[Rules, str], Rules] | None,
        watch_interval: float,
    ):
        """``prepare``: what the gateway makes of a parsed version before it is stored (its
        settings' overrides applied, what it names checked: RulesError if it cannot run),
        in the worker thread with the parse; ``apply`` must not fail after it.
        Set :attr:`file_first` before :meth:`start` where the rules file is the operator's
        own (the embedded store, one machine)."""
        self.store = store
        self.file_first = False  # a rules file edited while stopped: a new version at start
        self.path = path
        self.text = text
        self.version = 0  # 0: not stored (no store configured)
        self.last_error: dict[str, Any] | None = None
        self._apply = apply
        self._prepare = prepare
        self._interval = watch_interval
        self._stat = self._file_stat()
        self._task: asyncio.Task[None] | None = None
        self._changing = asyncio.Lock()  # one change at a time: parse, store, apply

    def parse(self, text: str, source: str) -> Rules:
        rules = parse_rules(text, source)
        return rules if self._prepare is None else self._prepare(rules, source)

    async def parse_off_loop(self, text: str, source: str) -> Rules:
        """:meth:`parse` in a worker thread; the event loop serves requests meanwhile."""
        return await asyncio.to_thread(self.parse, text, source)

    async def start(self) -> None:
        """Adopt the store's current rules, or store ours as the first version."""
        if self.store is not None:
            file_text = self.text
            try:
                async with self._changing:
                    await self._claim("startup")
                if self.file_first:
                    await self._file_changed(file_text)
            except StoreUnavailable as e:
                log.warning("rules: store unreachable at start (%s); using %s", e, self.path)
        if self._interval > 0:
            self._task = asyncio.get_running_loop().create_task(self._watch())

    async def _file_changed(self, text: str) -> None:
        """The rules file is the operator's too: when its text is not the one the store last
        recorded from a file (it was edited while the gateway was stopped, or another file
        is given), it becomes a new version, as the watcher would have made it while
        running. Otherwise the store's current version stays: an upload or a rollback
        survives a restart."""
        assert self.store is not None
        if text == self.text:
            return
        from_files = [m for m in await self.store.rules_versions() if _from_file(m)]
        if from_files and await self.store.rules_text(int(from_files[-1]["version"])) == text:
            return
        with contextlib.suppress(RulesError):  # recorded in last_error; the store's stays
            v = await self.submit(text, str(self.path), "startup: the file changed")
            log.info("rules: %s changed while the gateway was stopped: version %d", self.path, v)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def submit(self, text: str, source: str, by: str) -> int:
        """Validate and make ``text`` the rules of every replica; RulesError if invalid."""
        async with self._changing:
            try:
                rules = await self.parse_off_loop(text, source)
            except RulesError as e:
                self.last_error = {"source": source, "errors": e.errors, "at": time.time()}
                log.error("rules from %s rejected: %s", source, "; ".join(e.errors))
                raise
            self.last_error = None
            if self.store is None:
                self._swap(self.version + 1, text, rules)
                return self.version
            version = await self._store(text, {"source": source, "by": by})
            self._apply(rules)
            return version

    async def amend(self, edit: Callable[[str], str | None], source: str, by: str) -> int | None:
        """A change made from the running text (a rollout's step): ``edit`` is given the
        store's current text, read once it is this change's turn (so no upload made
        meanwhile is lost), and answers the new text, or None to change nothing. The new
        text is validated, stored and announced as :meth:`submit` does; RulesError if it
        is invalid (:attr:`last_error` stays the file's and the uploads')."""
        async with self._changing:
            current = self.text
            if self.store is not None:
                cur = await self.store.current_rules()
                current = cur[1] if cur is not None else current
            text = edit(current)
            if text is None or text == current:
                return None
            rules = await self.parse_off_loop(text, source)
            if self.store is None:
                self._swap(self.version + 1, text, rules)
                return self.version
            version = await self._store(text, {"source": source, "by": by})
            self._apply(rules)
            return version

    async def rollback(self, version: int, by: str) -> int:
        if self.store is None:
            raise KeyError(version)
        async with self._changing:
            text = await self.store.rules_text(version)
            if text is None:
                raise KeyError(version)
            rules = await self.parse_off_loop(text, f"version {version}")
            await self.store.set_current_rules(version)  # announced: every replica adopts it
            log.info("rules: rollback to version %d by %s", version, by)
            self._swap(version, text, rules)
            return version

    async def _store(self, text: str, meta: dict[str, Any]) -> int:
        assert self.store is not None
        version = await self.store.save_rules(text, {**meta, "at": time.time()})
        await self.store.set_current_rules(version)  # announced: every replica adopts it
        self.text, self.version = text, version
        return version

    async def _adopt(self, version: int, text: str) -> None:
        try:
            rules = await self.parse_off_loop(text, f"version {version}")
        except RulesError as e:  # a version stored by a newer gateway, say: keep ours
            self.last_error = {"source": f"version {version}", "errors": e.errors}
            return
        self._swap(version, text, rules)

    def _swap(self, version: int, text: str, rules: Rules) -> None:
        self.text, self.version = text, version
        self._apply(rules)
        log.info("rules: now at version %d", version)

    async def resync(self) -> None:
        """Adopt the store's current version: the store announced a new one, or this replica
        may have missed announcements (it was cut off from the store)."""
        if self.store is None:
            return
        async with self._changing:  # the store's current version, read once it is our turn
            with contextlib.suppress(StoreUnavailable):
                await self._claim("re-recorded")

    async def rerecord(self) -> bool:
        """Store the running rules as a version when the store has none (a Redis that came
        back empty), so the history and ``version`` agree; False when it had some."""
        if self.store is None:
            return False
        async with self._changing:
            return await self._claim("re-recorded")

    async def _claim(self, by: str) -> bool:
        """Adopt the store's current rules, or record ours as its first version when it has
        none. Every replica may do this at once (a fleet starting, a Redis that came back
        empty): one claim wins and is announced, the others adopt it. True when ours was."""
        assert self.store is not None
        meta = {"source": str(self.path), "by": by, "at": time.time()}
        version, text, ours = await self.store.claim_first_rules(self.text, meta)
        if ours:  # the store announced it
            self.version = version
            log.info("rules: the store had none; the running rules recorded as version %d", version)
        elif version != self.version or text != self.text:
            await self._adopt(version, text)
        return ours

    # -- the file on disk ---------------------------------------------------------------------
    def _file_stat(self) -> tuple[float, int] | None:
        try:
            st = self.path.stat()
        except OSError:
            return None
        return st.st_mtime, st.st_size

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            stat = self._file_stat()
            if stat is None or stat == self._stat:
                continue
            self._stat = stat
            try:
                text = self.path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as e:
                self.last_error = {"source": str(self.path), "errors": [str(e)], "at": time.time()}
                log.error("rules file %s unreadable: %s", self.path, e)
                continue
            if text != self.text:
                await self._submit_file(text)

    async def _submit_file(self, text: str) -> None:
        """A changed rules file; whatever is wrong with it, the watcher lives on."""
        try:
            v = await self.submit(text, str(self.path), "file watch")
            log.info("rules file %s changed: version %d", self.path, v)
        except (RulesError, StoreUnavailable):
            pass  # recorded in last_error / retried on the next change
        except Exception as e:
            self.last_error = {"source": str(self.path), "errors": [repr(e)], "at": time.time()}
            log.exception("rules file %s could not be applied", self.path)


def _from_file(meta: dict[str, Any]) -> bool:
    """Whether a stored version was read from a rules file (its source is a path), not
    uploaded."""
    source = str(meta.get("source", ""))
    return "/" in source or source.endswith((".yaml", ".yml"))
