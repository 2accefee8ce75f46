"""CursorSet: the cursors of one managed ledger, their saves, deletes and trim safety.

Owned by a ManagedLedger, which hands it a narrow view of itself (CursorHost: the cursor's
LedgerView plus the first ledger id) and never lets anything else create or delete cursors.
Loop-only; file work (storage/cursor_files.py) runs in the store's cursor threads (more
than one: saves of different cursors run in parallel; one cursor has one save in flight).

Invariants:
- A deleted cursor is retired before its files are removed (retire waits for a save in
  flight and forbids later ones), so a flush can never write it back.
- Creating and deleting cursors is serialised (one lock), so a delete's unlink never
  removes the file of a cursor of the same name created meanwhile.
- Trim safety: a cursor recovered from a fallback (its previous generation, or recreated at
  the earliest position after both generations were damaged) blocks trimming until it has
  been saved again; a cursor whose name could not be recovered blocks it until the damaged
  file is removed by hand (its backlog is unknown). trim_blockers says who blocks.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from concurrent.futures import Executor
from typing import Literal, Protocol

from storage.cursor import CursorState, EncodedCursor, LedgerView, ManagedCursor
from storage.cursor_files import CursorFiles, LoadedCursor
from storage.errors import CursorNotFoundError
from storage.positions import Position
from storage.to_the_end import finish

log = logging.getLogger("horae.storage")


class CursorHost(LedgerView, Protocol):
    """What the cursor set needs from its managed ledger beyond a cursor's view."""

    @property
    def first_ledger_id(self) -> int: ...


class CursorSet:
    def __init__(
        self, host: CursorHost, files: CursorFiles, loop: asyncio.AbstractEventLoop,
        pool: Executor, reserve_id: Callable[[int], None], loaded: list[LoadedCursor],
        on_dirty: Callable[[], None] | None = None,
    ) -> None:
        """*on_dirty*: told when one of the cursors goes from saved to unsaved changes."""
        self._on_dirty = on_dirty
        self._host = host
        self._files = files
        self._loop = loop
        self._pool = pool
        self._reserve_id = reserve_id
        self._cursors: dict[str, ManagedCursor] = {}
        self._lock = asyncio.Lock()
        self.trim_blockers: dict[str, str] = {}
        """cursor name (or file stem of a lost cursor) -> why trimming is unsafe."""
        for found in loaded:
            if found.state is not None:
                state = found.state
            elif found.name is not None:
                mark_delete = Position(host.first_ledger_id, -1)
                state = CursorState(found.name, mark_delete, host.next_position(mark_delete))
            else:
                self.trim_blockers[found.stem] = "cursor file damaged, name unknown"
                continue
            if found.fallback != "none":
                self.trim_blockers[state.name] = f"cursor recovered from fallback {found.fallback}"
            self._cursors[state.name] = ManagedCursor(host, self._save, state, self._on_dirty)
        for cursor in self._cursors.values():
            cursor.advance()  # entries dropped by recovery may let mark-delete move on

    @property
    def cursors(self) -> Mapping[str, ManagedCursor]:
        return self._cursors

    def values(self) -> list[ManagedCursor]:
        return list(self._cursors.values())

    def advance_all(self) -> None:
        """Entries were found lost: a lost entry must not hold mark-delete (and the backlog)
        back."""
        for cursor in self._cursors.values():
            cursor.advance()

    async def _save(self, name: str, data: EncodedCursor, max_ledger_id: int) -> None:
        files, reserve = self._files, self._reserve_id

        def write() -> None:
            # Every ledger id a persisted cursor mentions must stay unique across restarts.
            reserve(max_ledger_id)
            files.save(name, data)

        await self._loop.run_in_executor(self._pool, write)
        if name in self.trim_blockers and name in self._cursors:
            del self.trim_blockers[name]
            log.info("storage: cursor %s saved again; trimming %s is safe again", name,
                     files.directory.parent.name)

    async def open(
        self, name: str, initial_position: Literal["earliest", "latest"]
    ) -> ManagedCursor:
        cursor = self._cursors.get(name)
        if cursor is not None:
            return cursor
        async with self._lock:
            cursor = self._cursors.get(name)
            if cursor is not None:
                return cursor
            host = self._host
            if initial_position == "earliest":
                mark_delete = Position(host.first_ledger_id, -1)
            elif host.last_confirmed is not None:
                mark_delete = host.last_confirmed
            else:
                mark_delete = Position(host.current_ledger_id, -1)
            state = CursorState(name, mark_delete, host.next_position(mark_delete))
            cursor = ManagedCursor(host, self._save, state, self._on_dirty)
            self._cursors[name] = cursor
            cursor.advance()
            try:
                await cursor.flush()
            except asyncio.CancelledError:
                # The caller went, not the save: flush raises a cancel once its write in the
                # cursor thread is over, so the file exists and the cursor stays (else its
                # entries are trimmed here and it is back at the next open).
                raise
            except BaseException:
                if self._cursors.get(name) is cursor:
                    del self._cursors[name]
                raise
            return cursor

    async def delete(self, name: str) -> None:
        async with self._lock:
            cursor = self._cursors.pop(name, None)
            if cursor is None:
                raise CursorNotFoundError(f"no cursor {name!r}")
            # To its end under the lock even if the caller is cancelled (an unsubscribe's
            # connection went): the removal in a cursor thread goes on regardless, and a
            # cursor of the same name opened beside it would have its new file removed.
            await finish(self._retire_and_remove(cursor))

    async def _retire_and_remove(self, cursor: ManagedCursor) -> None:
        await cursor.retire()
        self.trim_blockers.pop(cursor.name, None)
        await self._loop.run_in_executor(self._pool, self._files.remove, cursor.name)

    @property
    def any_dirty(self) -> bool:
        """Whether :meth:`flush` has anything to save (cheap: the store's rate-limited flush
        asks every open ledger this before it schedules anything)."""
        return any(c.dirty for c in self._cursors.values())

    async def flush(self) -> None:
        """Save every dirty cursor, in parallel (bounded by the cursor threads). Every
        cursor is tried; the first failure is raised after the others finished."""
        dirty = [c for c in self._cursors.values() if c.dirty]
        if not dirty:
            return
        results = await asyncio.gather(*(c.flush() for c in dirty), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result

    async def close(self) -> list[tuple[str, BaseException]]:
        """Close every cursor (saving it); returns the failures."""
        failures: list[tuple[str, BaseException]] = []
        cursors = self.values()
        results = await asyncio.gather(*(c.close() for c in cursors), return_exceptions=True)
        for cursor, result in zip(cursors, results, strict=True):
            if isinstance(result, BaseException):
                failures.append((cursor.name, result))
        return failures

    def health(self, now: float) -> tuple[float, int, int]:
        """(age in seconds at ``now`` of the oldest change of any cursor not yet durable, 0 for
        none; saves that failed so far; cursors whose last save failed), in one pass over the
        cursors (the store's stats ask it of every ledger at each scrape)."""
        oldest: float | None = None
        total = failing = 0
        for c in self._cursors.values():
            since = c.dirty_since
            if since is not None and (oldest is None or since < oldest):
                oldest = since
            total += c.save_failures
            if c.last_save_error is not None:
                failing += 1
        return (0.0 if oldest is None else max(0.0, now - oldest)), total, failing
