"""ManagedLedger: one topic's sequence of ledgers, its appends, reads and cursors.

Theory of operation:
- A managed ledger is a directory (see storage/store.py) holding one segment file per ledger
  (the directory listing IS the ledger list; no separate manifest to keep consistent) and a
  cursors/ directory. Every open starts a new ledger (Pulsar semantics); the ledgers found
  on disk are recovered (storage/segments.py) and sealed.
- append() runs on the loop: it numbers the entry (ledger_id, next entry id), rolls over to a
  new ledger by entry count, size or age, and queues it for the group-commit writer. The
  future resolves on the loop once the entry is fsynced; futures of one ledger resolve in
  append order. last_confirmed only moves then, so readers never see unsynced entries.
  append_run() does the same for a run of entries (one socket read's SENDs of a producer)
  with one DurableSink instead of a future per entry (storage/segment_file.py): the sink is
  told once per run and group commit, in append order with the futures.
- A write or fsync failure fences the managed ledger: pending and later appends fail with
  PersistenceError until it is closed and opened again (which starts a fresh ledger).
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
import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Literal, Protocol

from pyroaring import BitMap

from storage.cache import EntryCache
from storage.completions import fail_batch, fenced_error, resolve_batch
from storage.config import StorageConfig
from storage.cursor import ManagedCursor
from storage.cursor_files import CursorFiles, LoadedCursor
from storage.cursors import CursorSet
from storage.errors import (
    CursorNotFoundError,
    EntryTooLargeError,
    LedgerClosedError,
    LedgerFencedError,
    PersistenceError,
    StorageError,
    StorageReadOnlyError,
    TooManyOpenFilesError,
)
from storage.fileops import FileOps
from storage.ids import ID_BLOCK, IdAllocator
from storage.index_pages import IndexPager
from storage.ledger_list import LedgerList
from storage.ledger_state import LedgerInfo, LedgerState
from storage.positions import Entry, Position
from storage.reads import DEFAULT_MAX_READ_BYTES, EntryReader
from storage.segment_file import AppendBatch, DurableSink, RunCompletion, SegmentFile
from storage.segments import (
    MAX_RECORD_BYTES,
    RecoveryEvent,
    now_ms,
    segment_name,
)
from storage.writer import GroupCommitWriter

log = logging.getLogger("horae.storage")


class ReadOnlyFlag(Protocol):
    """The store's disk monitor as a ledger sees it (storage/diskusage.py)."""

    read_only: bool


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
    report: Callable[[RecoveryEvent], None]
    on_close: Callable[[ManagedLedger], None]
    #: A cursor of this ledger now holds unsaved changes (the store's flush visits those).
    on_cursor_dirty: Callable[[ManagedLedger], None]


class ManagedLedger:
    def __init__(
        self, ctx: LedgerContext, name: str, directory: Path, recovered: list[LedgerState],
        cursors: list[LoadedCursor],
    ) -> None:
        self._ctx = ctx
        self._roll_entries = ctx.config.max_entries_per_ledger
        self._roll_bytes = ctx.config.max_size_per_ledger_bytes
        self.name = name
        self.directory = directory
        self.writer_fenced = False  # set by the writer thread
        self._fenced: PersistenceError | None = None
        self._closed = False
        self._list = LedgerList()
        self._ledgers = self._list.by_id  # the same objects: the reader shares them
        self._ledger_ids = self._list.ids
        for led in recovered:
            self._list.add(led)
        self._current = self._new_ledger()
        self._last_confirmed: Position | None = None
        for led in reversed(recovered):
            if led.confirmed > 0:
                self._last_confirmed = Position(led.ledger_id, led.confirmed - 1)
                break
        self._listeners: list[Callable[[Position], None]] = []
        self._last_future: asyncio.Future[Position] | None = None
        self._runs_appended = False  # append_run was used: close() waits on a writer barrier
        self._batch: AppendBatch | None = None  # this loop iteration's appends (if any)
        self._create_future = ctx.loop.create_future
        self._writer = ctx.writer
        self._disk = ctx.disk
        self.appends_refused_read_only = 0
        self.appends_failed = 0
        self._reader = EntryReader(
            ctx.loop, ctx.ops, ctx.cache, ctx.read_pool, ctx.pager, self._ledgers,
            self._ledger_ids, self._drop_corrupt,
        )
        self._cursor_set = CursorSet(
            self, CursorFiles(ctx.ops, directory / "cursors", fsync=ctx.config.fsync),
            ctx.loop, ctx.cursor_pool, ctx.ids.ensure_durable, cursors,
            on_dirty=lambda: ctx.on_cursor_dirty(self),
        )

    # -- ledger list -----------------------------------------------------------------------

    def _new_ledger(self) -> LedgerState:
        ctx = self._ctx
        ledger_id = ctx.ids.allocate()
        if ledger_id + ID_BLOCK // 2 >= ctx.ids.high_water_hint:
            ctx.io_pool.submit(ctx.ids.ensure_durable, ledger_id + ID_BLOCK // 2)
        segment = SegmentFile(ledger_id, self.directory / segment_name(ledger_id), now_ms())
        led = LedgerState(segment, sealed=False)
        led.roll_deadline = time.monotonic() + ctx.config.max_ledger_rollover_minutes * 60
        self._list.add(led)
        return led

    def _rollover(self) -> None:
        old = self._current
        old.sealed = True
        self._ctx.writer.seal(old.segment)
        self._current = self._new_ledger()

    # -- LedgerView (what cursors may ask) -------------------------------------------------

    @property
    def current_ledger_id(self) -> int:
        return self._current.ledger_id

    @property
    def first_ledger_id(self) -> int:
        return self._list.first_ledger_id

    def ledger_extent(self, ledger_id: int) -> tuple[int, bool, BitMap | None]:
        """(confirmed entry count, complete: no more entries will ever be added, missing ids)."""
        return self._list.extent(ledger_id)

    def ledger_after(self, ledger_id: int) -> int | None:
        return self._list.after(ledger_id)

    # -- appends ---------------------------------------------------------------------------

    def append(self, data: bytes) -> asyncio.Future[Position]:
        """Queue an entry; the future resolves on the loop once it is durable.

        Hot path: per entry it numbers the entry and adds (data, future) to this loop
        iteration's batch (storage/writer.py AppendBatch); everything else is per batch."""
        fut: asyncio.Future[Position] = self._create_future()
        if self._fenced is not None or self._closed or self._disk.read_only:
            self._fail_append(fut)
            return fut
        if type(data) is not bytes:
            data = bytes(data)
        size = len(data)
        if size > MAX_RECORD_BYTES:
            fut.set_exception(EntryTooLargeError(f"entry of {size} bytes > {MAX_RECORD_BYTES}"))
            return fut
        led, batch, entry_id = self._writable_batch()
        led.next_entry_id = entry_id + 1
        led.assigned_bytes += size
        datas = batch.datas
        datas.append(data)
        batch.completions.append(fut)
        self._last_future = fut
        return fut

    def _writable_batch(self) -> tuple[LedgerState, AppendBatch, int]:
        """Where the next entry goes: the current ledger (rolled over first when it is full by
        entries or bytes, or, at the first append of a batch, too old), the open batch of its
        segment, and the entry id. The age rule is checked once per batch, not per entry."""
        led = self._current
        entry_id = led.next_entry_id
        if entry_id and (entry_id >= self._roll_entries or led.assigned_bytes >= self._roll_bytes):
            self._rollover()
            led = self._current
            entry_id = 0
        batch = self._batch
        if batch is None or not batch.open or batch.segment is not led.segment:
            if entry_id and time.monotonic() >= led.roll_deadline:
                self._rollover()
                led = self._current
                entry_id = 0
            batch = self._batch = self._writer.new_batch(self, led.segment, entry_id)
        return led, batch, entry_id

    def append_run(self, datas: list[bytes], sink: DurableSink) -> None:
        """Queue consecutive entries (``bytes``, each at most MAX_RECORD_BYTES, which the caller
        checks) with one completion: *sink* is told on the loop once they are durable, per
        ledger they landed in (a rollover may split the run), or that they failed.

        Hot path of publishing: per entry one list append and the numbering; the rollover
        rules are those of :meth:`append`, applied before every entry."""
        count = len(datas)
        if not count:
            return
        if self._fenced is not None or self._closed or self._disk.read_only:
            # Reported like a refused append() future: on a later loop callback, never from
            # inside the caller.
            self.appends_failed += count
            self._ctx.loop.call_soon(sink.entries_failed, count, self._refusal())
            return
        self._runs_appended = True
        roll_entries = self._roll_entries
        roll_bytes = self._roll_bytes
        i = 0
        while i < count:
            led, batch, entry_id = self._writable_batch()
            out = batch.datas
            assigned = led.assigned_bytes
            start = i
            while i < count:
                if entry_id > led.next_entry_id and (
                        entry_id >= roll_entries or assigned >= roll_bytes):
                    break  # this ledger is full: the rest goes to the next one
                data = datas[i]
                out.append(data)
                assigned += len(data)
                entry_id += 1
                i += 1
            led.next_entry_id = entry_id
            led.assigned_bytes = assigned
            batch.completions.append(RunCompletion(sink, i - start))

    def _fail_append(self, fut: asyncio.Future[Position]) -> None:
        self.appends_failed += 1
        fut.set_exception(self._refusal())

    def _refusal(self) -> StorageError:
        """Why an append is refused now (fenced, closed, or read-only storage)."""
        failure: StorageError
        if self._fenced is None and not self._closed:  # refused: the disk is nearly full
            self.appends_refused_read_only += 1
            return StorageReadOnlyError(
                f"storage is read-only (disk usage above diskUsageThreshold): {self.name} "
                "accepts no appends until usage falls below diskUsageLwmThreshold")
        if self._fenced is not None:
            failure = LedgerFencedError(f"managed ledger {self.name} is fenced: {self._fenced}")
            failure.__cause__ = self._fenced
        else:
            failure = LedgerClosedError(f"managed ledger {self.name} is closed")
        return failure

    def complete_appends(self, batches: list[AppendBatch], error: BaseException | None) -> None:
        """Called on the loop, once per group commit, with this ledger's batches in order."""
        if isinstance(error, TooManyOpenFilesError):
            self._abandon(batches, error)
            return
        if error is not None:
            self._fence(error)
            for batch in batches:
                self.appends_failed += len(batch.datas)
                # A fresh exception per future: a shared one would pile up tracebacks.
                fail_batch(batch, lambda: fenced_error(error))
            return
        cache = self._ctx.cache
        last: Position | None = None
        for batch in batches:
            ledger_id = batch.segment.ledger_id
            first = batch.first_entry_id
            end = first + len(batch.datas)
            led = self._ledgers.get(ledger_id)
            if led is None:  # trimmed or deleted meanwhile; cannot happen via the API
                fail_batch(batch, partial(StorageError, f"ledger {ledger_id} is gone"))
                continue
            led.confirmed = end
            led.size_bytes += cache.put_many(ledger_id, first, batch.datas)
            resolve_batch(batch, ledger_id)
            last = Position(ledger_id, end - 1)
        if last is None:
            return
        self._last_confirmed = last
        for callback in self._listeners:
            try:
                callback(last)
            except Exception:
                log.exception("storage: ledger listener failed")

    def _abandon(self, batches: list[AppendBatch], error: TooManyOpenFilesError) -> None:
        """The writer could not create a segment (out of file descriptors): nothing was
        written and the ledger is not fenced. The abandoned ledger stays empty (no entry will
        ever be added: cursors move past it) and appends go on in a new ledger."""
        def too_many() -> StorageError:
            failure = TooManyOpenFilesError(str(error))
            failure.__cause__ = error.__cause__
            return failure

        for batch in batches:
            self.appends_failed += len(batch.datas)
            fail_batch(batch, too_many)
            led = self._ledgers.get(batch.segment.ledger_id)
            if led is None or not batch.segment.abandoned:
                continue
            led.next_entry_id = led.confirmed
            led.assigned_bytes = led.size_bytes
            if led is self._current and not self._closed:
                self._rollover()

    def _fence(self, error: BaseException) -> None:
        if self._fenced is None:
            log.error("managed ledger %s fenced: %s", self.name, error)
            self._fenced = (
                error if isinstance(error, PersistenceError) else PersistenceError(str(error))
            )

    @property
    def fenced(self) -> bool:
        return self._fenced is not None

    def add_listener(self, callback: Callable[[Position], None]) -> None:
        """callback(last_confirmed) runs on the loop after each group commit that made entries
        of this ledger durable (once per commit, not once per entry)."""
        self._listeners.append(callback)

    # -- positions -------------------------------------------------------------------------

    @property
    def last_confirmed(self) -> Position | None:
        return self._last_confirmed

    @property
    def first_position(self) -> Position | None:
        return self._list.first_position()

    def next_position(self, pos: Position) -> Position:
        return self._list.next_position(pos, self._current)

    def entries_between(self, start_exclusive: Position, end_inclusive: Position) -> int:
        return self._list.entries_between(start_exclusive, end_inclusive)

    @property
    def number_of_entries(self) -> int:
        return self._list.number_of_entries()

    @property
    def total_size_bytes(self) -> int:
        return self._list.total_size_bytes()

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

    async def read_entries(
        self, start: Position, max_entries: int, max_bytes: int = DEFAULT_MAX_READ_BYTES
    ) -> list[Entry]:
        """Entries from start (inclusive) in order, across ledgers, up to last_confirmed.
        Missing entries (dropped by recovery) are skipped. At least one entry is returned if
        any exists, even if it is larger than max_bytes."""
        return await self._reader.read_entries(start, max_entries, max_bytes)

    def _drop_corrupt(self, led: LedgerState, entry_id: int, offset: int, length: int) -> None:
        if led.missing is None:
            led.missing = BitMap()
        led.missing.add(entry_id)
        self._ctx.report(RecoveryEvent("corrupt_read", self.name, led.ledger_id, offset, length,
                                       (entry_id,)))
        for cursor in self._cursor_set.values():
            cursor.advance()  # a lost entry must not hold mark-delete (and the backlog) back

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
        self._check_open()
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
    def trim_safe(self) -> bool:
        return not self._cursor_set.trim_blockers

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
        deleted = self._list.trimmable(self._current, slowest, up_to_ledger_id)
        for ledger_id in deleted:
            led = self._list.remove(ledger_id)
            self._ctx.cache.drop_ledger(ledger_id)
            self._ctx.pager.forget(led.segment)
            self._ctx.writer.delete(led.segment)
        if deleted:
            await self._ctx.writer.barrier()
            log.info("managed ledger %s: trimmed ledgers %s", self.name, deleted)
        return deleted

    async def close(self) -> None:
        """Wait for queued appends, persist cursors, close the segment. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._last_future is not None and not self._last_future.done():
                await asyncio.wait([self._last_future])
            if self._runs_appended:
                await self._ctx.writer.barrier()  # runs in flight are completed before it
            for cursor_name, error in await self._cursor_set.close():
                log.error("managed ledger %s: persisting cursor %s failed: %s", self.name,
                          cursor_name, error)
            self._current.sealed = True
            self._ctx.writer.seal(self._current.segment)
            await self._ctx.writer.barrier()
            # The indexes of sealed segments being written (I/O thread): done before a
            # reopen could scan (and rewrite) the same segment.
            for led in self._ledgers.values():
                job = led.segment.index_job
                if job is not None and not job.done():
                    await asyncio.wrap_future(job)
        finally:
            for led in self._ledgers.values():
                self._ctx.pager.forget(led.segment)
            self._ctx.on_close(self)

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise LedgerClosedError(f"managed ledger {self.name} is closed")
