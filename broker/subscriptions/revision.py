"""The cursor state revision controller of one subscription (PIP-269).

Theory of operation
-------------------
A *cursor position reset* (seek by id or time, admin reset-cursor, skip N, skip by ids,
clear-backlog, a subscription type change, the rewind when the last consumer leaves) changes the
cursor's read and mark-delete positions behind the back of reads that are in flight and of frames
already queued for consumers. Each subscription owns one :class:`RevisionController` next to its
cursor; every reset runs as one *revision* through it, and nothing else moves ``revision``:

``start()``
    marks the cursor *under revision*. While it is, :meth:`is_outdated` answers True for every
    revision number, so the dispatcher starts no read and discards every read, replay read and
    queued frame it holds. A second reset that calls ``start()`` while one runs is **queued**
    (FIFO; PIP-269 leaves it to the implementation to refuse or queue). Queueing was chosen
    because every caller would otherwise need a retry loop (the client's SEEK, an admin call and
    the last-consumer rewind can all meet), and each revision is short: it runs on the event
    loop and awaits only what the reset itself needs.
``end(revision, edit)``
    applies ``edit`` (the cursor position change), bumps ``revision`` by one, counts the increase
    and clears the mark -- all without yielding to the loop, so no read can observe the new
    positions under the old revision or the old positions under the new one. If the reset's
    body failed, ``end`` still bumps the revision (its derived state was already dropped) but
    applies no edit.
``is_outdated(n)``
    True while a revision runs or when ``n`` is not the current revision: a read or a frame
    made under ``n`` must be dropped.

The revision number itself lives in the cursor (storage persists it for a durable cursor), so the
controller reads and writes ``cursor.revision``; :attr:`increase_count` counts only revisions done
by this controller (resets, never topic loads) for ``pulsar_cursor_epoch_increase_count``, and
:attr:`task_state` is ``pulsar_cursor_epoch_increase_task_state`` (0 idle, 1 running).

Callers: the subscription's reset operations only. Single event loop; not thread-safe.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Protocol

__all__ = ["Revision", "RevisionController", "RevisionSource", "RevisionTaskState",
           "RevisionedCursor"]


class RevisionedCursor(Protocol):
    """The part of a cursor the controller owns: its revision number."""

    revision: int


class RevisionSource(Protocol):
    """What readers and frame writers may ask: the current revision and whether one made under
    an older number must be dropped."""

    @property
    def revision(self) -> int: ...

    @property
    def under_revision(self) -> bool: ...

    def is_outdated(self, revision: int) -> bool: ...


class RevisionTaskState(enum.IntEnum):
    """``pulsar_cursor_epoch_increase_task_state``."""

    IDLE = 0
    RUNNING = 1


class Revision:
    """One running revision: the cursor edit to apply when it ends."""

    __slots__ = ("_edits", "ended", "started_under")

    def __init__(self, started_under: int) -> None:
        self.started_under = started_under
        self.ended = False
        self._edits: list[Callable[[], None]] = []

    def apply_at_end(self, edit: Callable[[], None]) -> None:
        """Register a cursor position change; run by :meth:`RevisionController.end`, in order,
        in the same loop step as the revision bump."""
        self._edits.append(edit)


class RevisionController:
    """Start/end cursor state revisions of one cursor; queue concurrent ones (FIFO)."""

    def __init__(self, cursor: RevisionedCursor) -> None:
        self._cursor = cursor
        self._lock = asyncio.Lock()  # FIFO: a queued revision waits its turn
        self._running: Revision | None = None
        self._idle = asyncio.Event()
        self._idle.set()
        self._waiting = 0
        self.increase_count = 0

    # ------------------------------------------------------------------ state

    @property
    def revision(self) -> int:
        return self._cursor.revision

    @property
    def under_revision(self) -> bool:
        return self._running is not None

    @property
    def task_state(self) -> RevisionTaskState:
        return RevisionTaskState.RUNNING if self._running is not None else RevisionTaskState.IDLE

    @property
    def queued(self) -> int:
        """Revisions waiting for the running one (not counting it)."""
        return self._waiting

    def is_outdated(self, revision: int) -> bool:
        return self._running is not None or revision != self._cursor.revision

    async def wait_idle(self) -> None:
        """Return when no revision runs (a joining consumer waits here)."""
        while self._running is not None:
            await self._idle.wait()

    # ------------------------------------------------------------------ start / end

    async def start(self) -> Revision:
        """Mark the cursor under revision, waiting (FIFO) for a running one to end first."""
        self._waiting += 1
        try:
            await self._lock.acquire()
        finally:
            self._waiting -= 1
        rev = Revision(self._cursor.revision)
        self._running = rev
        self._idle.clear()
        return rev

    def end(self, rev: Revision, *, apply: bool = True) -> int:
        """Apply ``rev``'s edits (unless ``apply`` is False), bump the revision, release.

        Returns the new revision. Raises RuntimeError for a revision that is not the running one.
        """
        if rev is not self._running or rev.ended:
            raise RuntimeError("end() of a cursor revision that is not running")
        try:
            if apply:
                for edit in rev._edits:
                    edit()
        finally:
            self._cursor.revision += 1
            self.increase_count += 1
            rev.ended = True
            self._running = None
            self._idle.set()
            self._lock.release()
        return self._cursor.revision

    @asynccontextmanager
    async def revise(self) -> AsyncIterator[Revision]:
        """``async with controller.revise() as rev:`` -- start, run the body, end. The edits
        registered with ``rev.apply_at_end`` are applied only if the body did not raise."""
        rev = await self.start()
        ok = False
        try:
            yield rev
            ok = True
        finally:
            self.end(rev, apply=ok)
