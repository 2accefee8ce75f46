"""ManagedLedger: one topic's sequence of ledgers, its appends, reads and cursors.

Theory of operation:
- A managed ledger is a directory (see storage/store.py) holding one segment file per ledger
  (the directory listing IS the ledger list; the sealed-segment manifest beside it,
  storage/sealed_manifest.py, only spares the open a read of each sealed segment) and a
  cursors/ directory. Every open starts a new ledger (Pulsar semantics); the ledgers found
  on disk are recovered (storage/recovery.py) and sealed; one recovery took from the manifest
  is checked against its files at its first read (storage/sealed_checks.py).
- The write side is storage/ledger_appends.py's LedgerAppends (owned here; ``append``,
  ``append_run`` and ``add_listener`` are its own, handed out as they are).
- append() runs on the loop: it numbers the entry (ledger_id, next entry id), rolls over to a
  new ledger by entry count, size or age, and queues it for the group-commit writer. The
  future resolves on the loop once the entry is fsynced; futures of one ledger resolve in
  append order. last_confirmed only moves then, so readers never see unsynced entries.
  append_run() does the same for a run of entries (one socket read's SENDs of a producer)
  with one DurableSink instead of a future per entry (storage/segment_file.py): the sink is
  told once per run and group commit, in append order with the futures.
- A write or fsync failure fences the managed ledger: pending and later appends fail with
  PersistenceError until it is closed and opened again (which starts a fresh ledger). Its
  lifecycle is one LedgerLifecycle (open, fenced, closed; the fence cause is kept).
- Reads are served from the store's entry cache when possible, else from disk in a read
  thread; entries missing after recovery (corrupt records) are skipped, never served.
- The ledger list and the position arithmetic over it (next position, entries between two
  positions, what a trim may delete) are storage/ledger_list.py's LedgerList, owned here.
- Cursors belong to the ledger's CursorSet (storage/cursors.py); a cursor sees the ledger
  through the LedgerView protocol (ledger_extent, ledger_after, current_ledger_id, ...),
  which this class implements, and never holds a reference typed as ManagedLedger.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pyroaring import BitMap

from storage.cache import EntryCache
from storage.config import StorageConfig
from storage.cursor import ManagedCursor
from storage.cursor_files import CursorFiles, LoadedCursor
from storage.cursors import CursorSet
from storage.errors import (
    CursorNotFoundError,
    LedgerClosedError,
)
from storage.fileops import FileOps
from storage.ids import IdAllocator
from storage.index_pages import IndexPager
from storage.ledger_appends import LedgerAppends, LedgerLifecycle, ReadOnlyFlag
from storage.ledger_list import LedgerList
from storage.ledger_state import LedgerInfo, LedgerState
from storage.positions import Entry, Position
from storage.read_fds import ReadFds
from storage.reads import DEFAULT_MAX_READ_BYTES, EntryReader
from storage.relocation import RelocatedEntries, RelocatedState
from storage.sealed_checks import SealedChecks
from storage.sealed_manifest import compact_manifest
from storage.segment_file import SegmentFile
from storage.segments import (
    RecoveryEvent,
)
from storage.writer import GroupCommitWriter

log = logging.getLogger("horae.storage")


@dataclass(slots=True)
class LedgerContext:
    """What a managed ledger needs from its store (so ledger.py never imports store.py)."""

    loop: asyncio.AbstractEventLoop
    config: StorageConfig
    ops: FileOps
    ids: IdAllocator
    writer: GroupCommitWriter
    cache: EntryCache
    read_pool: Executor
    io_pool: Executor
    cursor_pool: Executor
    disk: ReadOnlyFlag
    pager: IndexPager
    read_fds: ReadFds
    report: Callable[[RecoveryEvent], None]
    on_close: Callable[[ManagedLedger], None]
    #: A cursor of this ledger now holds unsaved changes (the store's flush visits those).
    on_cursor_dirty: Callable[[ManagedLedger], None]


class ManagedLedger:
    def __init__(
        self, ctx: LedgerContext, name: str, directory: Path, recovered: list[LedgerState],
        cursors: list[LoadedCursor], relocated: RelocatedState | None = None,
    ) -> None:
        self._ctx = ctx
        self.name = name
        self.directory = directory
        #: Entries returned by :meth:`read_entries` (cache or disk), since the ledger opened.
        self.entries_read = 0
        self._list = LedgerList()
        self._ledgers = self._list.by_id  # the same objects: the reader shares them
        self._ledger_ids = self._list.ids
        for led in recovered:
            self._list.add(led)
        #: Pending delayed entries copied out of ledgers so they can be trimmed
        #: (storage/relocation.py); a relocated ledger whose segment is gone stays in the
        #: list as a ghost (its entry count, no bytes) and is read from here.
        self.relocated = RelocatedEntries(directory, relocated or RelocatedState(),
                                          fsync=ctx.config.fsync, loop=ctx.loop,
                                          pool=ctx.io_pool, read_pool=ctx.read_pool)
        for ledger_id, (entries, created_ms) in self.relocated.ledgers.items():
            if ledger_id not in self._ledgers:
                ghost = LedgerState(SegmentFile(ledger_id, directory / f"{ledger_id}.ghost",
                                                created_ms), sealed=True)
                ghost.confirmed = ghost.next_entry_id = entries
                self._list.add(ghost)
                self.relocated.ghosts.add(ledger_id)
        last_confirmed: Position | None = None
        for led in reversed(recovered):
            if led.confirmed > 0:
                last_confirmed = Position(led.ledger_id, led.confirmed - 1)
                break
        self._appends = appends = LedgerAppends(ctx, name, directory, self._list, last_confirmed)
        self._closing: asyncio.Future[None] | None = None   # the one close, once begun
        # The write side's own (storage/ledger_appends.py), handed out as they are.
        self.append = appends.append
        self.append_run = appends.append_run
        self.add_listener = appends.add_listener
        self.remove_listener = appends.remove_listener
        #: Whether new entries are cached: its topic says while it has subscriptions.
        self.caching = appends.caching
        self.sealed_checks = SealedChecks(
            ctx.loop, ctx.ops, ctx.read_pool, name, ctx.config.fsync, ctx.report,
            lambda segment, size: None if self.closed else ctx.writer.submit_index(segment, size),
            ctx.pager.adopt, lambda: self._cursor_set.advance_all(),
        )
        #: The store's appends waiting for its write and sync threads, every ledger's
        #: (storage/appends_in_flight.py): a busy reader lets them through first.
        self.appends_in_flight = ctx.writer.in_flight
        self._reader = EntryReader(
            ctx.loop, ctx.ops, ctx.cache, ctx.read_pool, ctx.pager, self._ledgers,
            self._ledger_ids, self._drop_corrupt, ctx.read_fds, self.relocated,
            self.sealed_checks,
        )
        #: Scattered positions in one read-thread job (storage/reads.py), counted in
        #: :attr:`entries_read`.
        self.read_positions = positions_reader(self, self._reader)
        self._cursor_set = CursorSet(
            self, CursorFiles(ctx.ops, directory / "cursors", fsync=ctx.config.fsync),
            ctx.loop, ctx.cursor_pool, ctx.ids.ensure_durable, cursors,
            on_dirty=lambda: ctx.on_cursor_dirty(self),
        )

    # -- LedgerView (what cursors may ask) -------------------------------------------------

    @property
    def current_ledger_id(self) -> int:
        return self._appends.current.ledger_id

    @property
    def first_ledger_id(self) -> int:
        return self._list.first_ledger_id

    def ledger_extent(self, ledger_id: int) -> tuple[int, bool, BitMap | None]:
        """(confirmed entry count, complete: no more entries will ever be added, missing ids)."""
        return self._list.extent(ledger_id)

    def ledger_after(self, ledger_id: int) -> int | None:
        return self._list.after(ledger_id)

    # -- appends (storage/ledger_appends.py) -----------------------------------------------

    @property
    def state(self) -> LedgerLifecycle:
        return self._appends.state

    @property
    def accepts_appends(self) -> bool:
        """Open and the store writable: an append now is taken (not refused)."""
        return self._appends.state is LedgerLifecycle.OPEN and not self._ctx.disk.read_only

    @property
    def fenced(self) -> bool:
        """A write failed: fenced (or closed after it)."""
        return self._appends.fence_cause is not None

    @property
    def appends_refused_read_only(self) -> int:
        return self._appends.appends_refused_read_only

    # -- positions -------------------------------------------------------------------------

    @property
    def last_confirmed(self) -> Position | None:
        return self._appends.last_confirmed

    @property
    def first_position(self) -> Position | None:
        return self._list.first_position()

    def next_position(self, pos: Position) -> Position:
        return self._list.next_position(pos, self._appends.current)

    def entries_between(self, start_exclusive: Position, end_inclusive: Position) -> int:
        return self._list.entries_between(start_exclusive, end_inclusive)

    @property
    def number_of_entries(self) -> int:
        return self._list.number_of_entries()

    @property
    def total_size_bytes(self) -> int:
        return self._list.total_size_bytes() + self.relocated.size_bytes

    @property
    def ledger_count(self) -> int:
        """``len(self.ledgers)`` without building the list (the trimmer asks every second)."""
        return len(self._list)

    @property
    def ledgers(self) -> list[LedgerInfo]:
        return self._list.infos()

    # -- reads -----------------------------------------------------------------------------

    async def read_entry(self, pos: Position) -> Entry | None:
        led = self._ledgers.get(pos.ledger_id)
        if led is None or not 0 <= pos.entry_id < led.confirmed:
            return None
        got = await self.read_entries(pos, 1)
        return got[0] if got and got[0].position == pos else None

    def cached_entry(self, pos: Position) -> Entry | None:
        """The entry at ``pos`` when the entry cache holds it (no await, no disk), else None:
        the caller reads it with :meth:`read_entry`. Counted in :attr:`entries_read`."""
        data = self._ctx.cache.get(pos.ledger_id, pos.entry_id)
        if data is None:
            return None
        self.entries_read += 1
        return Entry(pos, data)

    async def read_entries(
        self, start: Position, max_entries: int, max_bytes: int = DEFAULT_MAX_READ_BYTES
    ) -> list[Entry]:
        """Entries from start (inclusive) in order, across ledgers, up to last_confirmed.
        Missing entries (dropped by recovery) are skipped. At least one entry is returned if
        any exists, even if it is larger than max_bytes. Counted in :attr:`entries_read`."""
        entries = await self._reader.read_entries(start, max_entries, max_bytes)
        self.entries_read += len(entries)
        return entries

    def _drop_corrupt(self, led: LedgerState, entry_id: int, offset: int, length: int) -> None:
        if led.missing is None:
            led.missing = BitMap()
        led.missing.add(entry_id)
        self._ctx.report(RecoveryEvent("corrupt_read", self.name, led.ledger_id, offset, length,
                                       (entry_id,)))
        self._cursor_set.advance_all()

    # -- cursors ---------------------------------------------------------------------------

    @property
    def cursors(self) -> Mapping[str, ManagedCursor]:
        return self._cursor_set.cursors

    async def open_cursor(
        self, name: str, *, initial_position: Literal["earliest", "latest"] = "latest"
    ) -> ManagedCursor:
        """The existing cursor, or a new durable one at the latest or earliest position."""
        cursor = self._cursor_set.cursors.get(name)
        if cursor is not None:
            return cursor
        if self.closed:
            raise LedgerClosedError(f"managed ledger {self.name} is closed")
        return await self._cursor_set.open(name, initial_position)

    async def delete_cursor(self, name: str) -> None:
        """Delete a cursor and its files; a flush in flight or later never writes it back."""
        if name not in self._cursor_set.cursors:
            raise CursorNotFoundError(f"no cursor {name!r} on {self.name}")
        await self._cursor_set.delete(name)

    async def flush_cursors(self) -> None:
        await self._cursor_set.flush()

    @property
    def trim_blockers(self) -> dict[str, str]:
        """Cursors whose state could not be trusted after a restart (name -> why): trim()
        deletes nothing while any is listed (a cursor recovered from a fallback is listed
        until it has been saved again)."""
        return dict(self._cursor_set.trim_blockers)

    @property
    def cursor_set(self) -> CursorSet:
        return self._cursor_set

    # -- trimming and closing --------------------------------------------------------------

    async def trim(self, up_to_ledger_id: int | None = None) -> list[int] | None:
        """Delete sealed ledgers every cursor has fully acknowledged (all sealed ledgers when
        there is no cursor, as Pulsar does without retention), none above *up_to_ledger_id*
        when given (what retention keeps). The current ledger is never deleted. Returns the
        deleted ledger ids, or None when refused: a cursor's state cannot be trusted
        (trim_blockers; the caller reports it and retries once it is saved again). Decides
        synchronously, before its first await."""
        if self._cursor_set.trim_blockers:
            return None
        marks = [c.mark_delete_position for c in self._cursor_set.values()]
        slowest = min(marks) if marks else None
        relocated = self.relocated
        forgotten: list[int] = []
        deleted: list[int] = []
        for ledger_id in self._list.trimmable(self._appends.current, slowest, up_to_ledger_id,
                                              relocated.is_relocated):
            led = self._list.by_id[ledger_id]
            was_ghost = ledger_id in relocated.ghosts  # its segment is already gone
            held = slowest is not None and slowest < Position(ledger_id, led.confirmed - 1)
            if held and was_ghost:
                continue
            deleted.append(ledger_id)
            if held:
                # Held only by relocated entries: its bytes go, a ghost stays listed.
                led.size_bytes = 0
                relocated.ghosts.add(ledger_id)
            else:
                self._list.remove(ledger_id)
                if ledger_id in relocated.ledgers:
                    forgotten.append(ledger_id)
            self._ctx.cache.drop_ledger(ledger_id)
            self._ctx.pager.forget(led.segment)
            self._ctx.read_fds.forget(led.segment)
            if not was_ghost:
                self._ctx.writer.delete(led.segment)
        if deleted:
            await self._ctx.writer.barrier()
            for ledger_id in forgotten:
                await relocated.forget_ledger(ledger_id)
            # the deleted segments' records go when they are most of the manifest (I/O thread)
            with contextlib.suppress(RuntimeError):   # the store is closing: its next open
                self._ctx.io_pool.submit(compact_manifest, self._ctx.ops, self.directory,
                                         len(self._list))
            log.info("managed ledger %s: trimmed ledgers %s", self.name, deleted)
        return deleted

    async def close(self) -> None:
        """Wait for queued appends, persist cursors, close the segment. Idempotent: every call
        waits for the one close, and a caller cancelled meanwhile (a shutdown's timeout) leaves
        it running, so a later call (the store's close) still sees every cursor saved, the
        segment sealed and the ledger unregistered only then."""
        closing = self._closing
        if closing is None:
            appends = self._appends
            if appends.state is LedgerLifecycle.CLOSED:
                return
            appends.close()

            async def steps() -> None:
                try:
                    if appends.last_future is not None and not appends.last_future.done():
                        await asyncio.wait([appends.last_future])
                    if appends.runs_appended:
                        await self._ctx.writer.barrier()  # runs in flight are completed first
                    for cursor_name, error in await self._cursor_set.close():
                        log.error("managed ledger %s: persisting cursor %s failed: %s",
                                  self.name, cursor_name, error)
                    appends.current.sealed = True
                    self._ctx.writer.seal(appends.current.segment)
                    await self._ctx.writer.barrier()
                    # The indexes of sealed segments being written (I/O thread): done before
                    # a reopen could scan (and rewrite) the same segment.
                    for led in self._ledgers.values():
                        job = led.segment.index_job
                        if job is not None and not job.done():
                            await asyncio.wrap_future(job)
                finally:
                    for led in self._ledgers.values():
                        self._ctx.pager.forget(led.segment)
                        self._ctx.read_fds.forget(led.segment)
                    self._ctx.on_close(self)

            closing = self._closing = asyncio.ensure_future(steps())
        await asyncio.shield(closing)

    @property
    def closed(self) -> bool:
        return self._appends.state is LedgerLifecycle.CLOSED


ReadPositions = Callable[[Sequence[Position]], Awaitable[tuple[list[Entry], list[Position]]]]


def positions_reader(ledger: ManagedLedger, reader: EntryReader) -> ReadPositions:
    """``ledger.read_positions``: :meth:`EntryReader.read_positions`, counted in the ledger's
    ``entries_read`` as its other reads are."""

    async def read_positions(positions: Sequence[Position]
                             ) -> tuple[list[Entry], list[Position]]:
        entries, missing = await reader.read_positions(positions)
        ledger.entries_read += len(entries)
        return entries, missing

    return read_positions
