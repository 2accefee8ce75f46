"""The group-commit writer thread: the only code that writes segment files.

Theory of operation:
1. The event loop calls GroupCommitWriter.submit() for every append (already numbered by its
   managed ledger) and never blocks on disk; at the end of the loop iteration one "kick"
   wakes the writer for everything queued in that iteration.
2. The writer thread drains the whole queue as one batch (after waiting up to
   group_commit_max_delay_ms for about as many appends as the previous batch had, so
   concurrent producers share an fsync), writes each touched segment with writev, then calls
   fdatasync once per touched file. New segment files get their header and a directory fsync
   before anything in them is acknowledged.
3. It then hands the whole batch back to the loop with ONE loop.call_soon_threadsafe; the owner
   (a managed ledger) resolves its futures there, in append order.
4. A failed write or fsync fences the owner: every append of that owner in the batch and every
   later one fails with PersistenceError. Nothing is acknowledged unless its fdatasync (and
   every fdatasync of its owner in the batch) succeeded; a failed fsync is never retried
   (after fsyncgate, a later "successful" fsync proves nothing).
5. Pre-zeroing: an fdatasync after a write that grows the file must also commit the new size
   and block allocation (an ext4 journal commit, several times the cost of the data write
   alone: storage/README.md has the measurements). So the writer keeps the open segment filled with WRITTEN zeros
   ahead of its write head: after a batch has been handed back to the loop (never before an
   acknowledgement, never on the loop), a segment whose zeroed region ahead is running low
   gets the next chunk of zeros written with pwrite and fdatasync'ed once. Appends then
   overwrite allocated, initialised blocks and their fdatasync writes data only.
   fallocate() is no substitute: it creates unwritten extents, and the first write into one
   converts it, which is again a metadata commit (measured slower, see the README).
   The chunk is about the segment's current size (at least 4 batches' bytes), between
   segment_prezero_min_bytes and segment_prezero_bytes, so young ledgers zero little and
   busy ones zero rarely. A new segment's header is written with the first chunk (one
   fdatasync covers both with the first batch). Sealing truncates the file back to its
   logical end. A failed pre-zero write or fdatasync fences the owner like any write.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from array import array
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from crc32c import crc32c

from storage.errors import PersistenceError
from storage.fileops import FileOps
from storage.ids import IdAllocator
from storage.positions import Position
from storage.segments import (
    CRC_PREFIX,
    FORMAT_V2,
    RECORD_HEADER,
    RECORD_HEADER_SIZE,
    encode_file_header,
)

log = logging.getLogger("horae.storage")

_IOV_MAX = 1024
_PAGE = 4096
_ZEROS = bytes(1024 * 1024)  # the pre-zero write buffer (written in pieces of this size)


class SegmentFile:
    """A ledger's segment file. Index arrays are appended by the writer (or recovery) only;
    the loop reads indices <= its ledger's last confirmed entry, which the writer published
    before completing the batch (call_soon_threadsafe is the happens-before edge)."""

    __slots__ = ("created_ms", "fd", "format", "ledger_id", "lengths", "offsets", "path",
                 "write_offset", "zeroed_end")

    def __init__(self, ledger_id: int, path: Path, created_ms: int) -> None:
        self.ledger_id = ledger_id
        self.path = path
        self.created_ms = created_ms
        self.format = FORMAT_V2  # record format (recovered segments may be older)
        self.offsets: array[int] = array("q")
        self.lengths: array[int] = array("i")
        self.fd = -1  # writer thread only
        self.write_offset = 0  # writer thread only: the logical end
        self.zeroed_end = 0  # writer thread only: zeros were written up to here


class WriteOwner(Protocol):
    """What a managed ledger offers the writer. writer_fenced is written by the writer only."""

    writer_fenced: bool

    def _complete_appends(self, items: list[AppendItem], error: BaseException | None) -> None: ...


# (owner, segment, entry_id, data, future, position)
AppendItem = tuple[WriteOwner, SegmentFile, int, bytes, "asyncio.Future[Position]", Position]


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
    ) -> None:
        self._loop = loop
        self._ops = ops
        self._ids = ids
        self._fsync = fsync
        self._prezero_max = max(0, prezero_bytes)
        self._prezero_min = max(_PAGE, min(prezero_min_bytes, self._prezero_max))
        self._max_delay = max_delay_ms / 1000.0
        self._max_batch = max(1, max_batch_entries)
        self._cond = threading.Condition(threading.Lock())
        self._queue: deque[AppendItem | tuple[str, Any]] = deque()
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
        self._thread = threading.Thread(target=self._run, name="horae-storage-writer", daemon=True)
        self._thread.start()

    # -- loop side -------------------------------------------------------------------------

    def submit(self, item: AppendItem) -> None:
        # No lock and no wakeup per append: deque.append is atomic, and one "kick" per loop
        # iteration wakes the writer once the loop has queued everything it had to queue
        # (waking a thread per append costs a context switch each on a busy machine).
        self._queue.append(item)
        if not self._kick_pending:
            self._kick_pending = True
            self._loop.call_soon(self._kick)

    def control(self, kind: str, arg: Any) -> None:
        """Queue a control item handled after the appends queued before it:
        ("seal", SegmentFile) closes its fd; ("delete", SegmentFile) closes and unlinks it;
        ("call", fn) runs fn() in the writer thread. Loop only, like submit()."""
        self._queue.append((kind, arg))
        if not self._kick_pending:
            self._kick_pending = True
            self._loop.call_soon(self._kick)

    def _kick(self) -> None:
        self._kick_pending = False
        with self._cond:
            self._cond.notify()

    async def barrier(self) -> None:
        """Wait until everything queued before this call has been handled."""
        fut: asyncio.Future[None] = self._loop.create_future()

        def done() -> None:
            self._loop.call_soon_threadsafe(_set_if_pending, fut)

        self.control("call", done)
        await fut

    async def stop(self) -> None:
        await self.barrier()
        with self._cond:
            self._stopping = True
            self._cond.notify()
        await asyncio.get_running_loop().run_in_executor(None, self._thread.join)

    # -- writer thread ---------------------------------------------------------------------

    def _take_batch(self) -> list[AppendItem | tuple[str, Any]] | None:
        queue = self._queue
        with self._cond:
            while not queue:
                if self._stopping:
                    return None
                self._cond.wait()
            if self._max_delay > 0 and self._last_batch > 1:
                # Concurrency was seen: give the other producers a moment to join this fsync
                # (each later loop iteration that queues something kicks us again).
                target = min(self._last_batch, self._max_batch)
                deadline = time.monotonic() + self._max_delay
                while len(queue) < target and not self._stopping:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    self._cond.wait(remaining)
        # popleft, not list()+clear(): the loop may append concurrently (without the lock).
        return [queue.popleft() for _ in range(len(queue))]

    def _run(self) -> None:
        while True:
            batch = self._take_batch()
            if batch is None:
                return
            try:
                self._process(batch)
            except BaseException:  # a bug must not kill the only writer silently
                log.exception("storage writer: unexpected error")

    def _process(self, batch: list[AppendItem | tuple[str, Any]]) -> None:
        appends: list[AppendItem] = []
        controls: list[tuple[str, Any]] = []
        for item in batch:
            if len(item) == 2:
                controls.append(item)
            else:
                appends.append(item)
        touched: list[tuple[WriteOwner, SegmentFile, int]] = []
        if appends:
            touched = self._write_appends(appends)
        for kind, arg in controls:
            try:
                self._handle_control(kind, arg)
            except Exception:
                log.exception("storage writer: control %s failed", kind)
        # After the batch went back to the loop and after the controls (a barrier is not held
        # up; a segment sealed meanwhile has fd -1 and is skipped).
        for owner, segment, batch_bytes in touched:
            self._maybe_prezero(owner, segment, batch_bytes)

    def _write_appends(self, appends: list[AppendItem]) -> list[tuple[WriteOwner, SegmentFile, int]]:
        """Write, fdatasync and hand back one batch; returns the (owner, segment, bytes
        written) that succeeded, for pre-zeroing."""
        self._last_batch = len(appends)
        self.batches += 1
        self.batched_entries += len(appends)
        if self.batch_sizes is not None:
            self.batch_sizes.append(len(appends))
        # Group by owner then segment, preserving append order.
        by_owner: dict[int, tuple[WriteOwner, list[AppendItem]]] = {}
        for item in appends:
            slot = by_owner.get(id(item[0]))
            if slot is None:
                by_owner[id(item[0])] = (item[0], [item])
            else:
                slot[1].append(item)
        errors: dict[int, BaseException] = {}
        touched: list[tuple[WriteOwner, SegmentFile, int]] = []
        for key, (owner, items) in by_owner.items():
            if owner.writer_fenced:
                errors[key] = PersistenceError("ledger is fenced after an earlier write failure")
                continue
            try:
                start = 0
                while start < len(items):
                    segment = items[start][1]
                    end = start
                    while end < len(items) and items[end][1] is segment:
                        end += 1
                    before = segment.write_offset
                    self._write_segment(segment, items[start:end])
                    touched.append((owner, segment, segment.write_offset - before))
                    start = end
            except OSError as exc:
                errors[key] = self._fence(owner, exc, "write")
        if self._fsync:
            for owner, segment, _ in touched:
                if id(owner) in errors:
                    continue
                started = time.perf_counter()
                try:
                    self.fsyncs += 1
                    self._ops.fdatasync(segment.fd)
                except OSError as exc:
                    self.failed_fsyncs += 1
                    errors[id(owner)] = self._fence(owner, exc, "fdatasync")
                finally:
                    self.fsync_seconds += time.perf_counter() - started
        results = [(owner, items, errors.get(key)) for key, (owner, items) in by_owner.items()]
        # RuntimeError: the loop is closed, nobody is waiting any more.
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(_complete_batch, results)
        return [t for t in touched if id(t[0]) not in errors]

    def _fence(self, owner: WriteOwner, exc: OSError, what: str) -> PersistenceError:
        owner.writer_fenced = True
        log.error("storage writer: %s failed (%s); fencing the ledger", what, exc)
        error = PersistenceError(f"{what} failed: {exc}")
        error.__cause__ = exc
        return error

    def _open_segment(self, segment: SegmentFile) -> None:
        self._ids.ensure_durable(segment.ledger_id)
        fd = self._ops.open(segment.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        try:
            header = encode_file_header(segment.ledger_id, segment.created_ms)
            self._ops.write_all(fd, header)  # records follow at the fd position (pwrite
            # writes the zeros, so the position stays at the write head)
            segment.zeroed_end = len(header)
            if self._prezero_max:
                # The first chunk: the first batch's fdatasync commits it with the header.
                end = _round_up(len(header) + self._prezero_min)
                self._ops.pwrite_all(fd, memoryview(_ZEROS)[: end - len(header)], len(header))
                segment.zeroed_end = end
            if self._fsync:
                # The new directory entry must be durable before anything in it is acknowledged.
                self._ops.fsync_dir(segment.path.parent)
        except BaseException:
            self._ops.close(fd)
            raise
        segment.fd = fd
        segment.write_offset = len(header)

    def _write_segment(self, segment: SegmentFile, items: list[AppendItem]) -> None:
        if segment.fd < 0:
            self._open_segment(segment)
        # Hot loop (holds the GIL): header packing and CRC inlined, no per-record calls.
        pack_header = RECORD_HEADER.pack
        pack_prefix = CRC_PREFIX.pack
        buffers: list[bytes] = []
        offsets: list[int] = []
        lengths: list[int] = []
        start = offset = segment.write_offset
        for item in items:
            data = item[3]
            entry_id = item[2]
            length = len(data)
            stored = length + RECORD_HEADER_SIZE  # format 2: the length field counts the header
            buffers.append(
                pack_header(stored, crc32c(data, crc32c(pack_prefix(stored, entry_id))), entry_id)
            )
            buffers.append(data)
            offsets.append(offset)
            lengths.append(length)
            offset += RECORD_HEADER_SIZE + length
        total = offset - start
        if len(buffers) <= _IOV_MAX:
            written = self._ops.writev(segment.fd, buffers)
            if written < total:  # a short write: finish it with plain writes
                self._ops.write_all(segment.fd, memoryview(b"".join(buffers))[written:])
        else:
            self._ops.write_all(segment.fd, b"".join(buffers))
        segment.write_offset = offset
        segment.offsets.extend(offsets)
        segment.lengths.extend(lengths)

    def _maybe_prezero(self, owner: WriteOwner, segment: SegmentFile, batch_bytes: int) -> None:
        """Write the next chunk of zeros ahead of the write head if the zeroed region ahead
        is below half a chunk; fdatasync it once. Failure fences the owner."""
        if not self._prezero_max or segment.fd < 0 or owner.writer_fenced:
            return
        head = segment.write_offset
        chunk = min(self._prezero_max, max(self._prezero_min, head, 4 * batch_bytes))
        if segment.zeroed_end - head >= chunk // 2:
            return
        start = max(segment.zeroed_end, head)
        end = _round_up(head + chunk)
        started = time.perf_counter()
        what = "pre-zero write"
        try:
            ops, fd, zeros = self._ops, segment.fd, memoryview(_ZEROS)
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

    def _handle_control(self, kind: str, arg: Any) -> None:
        if kind == "call":
            fn: Callable[[], None] = arg
            fn()
        elif kind in ("seal", "delete"):
            segment: SegmentFile = arg
            if segment.fd >= 0:
                try:
                    if kind == "seal" and segment.zeroed_end > segment.write_offset:
                        # Back to the logical end. Not synced: after a crash recovery cuts the
                        # zero tail itself, so durability of the truncation does not matter.
                        self._ops.ftruncate(segment.fd, segment.write_offset)
                        segment.zeroed_end = segment.write_offset
                finally:
                    self._ops.close(segment.fd)
                    segment.fd = -1
            if kind == "delete":
                with contextlib.suppress(FileNotFoundError):
                    self._ops.unlink(segment.path)
                if self._fsync:
                    self._ops.fsync_dir(segment.path.parent)


def _round_up(offset: int) -> int:
    return -(-offset // _PAGE) * _PAGE


def _set_if_pending(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


def _complete_batch(results: list[tuple[WriteOwner, list[AppendItem], BaseException | None]]) -> None:
    for owner, items, error in results:
        try:
            owner._complete_appends(items, error)
        except Exception:
            log.exception("storage: completing appends failed")
