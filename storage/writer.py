"""The group-commit writer thread: the only code that writes segment files.

Theory of operation:
1. The event loop never blocks on disk. A managed ledger collects the appends of one loop
   iteration in an AppendBatch (one per ledger and segment, from new_batch(); per entry only
   a payload and a future are added to two lists); at the end of the loop iteration one
   "kick" closes the iteration's batches and hands them (with queued control items, in
   order) to the writer under its lock, and wakes it once.
2. The writer thread drains the whole queue as one batch (after waiting up to
   group_commit_max_delay_ms for about as many appends as the previous batch had, so
   concurrent producers share an fsync), writes each touched segment with writev, then calls
   fdatasync once per touched file. New segment files get their header and a directory fsync
   before anything in them is acknowledged.
3. It then hands the whole batch back to the loop with ONE loop.call_soon_threadsafe; the owner
   (a managed ledger) resolves its futures there, in append order, with per-batch (not
   per-entry) bookkeeping: confirmed count, size, one cache chunk, listeners.
4. A failed write or fsync fences the owner: every append of that owner in the batch and every
   later one fails with PersistenceError. Nothing is acknowledged unless its fdatasync (and
   every fdatasync of its owner in the batch) succeeded; a failed fsync is never retried
   (after fsyncgate, a later "successful" fsync proves nothing). Each segment tracks
   synced_offset, the end of what its last successful fdatasync covered: a segment of a
   fenced owner with writes beyond it is "broken"; sealing cuts it back to synced_offset
   (and syncs that) and writes no index for it, and fenced_ends remembers the offset so a
   reopen in this process cuts it again before recovery reads it (storage/recovery.py).
5. Pre-zeroing (why: storage/README.md "Pre-zeroed segments"): after a batch was handed
   back to the loop, a segment whose zeroed region ahead of its write head is running low
   gets the next chunk of WRITTEN zeros (pwrite) and one fdatasync, so appends overwrite
   allocated, initialised blocks and their fdatasync commits no size/extent change. The
   chunk is about the segment's size (at least 4 batches' bytes), between
   segment_prezero_min_bytes and segment_prezero_bytes; a new segment's header is written
   with the first chunk; sealing truncates back to the logical end. A failed pre-zero write
   or fdatasync fences the owner like any write. A group commit that wrote at least
   prezero_max_batch_bytes to the segment pre-zeroes nothing: at that size writing every byte
   twice costs more than the file-size commit of a growing file (storage/config.py); appends
   past the zeroed region then simply grow the file, as with pre-zeroing disabled.
6. Descriptors: at most max_open_segments current segments keep an fd (storage/segment_fds.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from pathlib import Path

from storage.errors import PersistenceError, TooManyOpenFilesError
from storage.fileops import FileOps
from storage.ids import IdAllocator
from storage.limits import is_fd_exhaustion
from storage.segment_fds import SegmentFds
from storage.segment_file import AppendBatch, SegmentFile, WriteOwner
from storage.segment_io import PAGE, ZEROS, create_segment, cut_back, round_up, write_records
from storage.segments import (
    index_path,
    write_index,
)

log = logging.getLogger("horae.storage")


@dataclass(frozen=True, slots=True)
class SealSegment:
    """Close the segment's fd (cut to its logical end) and index it."""

    segment: SegmentFile


@dataclass(frozen=True, slots=True)
class DeleteSegment:
    """Close the segment's fd and unlink it and its index."""

    segment: SegmentFile


@dataclass(frozen=True, slots=True)
class CallInWriter:
    """Run fn() in the writer thread (a barrier)."""

    fn: Callable[[], None]


Control = SealSegment | DeleteSegment | CallInWriter
"""A control record: handled in queue order after the appends queued before it."""


class GroupCommitWriter:
    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        ops: FileOps,
        ids: IdAllocator,
        *,
        fsync: bool,
        max_delay_ms: float,
        max_batch_entries: int,
        prezero_bytes: int = 0,
        prezero_min_bytes: int = 64 * 1024,
        prezero_max_batch_bytes: int = 256 * 1024,
        index_pool: Executor | None = None,
        max_open_segments: int = 4096,
    ) -> None:
        self._loop = loop
        self._index_pool = index_pool  # where sealed segments' indexes are written
        self._ops = ops
        self._ids = ids
        self.fds = SegmentFds(ops, max_open_segments)  # writer thread only (counts: any)
        self._fsync = fsync
        self._prezero_max = max(0, prezero_bytes)
        self._prezero_min = max(PAGE, min(prezero_min_bytes, self._prezero_max))
        self._prezero_max_batch = prezero_max_batch_bytes
        self._max_delay = max_delay_ms / 1000.0
        self._max_batch = max(1, max_batch_entries)
        self._cond = threading.Condition(threading.Lock())
        self._queue: list[AppendBatch | Control] = []  # handed over; under _cond
        self._queued_entries = 0  # appends in _queue (under _cond)
        self._pending: list[AppendBatch | Control] = []  # loop-only: this iteration's
        self._kick_pending = False  # a _kick is scheduled on the loop (loop-only flag)
        self._last_batch = 1
        self._stopping = False
        # Figures for the benchmark and metrics (plain ints, read at any time).
        self.batches = 0
        self.batched_entries = 0
        self.fsyncs = 0
        self.failed_fsyncs = 0
        self.fsync_seconds = 0.0  # wall time spent inside fdatasync
        self.prezero_writes = 0  # pre-zero steps (each: zeros written + one fdatasync)
        self.prezero_bytes = 0
        self.prezero_seconds = 0.0
        self.batch_sizes: list[int] | None = None  # set to [] to record every batch (benchmarks)
        self.index_hook: Callable[[SegmentFile, Future[bool]], None] | None = None
        """Called (writer thread) with each sealed segment's index job (the store's pager
        watches it: once the index is on disk the arrays may be paged out)."""
        self.on_no_space: Callable[[], None] | None = None
        """Called (in the writer thread) when a write fails with ENOSPC (the store then
        measures disk usage at once)."""
        self.fenced_ends: dict[Path, int] = {}
        """Segments fenced in this process -> their last durably synced offset (the writer
        adds, recovery reads: a reopen cuts the segment back to it)."""
        self._thread = threading.Thread(target=self._run, name="horae-storage-writer", daemon=True)
        self._thread.start()

    # -- loop side -------------------------------------------------------------------------

    def new_batch(self, owner: WriteOwner, segment: SegmentFile, first_entry_id: int) -> AppendBatch:
        """An open batch for owner's appends to segment from first_entry_id on; the caller
        adds (data, future) pairs to it until the loop's kick closes it. Loop only.
        No lock and no wakeup per append: one "kick" per loop iteration hands everything the
        iteration queued to the writer (waking a thread per append costs a context switch
        each on a busy machine)."""
        batch = AppendBatch(owner, segment, first_entry_id)
        self._pending.append(batch)
        if not self._kick_pending:
            self._kick_pending = True
            self._loop.call_soon(self._kick)
        return batch

    def seal(self, segment: SegmentFile) -> None:
        """Seal segment after the appends queued before: close its fd, cut it to its logical
        end and write its index (submit_index). Loop only, like new_batch()."""
        self._control(SealSegment(segment))

    def delete(self, segment: SegmentFile) -> None:
        """Close and unlink segment (and its index) after the appends queued before. Loop
        only."""
        self._control(DeleteSegment(segment))

    def submit_index(self, segment: SegmentFile, size_bytes: int) -> Future[bool]:
        """Write the index of the final (sealed or recovered) segment in the index pool (the
        I/O thread), record the job on the segment and hand it to index_hook. Any thread."""
        assert self._index_pool is not None, "a writer without an index pool writes no index"
        segment.index_job = job = self._index_pool.submit(
            write_index_logged, self._ops, segment, size_bytes, self._fsync,
        )
        if self.index_hook is not None:
            self.index_hook(segment, job)
        return job

    def _control(self, record: Control) -> None:
        self._pending.append(record)
        if not self._kick_pending:
            self._kick_pending = True
            self._loop.call_soon(self._kick)

    def _kick(self) -> None:
        self._kick_pending = False
        pending, self._pending = self._pending, []
        entries = 0
        for item in pending:
            if type(item) is AppendBatch:
                item.open = False  # from now on the writer thread owns it
                entries += len(item.datas)
        with self._cond:
            self._queue.extend(pending)
            self._queued_entries += entries
            self._cond.notify()

    async def barrier(self) -> None:
        """Wait until everything queued before this call has been handled."""
        fut: asyncio.Future[None] = self._loop.create_future()

        def done() -> None:
            self._loop.call_soon_threadsafe(_set_if_pending, fut)

        self._control(CallInWriter(done))
        await fut

    async def stop(self) -> None:
        await self.barrier()
        with self._cond:
            self._stopping = True
            self._cond.notify()
        await asyncio.get_running_loop().run_in_executor(None, self._thread.join)

    # -- writer thread ---------------------------------------------------------------------

    def _take_batch(self) -> list[AppendBatch | Control] | None:
        with self._cond:
            while not self._queue:
                if self._stopping:
                    return None
                self._cond.wait()
            if self._max_delay > 0 and self._last_batch > 1:
                # Concurrency was seen: give the other producers a moment to join this fsync
                # (each later loop iteration that queues something kicks us again).
                target = min(self._last_batch, self._max_batch)
                deadline = time.monotonic() + self._max_delay
                while self._queued_entries < target and not self._stopping:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    self._cond.wait(remaining)
            batch, self._queue = self._queue, []
            self._queued_entries = 0
            return batch

    def _run(self) -> None:
        while True:
            batch = self._take_batch()
            if batch is None:
                return
            try:
                self._process(batch)
            except BaseException:  # a bug must not kill the only writer silently
                log.exception("storage writer: unexpected error")

    def _process(self, batch: list[AppendBatch | Control]) -> None:
        appends: list[AppendBatch] = []
        controls: list[Control] = []
        for item in batch:
            if isinstance(item, AppendBatch):
                appends.append(item)
            else:
                controls.append(item)
        touched: dict[SegmentFile, tuple[WriteOwner, int]] = {}
        if appends:
            touched = self._write_appends(appends)
        for record in controls:
            try:
                self._handle_control(record)
            except Exception:
                log.exception("storage writer: control %s failed", type(record).__name__)
        # After the batch went back to the loop and after the controls (a barrier is not held
        # up; a segment sealed meanwhile has fd -1 and is skipped).
        for segment, (owner, batch_bytes) in touched.items():
            self._maybe_prezero(owner, segment, batch_bytes)
        self.fds.evict(touched)

    def _write_appends(self, appends: list[AppendBatch]) -> dict[SegmentFile, tuple[WriteOwner, int]]:
        """Write, fdatasync and hand back one group commit; returns {segment: (owner, bytes
        written)} for the segments that succeeded, for pre-zeroing."""
        count = sum(len(b.datas) for b in appends)
        self._last_batch = count
        self.batches += 1
        self.batched_entries += count
        if self.batch_sizes is not None:
            self.batch_sizes.append(count)
        # Group by owner, preserving append order (an owner's batches arrive in order).
        by_owner: dict[int, tuple[WriteOwner, list[AppendBatch]]] = {}
        for b in appends:
            slot = by_owner.get(id(b.owner))
            if slot is None:
                by_owner[id(b.owner)] = (b.owner, [b])
            else:
                slot[1].append(b)
        errors: dict[int, BaseException] = {}
        touched: dict[SegmentFile, tuple[WriteOwner, int]] = {}
        for key, (owner, batches) in by_owner.items():
            if owner.writer_fenced:
                errors[key] = PersistenceError("ledger is fenced after an earlier write failure")
                continue
            segment = batches[0].segment
            wrote = False
            try:
                for b in batches:
                    segment = b.segment
                    if segment.abandoned:
                        raise TooManyOpenFilesError(
                            f"segment {segment.path.name} could not be created (out of file "
                            "descriptors)")
                    before = segment.write_offset
                    self._write_segment(segment, b)
                    wrote = True
                    done = touched.get(segment)
                    written = segment.write_offset - before + (done[1] if done else 0)
                    touched[segment] = (owner, written)
            except TooManyOpenFilesError as exc:
                if wrote:  # part of the group commit is on disk, unsynced: fence after all
                    self._mark_broken(segment)
                    errors[key] = self._fence(owner, OSError(errno.EMFILE, str(exc)), "write")
                else:
                    errors[key] = exc
            except OSError as exc:
                if is_fd_exhaustion(exc) and segment.fd < 0 and not wrote:
                    # The segment file could not even be created: nothing of this owner was
                    # written, so nothing is fenced. The segment is abandoned (its ledger
                    # stays empty; the owner rolls over) and its batches fail.
                    segment.abandoned = True
                    log.error("storage writer: cannot create %s: %s", segment.path, exc)
                    failure = TooManyOpenFilesError(f"cannot create {segment.path.name}: {exc}")
                    failure.__cause__ = exc
                    errors[key] = failure
                else:
                    segment.broken = True
                    errors[key] = self._fence(owner, exc, "write")
        if self._fsync:
            for segment, (owner, _) in touched.items():
                if id(owner) in errors:
                    continue
                started = time.perf_counter()
                try:
                    self.fsyncs += 1
                    self._ops.fdatasync(segment.fd)
                except OSError as exc:
                    self.failed_fsyncs += 1
                    segment.broken = True
                    errors[id(owner)] = self._fence(owner, exc, "fdatasync")
                finally:
                    self.fsync_seconds += time.perf_counter() - started
        for key, (_owner, batches) in by_owner.items():
            if key in errors:
                for b in batches:
                    self._mark_broken(b.segment)
            else:
                for b in batches:
                    b.segment.synced_offset = b.segment.write_offset
        results = [(owner, batches, errors.get(key)) for key, (owner, batches) in by_owner.items()]
        # RuntimeError: the loop is closed, nobody is waiting any more.
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(_complete_batch, results)
        return {seg: v for seg, v in touched.items() if id(v[0]) not in errors}

    def _mark_broken(self, segment: SegmentFile) -> None:
        """A segment with writes no successful fdatasync covers (or after a failed one)."""
        if segment.broken or segment.write_offset > segment.synced_offset:
            segment.broken = True
            self.fenced_ends[segment.path] = segment.synced_offset

    def _fence(self, owner: WriteOwner, exc: OSError, what: str) -> PersistenceError:
        owner.writer_fenced = True
        log.error("storage writer: %s failed (%s); fencing the ledger", what, exc)
        if exc.errno == errno.ENOSPC and self.on_no_space is not None:
            self.on_no_space()
        error = PersistenceError(f"{what} failed: {exc}")
        error.__cause__ = exc
        return error

    def _write_segment(self, segment: SegmentFile, batch: AppendBatch) -> None:
        if segment.fd >= 0:
            self.fds.touch(segment)
        elif segment.evicted:
            self.fds.reopen(segment)
        else:
            create_segment(self._ops, self._ids, segment, fsync=self._fsync,
                           prezero_bytes=self._prezero_min if self._prezero_max else 0)
            self.fds.opened(segment)
        write_records(self._ops, segment, batch.datas, batch.first_entry_id)

    def _maybe_prezero(self, owner: WriteOwner, segment: SegmentFile, batch_bytes: int) -> None:
        """Write the next chunk of zeros ahead of the write head if the zeroed region ahead
        is below half a chunk; fdatasync it once. Failure fences the owner."""
        if (not self._prezero_max or segment.fd < 0 or owner.writer_fenced
                or batch_bytes >= self._prezero_max_batch):
            return
        head = segment.write_offset
        chunk = min(self._prezero_max, max(self._prezero_min, head, 4 * batch_bytes))
        if segment.zeroed_end - head >= chunk // 2:
            return
        start = max(segment.zeroed_end, head)
        end = round_up(head + chunk)
        started = time.perf_counter()
        what = "pre-zero write"
        try:
            ops, fd, zeros = self._ops, segment.fd, memoryview(ZEROS)
            at = start
            while at < end:
                piece = min(len(zeros), end - at)
                ops.pwrite_all(fd, zeros[:piece], at)
                at += piece
            if self._fsync:
                what = "pre-zero fdatasync"
                self.fsyncs += 1
                ops.fdatasync(fd)
        except OSError as exc:
            if what == "pre-zero fdatasync":
                self.failed_fsyncs += 1
            # Fenced like a failed append: the segment's state on disk is unknown now, and
            # after fsyncgate a later fdatasync of the same file proves nothing.
            self._fence(owner, exc, what)
            return
        finally:
            self.prezero_seconds += time.perf_counter() - started
        segment.zeroed_end = end
        self.prezero_writes += 1
        self.prezero_bytes += end - start

    def _handle_control(self, record: Control) -> None:
        if isinstance(record, CallInWriter):
            record.fn()
            return
        segment = record.segment
        seal = isinstance(record, SealSegment)
        if seal and segment.evicted:
            try:  # to cut its zero tail off and index it like any sealed segment
                self.fds.reopen(segment)
            except OSError as exc:  # left with its zero tail: scanned at the next open
                log.warning("storage writer: reopening %s to seal it failed: %s",
                            segment.path, exc)
        segment.evicted = False
        if segment.fd >= 0:
            try:
                if seal and segment.broken:
                    cut_back(self._ops, segment, fsync=self._fsync)
                elif seal and segment.zeroed_end > segment.write_offset:
                    # Back to the logical end. Not synced: after a crash recovery cuts the
                    # zero tail itself, so durability of the truncation does not matter.
                    self._ops.ftruncate(segment.fd, segment.write_offset)
                    segment.zeroed_end = segment.write_offset
            finally:
                self.fds.closed(segment)
                self._ops.close(segment.fd)
                segment.fd = -1
            if seal and not segment.broken and self._index_pool is not None:
                # Off this thread: the index's write + fsync must not hold up the next
                # group commit. The arrays are final now (nothing appends to a sealed
                # segment), so the I/O thread may read them.
                self.submit_index(segment, sum(segment.lengths))
        if isinstance(record, DeleteSegment):
            with contextlib.suppress(FileNotFoundError):
                self._ops.unlink(index_path(segment.path))  # first: never an orphan
            with contextlib.suppress(FileNotFoundError):
                self._ops.unlink(segment.path)
            if self._fsync:
                self._ops.fsync_dir(segment.path.parent)


def write_index_logged(ops: FileOps, segment: SegmentFile, size_bytes: int, sync: bool) -> bool:
    """write_index() of a final segment for a background job: a failure only costs a scan on
    the next open. True once the index is on disk."""
    try:
        return write_index(
            ops, segment.path, segment.ledger_id, segment.write_offset, segment.created_ms,
            segment.format, segment.offsets, segment.lengths, size_bytes, sync=sync,
        )
    except OSError as exc:
        log.warning("storage: writing a segment index failed (%s); it will be rebuilt", exc)
        return False


def _set_if_pending(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


def _complete_batch(
    results: list[tuple[WriteOwner, list[AppendBatch], BaseException | None]],
) -> None:
    for owner, batches, error in results:
        try:
            owner.complete_appends(batches, error)
        except Exception:
            log.exception("storage: completing appends failed")
