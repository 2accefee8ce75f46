"""The group-commit writer: the only code that writes segment files. Two threads, a write
stage and a sync stage (storage/sync_stage.py), so that writing group commit N+1 overlaps the
fdatasync of group commit N (double buffering).

Theory of operation:
1. The event loop never blocks on disk. A managed ledger collects the appends of one loop
   iteration in an AppendBatch (one per ledger and segment, from new_batch(); per entry only
   a payload and a future are added to two lists); at the end of the loop iteration one
   "kick" closes the iteration's batches and hands them (with queued control items, in
   order) to the writer under its lock, and wakes it once.
2. The write thread drains the whole queue as one group (when the sync stage is idle, after
   waiting up to group_commit_max_delay_ms for about as many appends as its last round
   completed, so concurrent producers share an fsync; when it is busy, at once: what is
   written now joins its next fdatasync), writes each touched segment with writev and hands
   the group to the sync stage as one SyncJob (results in append order, and each file's
   written end). With nothing more queued and the sync stage idle it runs that round itself
   (lockstep appenders: nothing to overlap; saves a thread hand-off) and hands its outcome
   to the loop after its own bookkeeping for the group, just before it waits again, or
   before a control or a pre-zero write: the loop, woken by it, then finds the GIL free
   (sync_stage.run_if_idle). A batch over
   early_sync_bytes is written in slices, each but the last handed over at once as a
   files-only job, so its fdatasync runs while the next slice is written (the batch
   completes with its group). New segment files get their header and a directory fsync
   before the hand-off, so before anything in them can be acknowledged.
3. The sync thread takes every job waiting as one round, fdatasyncs each file of the round
   once (jobs written during the previous fdatasync share one), sets synced_offset, and
   hands the round back to the loop with ONE loop.call_soon_threadsafe; the owner (a managed
   ledger) resolves its futures there, in append order, with per-batch (not per-entry)
   bookkeeping: confirmed count, size, one cache chunk, listeners. Nothing is acknowledged
   before an fdatasync that started after its write returned.
4. A failed write (write stage) or fdatasync (sync stage) fences the owner: every append of
   that owner not yet acknowledged fails with PersistenceError, also one written before the
   failure was known whose own fdatasync succeeded: the sync stage judges each owner once per
   round, after its fdatasyncs, and fails every batch of a fenced owner. A failed fsync is
   never retried (after fsyncgate, a later "successful" fsync proves nothing). Each segment
   tracks synced_offset, the end of what its last successful fdatasync covered (moved only
   by the sync stage, never for a fenced owner): a segment of a fenced owner with writes
   beyond it is "broken"; sealing cuts it back to synced_offset (and syncs that) and writes
   no index for it, and fenced_ends remembers the offset so a reopen in this process cuts it
   again before recovery reads it (storage/recovery.py).
5. Controls (seal, delete, barrier) are handled in queue order after the appends queued
   before them: the write thread first drains the sync stage (everything written before is
   synced and handed back), so a barrier also waits for both stages, and a seal or delete
   never closes an fd a fdatasync is about to use.
6. Pre-zeroing (why: storage/README.md "Pre-zeroed segments"): after a group was handed to
   the sync stage (and after the controls), the write thread, which alone moves the write
   head, gives a segment whose zeroed region ahead of its write head is running low the next
   chunk of WRITTEN zeros (pwrite), and hands the sync stage a job naming the file: its next
   round's fdatasync of that file makes the zeros durable (shared with any group written
   meanwhile), so appends overwrite allocated, initialised blocks and their fdatasync
   commits no size/extent change. The chunk is about the segment's size (at least 4 batches'
   bytes), between segment_prezero_min_bytes and segment_prezero_bytes; a new segment's
   header is written with the first chunk; sealing truncates back to the logical end. A
   failed pre-zero write or fdatasync fences the owner like any write. A group commit that
   wrote at least prezero_max_batch_bytes to the segment pre-zeroes nothing: at that size
   writing every byte twice costs more than the file-size commit of a growing file
   (storage/config.py); appends past the zeroed region then simply grow the file.
7. Descriptors: at most max_open_segments current segments keep an fd (storage/segment_fds.py),
   evicted by the write thread after a group, never one a sync job still names (busy()).
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

from storage.appends_in_flight import AppendsInFlight
from storage.errors import PersistenceError, TooManyOpenFilesError
from storage.fileops import FileOps
from storage.ids import IdAllocator
from storage.limits import is_fd_exhaustion
from storage.segment_fds import SegmentFds
from storage.segment_file import AppendBatch, SegmentFile, WriteOwner, WriteState
from storage.segment_io import (
    PAGE,
    create_segment,
    cut_back,
    round_up,
    write_index_logged,
    write_records,
    write_zeros,
)
from storage.segments import index_path
from storage.sync_stage import CompletionScope, SyncJob, SyncStage, fence
from storage.wakeup import Wakeup

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
        early_sync_bytes: int = 0,
        completion_scope: CompletionScope | None = None,
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
        self._early_sync_bytes = max(0, early_sync_bytes)
        self._max_batch = max(1, max_batch_entries)
        self._lock = threading.Lock()
        # The write thread waits for work here (storage/wakeup.py: a condition variable for
        # its one waiter, in C calls: a lone append's kick and wake-up cost no Python).
        self._wakeup = Wakeup(self._lock)
        self._queue: list[AppendBatch | Control] = []  # handed over; under _lock
        self._queued_entries = 0  # appends in _queue (under _lock)
        self._wake_at = 1  # queued appends worth waking the waiting writer for (under _lock)
        self._pending: list[AppendBatch | Control] = []  # loop-only: this iteration's
        self._kick_pending = False  # a _kick is scheduled on the loop (loop-only flag)
        self._stopping = False
        self.fenced_ends: dict[Path, int] = {}
        """Segments fenced in this process -> their last durably synced offset (the sync
        stage adds, recovery reads: a reopen cuts the segment back to it)."""
        self._on_no_space: Callable[[], None] | None = None
        self.in_flight = AppendsInFlight()
        """Batches opened on the loop and not yet handed back (storage/appends_in_flight.py)."""
        self._sync = SyncStage(loop, ops, fsync=fsync, fenced_ends=self.fenced_ends,
                               in_flight=self.in_flight, completion_scope=completion_scope)
        # Figures for the benchmark and metrics (plain numbers, read at any time); the
        # group-commit and fdatasync ones are the sync stage's (properties below).
        self.prezero_writes = 0  # pre-zero steps (each: zeros written, synced by the sync stage)
        self.prezero_bytes = 0
        self.prezero_seconds = 0.0  # write-thread time spent writing zeros
        self.index_hook: Callable[[SegmentFile, Future[bool]], None] | None = None
        """Called (writer thread) with each sealed segment's index job (the store's pager
        watches it: once the index is on disk the arrays may be paged out)."""
        self._thread = threading.Thread(target=self._run, name="horae-storage-writer", daemon=True)
        self._thread.start()

    # -- figures ---------------------------------------------------------------------------

    @property
    def batches(self) -> int:
        """Group commits: sync rounds that completed appends."""
        return self._sync.batches

    @property
    def batched_entries(self) -> int:
        return self._sync.batched_entries

    @property
    def fsyncs(self) -> int:
        """fdatasync calls on segments (a pre-zero step's included when it had its own)."""
        return self._sync.fsyncs

    @property
    def failed_fsyncs(self) -> int:
        return self._sync.failed_fsyncs

    @property
    def fsync_seconds(self) -> float:
        """Wall time spent inside fdatasync."""
        return self._sync.fsync_seconds

    @property
    def batch_sizes(self) -> list[int] | None:
        """Entries per group commit (one fdatasync round), recorded once set to [] (benchmarks)."""
        return self._sync.batch_sizes

    @batch_sizes.setter
    def batch_sizes(self, value: list[int] | None) -> None:
        self._sync.batch_sizes = value

    @property
    def on_no_space(self) -> Callable[[], None] | None:
        """Called (in a writer thread) when a write fails with ENOSPC (the store then
        measures disk usage at once)."""
        return self._on_no_space

    @on_no_space.setter
    def on_no_space(self, callback: Callable[[], None] | None) -> None:
        self._on_no_space = callback
        self._sync.on_no_space = callback

    # -- loop side -------------------------------------------------------------------------

    def new_batch(self, owner: WriteOwner, segment: SegmentFile, first_entry_id: int) -> AppendBatch:
        """An open batch for owner's appends to segment from first_entry_id on; the caller
        adds (data, future) pairs to it until the loop's kick closes it. Loop only.
        No lock and no wakeup per append: one "kick" per loop iteration hands everything the
        iteration queued to the writer (waking a thread per append costs a context switch
        each on a busy machine)."""
        batch = AppendBatch(owner, segment, first_entry_id)
        self._pending.append(batch)
        self.in_flight.opened()
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
        control = False
        for item in pending:
            if type(item) is AppendBatch:
                item.open = False  # from now on the writer thread owns it
                entries += len(item.datas)
            else:
                control = True
        with self._lock:
            self._queue.extend(pending)
            self._queued_entries += entries
            # A writer gathering a group commit wakes when its target is queued (or at its
            # deadline), not once per loop iteration that adds to it.
            if control or self._queued_entries >= self._wake_at:
                self._wakeup.notify()

    async def barrier(self) -> None:
        """Wait until everything queued before this call has been handled."""
        fut: asyncio.Future[None] = self._loop.create_future()

        def done() -> None:
            self._loop.call_soon_threadsafe(_set_if_pending, fut)

        self._control(CallInWriter(done))
        await fut

    async def stop(self) -> None:
        await self.barrier()
        with self._lock:
            self._stopping = True
            self._wakeup.notify()
        await asyncio.get_running_loop().run_in_executor(None, self._thread.join)

    # -- write thread ----------------------------------------------------------------------

    def _take_batch(self) -> list[AppendBatch | Control] | None:
        with self._lock:
            while not self._queue:
                if self._stopping:
                    return None
                self._wakeup.wait()
            target = min(self._sync.last_round_entries, self._max_batch)
            if self._max_delay > 0 and target > 1 and self._sync.idle():
                # Concurrency was seen and no fdatasync is running that the next writes
                # would wait for anyway: give the other producers a moment to join this
                # fsync (each later loop iteration that queues something kicks us again).
                deadline = time.monotonic() + self._max_delay
                self._wake_at = target
                while self._queued_entries < target and not self._stopping:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    self._wakeup.wait(remaining)
                self._wake_at = 1
            batch, self._queue = self._queue, []
            self._queued_entries = 0
            return batch

    def _run(self) -> None:
        try:
            while True:
                batch = self._take_batch()
                if batch is None:
                    return
                try:
                    self._process(batch)
                except BaseException:  # a bug must not kill the only writer silently
                    log.exception("storage writer: unexpected error")
        finally:
            self._sync.stop()  # after everything handed to it was synced

    def _process(self, batch: list[AppendBatch | Control]) -> None:
        appends: list[AppendBatch] = []
        controls: list[Control] = []
        for item in batch:
            if isinstance(item, AppendBatch):
                appends.append(item)
            else:
                controls.append(item)
        touched: dict[SegmentFile, tuple[WriteOwner, int]] = {}
        try:
            if appends:
                touched = self._write_appends(appends)
            if controls:
                self._sync.post_inline()  # the appends' outcome reaches the loop first
                self._sync.drain()  # everything written before them is synced and handed back
                for record in controls:
                    try:
                        self._handle_control(record)
                    except Exception:
                        log.exception("storage writer: control %s failed",
                                      type(record).__name__)
            # After the group went to the sync stage and after the controls (a barrier is
            # not held up; a segment sealed meanwhile has fd -1 and is skipped).
            zeroed: SyncJob | None = None
            for segment, (owner, batch_bytes) in touched.items():
                if self._maybe_prezero(owner, segment, batch_bytes):
                    if zeroed is None:
                        zeroed = SyncJob()
                    zeroed.files[segment] = (owner, segment.write_offset)
            if zeroed is not None and self._fsync:
                self._submit(zeroed)
            if self.fds.over_limit:  # else nothing to evict: the busy set is not needed
                self.fds.evict(touched.keys() | self._sync.busy())
        finally:
            # A round this thread synced itself is handed back here, after the bookkeeping
            # above and just before the thread waits for more (sync_stage.run_if_idle).
            self._sync.post_inline()

    def _write_appends(self, appends: list[AppendBatch]) -> dict[SegmentFile, tuple[WriteOwner, int]]:
        """Write one group and hand it to the sync stage; returns {segment: (owner, bytes
        written)} for the segments whose owner's writes succeeded, for pre-zeroing."""
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
                    if segment.write_state is WriteState.ABANDONED:
                        raise TooManyOpenFilesError(
                            f"segment {segment.path.name} could not be created (out of file "
                            "descriptors)")
                    before = segment.write_offset
                    self._write_segment(owner, segment, b)
                    wrote = True
                    done = touched.get(segment)
                    written = segment.write_offset - before + (done[1] if done else 0)
                    touched[segment] = (owner, written)
            except TooManyOpenFilesError as exc:
                if wrote:  # part of the group is on disk, unsynced: fence after all (the
                    # sync stage marks its segments broken)
                    errors[key] = self._fence(owner, OSError(errno.EMFILE, str(exc)), "write")
                else:
                    errors[key] = exc
            except OSError as exc:
                if is_fd_exhaustion(exc) and segment.fd < 0 and not wrote:
                    # The segment file could not even be created: nothing of this owner was
                    # written, so nothing is fenced. The segment is abandoned (its ledger
                    # stays empty; the owner rolls over) and its batches fail.
                    segment.write_state = WriteState.ABANDONED
                    log.error("storage writer: cannot create %s: %s", segment.path, exc)
                    failure = TooManyOpenFilesError(f"cannot create {segment.path.name}: {exc}")
                    failure.__cause__ = exc
                    errors[key] = failure
                else:
                    segment.write_state = WriteState.BROKEN
                    errors[key] = self._fence(owner, exc, "write")
        job = SyncJob()
        job.results = [(owner, batches, errors.get(key))
                       for key, (owner, batches) in by_owner.items()]
        if errors:
            touched = {seg: v for seg, v in touched.items() if id(v[0]) not in errors}
        job.files = {seg: (owner, seg.write_offset) for seg, (owner, _) in touched.items()}
        self._submit(job)
        return touched

    def _submit(self, job: SyncJob) -> None:
        """Hand job to the sync stage, or, with nothing more to write and that stage idle,
        sync it here (no overlap to gain, one thread hand-off saved)."""
        with self._lock:
            more = bool(self._queue)
        if more or not self._sync.run_if_idle(job):
            self._sync.hand(job)

    def _fence(self, owner: WriteOwner, exc: OSError, what: str) -> PersistenceError:
        return fence(owner, exc, what, self._on_no_space)

    def _write_segment(self, owner: WriteOwner, segment: SegmentFile, batch: AppendBatch) -> None:
        if segment.fd >= 0:
            self.fds.touch(segment)
        elif segment.evicted:
            self.fds.reopen(segment)
        else:
            create_segment(self._ops, self._ids, segment, fsync=self._fsync,
                           prezero_bytes=self._prezero_min if self._prezero_max else 0)
            self.fds.opened(segment)
        datas, early = batch.datas, self._early_sync_bytes
        if not early or not self._fsync or len(datas) < 2:
            write_records(self._ops, segment, datas, batch.first_entry_id)
            return
        # A big batch is written in slices of about early_sync_bytes; each slice but the
        # last is handed to the sync stage at once (a files-only job), so its fdatasync runs
        # while the next slice is written. The batch still completes with its group.
        start = 0
        while start < len(datas):
            size, end = 0, start
            while end < len(datas) and size < early:
                size += len(datas[end])
                end += 1
            write_records(self._ops, segment, datas[start:end], batch.first_entry_id + start)
            if end < len(datas):
                self._sync.hand(SyncJob(files={segment: (owner, segment.write_offset)}))
            start = end

    def _maybe_prezero(self, owner: WriteOwner, segment: SegmentFile, batch_bytes: int) -> bool:
        """Write the next chunk of zeros ahead of the write head if the zeroed region ahead
        is below half a chunk (the sync stage's next fdatasync of the file makes them
        durable). True if zeros were written; a failure fences the owner."""
        if (not self._prezero_max or segment.fd < 0 or owner.writer_fenced
                or batch_bytes >= self._prezero_max_batch):
            return False
        head = segment.write_offset
        chunk = min(self._prezero_max, max(self._prezero_min, head, 4 * batch_bytes))
        if segment.zeroed_end - head >= chunk // 2:
            return False
        start = max(segment.zeroed_end, head)
        end = round_up(head + chunk)
        self._sync.post_inline()  # a group synced here is not held up by writing zeros
        started = time.perf_counter()
        try:
            write_zeros(self._ops, segment.fd, start, end)
        except OSError as exc:
            # Fenced like a failed append: the segment's state on disk is unknown now (the
            # sync stage fails whatever of this owner it has not acknowledged yet).
            self._fence(owner, exc, "pre-zero write")
            return False
        finally:
            self.prezero_seconds += time.perf_counter() - started
        segment.zeroed_end = end
        self.prezero_writes += 1
        self.prezero_bytes += end - start
        return True

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
                if seal and segment.write_state is WriteState.BROKEN:
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
            if seal and segment.write_state is not WriteState.BROKEN and self._index_pool is not None:
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


def _set_if_pending(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
