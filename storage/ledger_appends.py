"""The write side of one managed ledger: numbering, rollover, group-commit batches, completions
and the ledger's lifecycle.

Theory of operation
-------------------
:class:`LedgerAppends` belongs to one :class:`storage.ledger.ManagedLedger` (which hands out
its ``append``, ``append_run`` and ``add_listener``) and is the writer's
:class:`~storage.segment_file.WriteOwner`: ``append()`` / ``append_run()`` run on the loop,
number the entries (ledger id, next entry id), roll over to a new ledger by entry count,
size or age, and queue them in this loop iteration's batch for the group-commit writer
(storage/writer.py). Once per group commit the writer calls :meth:`complete_appends` on the
loop: futures and run sinks learn their positions in append order (storage/completions.py),
then the entries go to the entry cache (after the receipts, before any listener can read
them), ``last_confirmed`` moves, and the listeners are told once. A write or fdatasync failure
fences it (:class:`LedgerLifecycle`): pending and later appends fail until the managed ledger
is closed and opened again. Appends are taken in OPEN alone; refused ones are reported like a
failed future, never from inside the caller.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Callable
from concurrent.futures import Executor
from functools import partial
from pathlib import Path
from typing import Protocol

from storage.cache import AppendCaching, EntryCache
from storage.completions import fail_batch, fenced_error, resolve_batch
from storage.config import StorageConfig
from storage.errors import (
    EntryTooLargeError,
    LedgerClosedError,
    LedgerFencedError,
    PersistenceError,
    StorageError,
    StorageReadOnlyError,
    TooManyOpenFilesError,
)
from storage.ids import ID_BLOCK, IdAllocator
from storage.ledger_list import LedgerList
from storage.ledger_state import LedgerState
from storage.positions import Position
from storage.segment_file import AppendBatch, DurableSink, RunCompletion, SegmentFile, WriteState
from storage.segments import MAX_RECORD_BYTES, now_ms, segment_name
from storage.writer import GroupCommitWriter

__all__ = ["LedgerAppends", "LedgerLifecycle"]

log = logging.getLogger("horae.storage")


class ReadOnlyFlag(Protocol):
    """The store's disk monitor as a ledger sees it (storage/diskusage.py)."""

    read_only: bool


class AppendContext(Protocol):
    """What the write side needs of its store (storage/ledger.py's LedgerContext)."""

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    @property
    def config(self) -> StorageConfig: ...

    @property
    def ids(self) -> IdAllocator: ...

    @property
    def writer(self) -> GroupCommitWriter: ...

    @property
    def cache(self) -> EntryCache: ...

    @property
    def io_pool(self) -> Executor: ...

    @property
    def disk(self) -> ReadOnlyFlag: ...


class LedgerLifecycle(enum.Enum):
    """A managed ledger's lifecycle, on the loop: OPEN -> FENCED (a write or fdatasync failed;
    the cause is kept) -> CLOSED; OPEN -> CLOSED. Appends are taken in OPEN alone.
    (``writer_fenced`` is the writer threads' own mark of the same failure, set before the
    loop hears of it, so that no later batch of the ledger is written.)"""

    OPEN = "open"
    FENCED = "fenced"
    CLOSED = "closed"


_OPEN = LedgerLifecycle.OPEN


class LedgerAppends:
    """The write side of one managed ledger (module docstring)."""

    def __init__(self, ctx: AppendContext, name: str, directory: Path, ledgers: LedgerList,
                 last_confirmed: Position | None) -> None:
        self._ctx = ctx
        self.name = name
        self.directory = directory
        self._roll_entries = ctx.config.max_entries_per_ledger
        self._roll_bytes = ctx.config.max_size_per_ledger_bytes
        self.writer_fenced = False  # set by the writer threads (see LedgerLifecycle)
        self.state = LedgerLifecycle.OPEN
        self.fence_cause: PersistenceError | None = None  # why it was fenced (kept once closed)
        self._list = ledgers
        self._ledgers = ledgers.by_id
        self.current = self._new_ledger()
        self.last_confirmed = last_confirmed
        self._listeners: list[Callable[[Position], None]] = []
        self.last_future: asyncio.Future[Position] | None = None
        self.runs_appended = False  # append_run was used: close() waits on a writer barrier
        self._batch: AppendBatch | None = None  # this loop iteration's appends (if any)
        self._create_future = ctx.loop.create_future
        self._writer = ctx.writer
        self._disk = ctx.disk
        self.appends_refused_read_only = 0
        self.appends_failed = 0
        #: Whether a group commit's entries enter the entry cache (storage/cache.py).
        self.caching = AppendCaching(
            for_inactive_cursors=ctx.config.entry_cache_for_inactive_cursors)

    def close(self) -> None:
        """No more appends (the managed ledger is closing)."""
        self.state = LedgerLifecycle.CLOSED

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
        old = self.current
        old.sealed = True
        self._ctx.writer.seal(old.segment)
        self.current = self._new_ledger()

    def append(self, data: bytes) -> asyncio.Future[Position]:
        """Queue an entry; the future resolves on the loop once it is durable.

        Hot path: per entry it numbers the entry and adds (data, future) to this loop
        iteration's batch (storage/writer.py AppendBatch); everything else is per batch."""
        fut: asyncio.Future[Position] = self._create_future()
        if self.state is not _OPEN or self._disk.read_only:
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
        self.last_future = fut
        return fut

    def _writable_batch(self) -> tuple[LedgerState, AppendBatch, int]:
        """Where the next entry goes: the current ledger (rolled over first when it is full by
        entries or bytes, or, at the first append of a batch, too old), the open batch of its
        segment, and the entry id. The age rule is checked once per batch, not per entry."""
        led = self.current
        entry_id = led.next_entry_id
        if entry_id and (entry_id >= self._roll_entries or led.assigned_bytes >= self._roll_bytes):
            self._rollover()
            led = self.current
            entry_id = 0
        batch = self._batch
        if batch is None or not batch.open or batch.segment is not led.segment:
            if entry_id and time.monotonic() >= led.roll_deadline:
                self._rollover()
                led = self.current
                entry_id = 0
            batch = self._batch = self._writer.new_batch(self, led.segment, entry_id)
        return led, batch, entry_id

    def append_run(self, datas: list[bytes], sink: DurableSink) -> None:
        """Queue consecutive entries (``bytes``, each at most MAX_RECORD_BYTES, which the caller
        checks) with one completion: *sink* is told on the loop once they are durable, per
        ledger they landed in (a rollover may split the run), or that they failed.

        Hot path of publishing: a run that fits in the current ledger whole goes into its batch
        with one list extend; otherwise per entry one list append and the numbering. The
        rollover rules are those of :meth:`append`, applied before every entry."""
        count = len(datas)
        if not count:
            return
        if self.state is not _OPEN or self._disk.read_only:
            # Reported like a refused append() future: on a later loop callback, never from
            # inside the caller.
            self.appends_failed += count
            self._ctx.loop.call_soon(sink.entries_failed, count, self._refusal())
            return
        self.runs_appended = True
        if count == 1:  # a lone send: the batch the next entry goes to takes it whole
            led, batch, entry_id = self._writable_batch()
            data = datas[0]
            batch.datas.append(data)
            led.next_entry_id = entry_id + 1
            led.assigned_bytes += len(data)
            batch.completions.append(RunCompletion(sink, 1))
            return
        roll_entries = self._roll_entries
        roll_bytes = self._roll_bytes
        i = 0
        while i < count:
            led, batch, entry_id = self._writable_batch()
            out = batch.datas
            assigned = led.assigned_bytes
            start = i
            if not i and entry_id + count - 1 < roll_entries:
                # The whole run fits when the last entry's check passes (entry ids and bytes
                # only grow): every entry goes into this batch at once, no per-entry test.
                total = sum(map(len, datas))
                if assigned + total - len(datas[-1]) < roll_bytes:
                    out.extend(datas)
                    assigned += total
                    entry_id += count
                    i = count
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
        if self.state is _OPEN:  # refused: the disk is nearly full
            self.appends_refused_read_only += 1
            return StorageReadOnlyError(
                f"storage is read-only (disk usage above diskUsageThreshold): {self.name} "
                "accepts no appends until usage falls below diskUsageLwmThreshold")
        cause = self.fence_cause
        if cause is not None:
            failure = LedgerFencedError(f"managed ledger {self.name} is fenced: {cause}")
            failure.__cause__ = cause
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
        cache = self._ctx.cache if self.caching.on else None
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
            resolve_batch(batch, ledger_id)  # the receipts first: they wait for nothing below
            led.size_bytes += (sum(map(len, batch.datas)) if cache is None  # before listeners
                               else cache.put_many(ledger_id, first, batch.datas))
            last = Position(ledger_id, end - 1)
        if last is None:
            return
        self.last_confirmed = last
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
            if led is None or batch.segment.write_state is not WriteState.ABANDONED:
                continue
            led.next_entry_id = led.confirmed
            led.assigned_bytes = led.size_bytes
            if led is self.current and self.state is not LedgerLifecycle.CLOSED:
                self._rollover()

    def _fence(self, error: BaseException) -> None:
        if self.fence_cause is None:
            log.error("managed ledger %s fenced: %s", self.name, error)
            self.fence_cause = (
                error if isinstance(error, PersistenceError) else PersistenceError(str(error))
            )
        if self.state is _OPEN:
            self.state = LedgerLifecycle.FENCED

    def add_listener(self, callback: Callable[[Position], None]) -> None:
        """callback(last_confirmed) runs on the loop after each group commit that made entries
        of this ledger durable (once per commit, not once per entry)."""
        self._listeners.append(callback)

    def remove_listener(self, callback: Callable[[Position], None]) -> None:
        """Stop telling *callback* (added by :meth:`add_listener`); no-op when unknown."""
        if callback in self._listeners:
            self._listeners.remove(callback)

