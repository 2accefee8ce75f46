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
from storage.segments import CRC_PREFIX, RECORD_HEADER, RECORD_HEADER_SIZE, encode_file_header

log = logging.getLogger("horae.storage")

_IOV_MAX = 1024


class SegmentFile:
    """A ledger's segment file. Index arrays are appended by the writer (or recovery) only;
    the loop reads indices <= its ledger's last confirmed entry, which the writer published
    before completing the batch (call_soon_threadsafe is the happens-before edge)."""

    __slots__ = ("created_ms", "fd", "ledger_id", "lengths", "offsets", "path", "write_offset")

    def __init__(self, ledger_id: int, path: Path, created_ms: int) -> None:
        self.ledger_id = ledger_id
        self.path = path
        self.created_ms = created_ms
        self.offsets: array[int] = array("q")
        self.lengths: array[int] = array("i")
        self.fd = -1  # writer thread only
        self.write_offset = 0  # writer thread only


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
    ) -> None:
        self._loop = loop
        self._ops = ops
        self._ids = ids
        self._fsync = fsync
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
        if appends:
            self._write_appends(appends)
        for kind, arg in controls:
            try:
                self._handle_control(kind, arg)
            except Exception:
                log.exception("storage writer: control %s failed", kind)

    def _write_appends(self, appends: list[AppendItem]) -> None:
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
        touched: list[tuple[WriteOwner, SegmentFile]] = []
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
                    self._write_segment(segment, items[start:end])
                    touched.append((owner, segment))
                    start = end
            except OSError as exc:
                errors[key] = self._fence(owner, exc, "write")
        if self._fsync:
            for owner, segment in touched:
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
            self._ops.write_all(fd, header)
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
            buffers.append(
                pack_header(length, crc32c(data, crc32c(pack_prefix(length, entry_id))), entry_id)
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

    def _handle_control(self, kind: str, arg: Any) -> None:
        if kind == "call":
            fn: Callable[[], None] = arg
            fn()
        elif kind in ("seal", "delete"):
            segment: SegmentFile = arg
            if segment.fd >= 0:
                self._ops.close(segment.fd)
                segment.fd = -1
            if kind == "delete":
                with contextlib.suppress(FileNotFoundError):
                    self._ops.unlink(segment.path)
                if self._fsync:
                    self._ops.fsync_dir(segment.path.parent)


def _set_if_pending(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


def _complete_batch(results: list[tuple[WriteOwner, list[AppendItem], BaseException | None]]) -> None:
    for owner, items, error in results:
        try:
            owner._complete_appends(items, error)
        except Exception:
            log.exception("storage: completing appends failed")
