"""ReadFds: reads the page cache holds, done on the loop without waiting for the disk.

Theory of operation
-------------------
A read from disk (storage/reads.py) runs in a read thread: the loop hands the job over, the
thread takes the interpreter, opens the segment, preads and checks the records, and the loop
is woken with the result. For entries written moments ago (a herd of delayed messages
falling due, a backlog drained right after its publish) the bytes are in the kernel's page
cache and the pread itself takes microseconds; the hand-over and the wake-up cost more than
the read, and the loop waits for them. With ``RWF_NOWAIT`` (Linux ``preadv2``) a read never
waits for the disk: it returns the bytes when the page cache holds all of them and fails with
``EAGAIN`` otherwise. So the loop may read in place without ever blocking on the disk, and
only what the page cache lacks goes to a read thread. Measured on a herd of 300,000 delayed
messages read back from disk: a third less broker CPU per message, delivered a third sooner;
on 20,000 due messages a second with random delays (scattered reads, one record each): a fifth
less broker CPU per due message.

Scattered records (a delayed index's due positions: one record each, far apart) are read one
system call each by :meth:`ReadFds.read_records`, in C where the extension is built
(storage/_scan_accel.c): the header onto the stack and the data straight into the bytes object
served, so neither the kept buffer nor a copy; :meth:`ReadFds.read_records_py` is its
reference, and what a FileOps that reads otherwise (a test's) gets.

The loop reads runs into one buffer it keeps (grown to the largest read, at most
:data:`NOWAIT_MAX_BYTES`) and the records are checked and copied out of it at once: memory
the process just mapped costs a page fault per 4 KiB on first touch, which made a fresh 1 MiB
buffer per read ~7x slower than the read itself. With the buffer kept, a read of up to 2 MiB
takes a few tenths of a ms of the loop, so a consumer draining a backlog just written (a
FLOW of 1,000 permits over entries of 100 messages of 1 KiB: ~1 MiB) is answered in place,
without the hand-over to a read thread and back that each FLOW otherwise waits for.

That needs a descriptor per segment the loop reads: an ``open`` may block (a directory lookup
on disk), so the loop never opens one. The first read of a segment without a descriptor goes
to a read thread as before and also asks the pool to open one (:meth:`ReadFds.want`); the
descriptor is kept once it comes back, for the next read. Descriptors are store-wide, at most
:data:`MAX_READ_FDS`, least recently read closed first. A descriptor of a deleted (trimmed)
segment keeps its blocks allocated until closed, and the close that frees them may wait for
the disk: every close runs in the pool (:meth:`ReadFds.forget` when a segment is trimmed or
its managed ledger closes, an LRU eviction, :meth:`ReadFds.close` with the store).

A segment's bytes never change once confirmed (appends go past them; sealing cuts only the
zero tail past the last record), so a descriptor opened any time before a read sees what a
fresh one would. ``RWF_NOWAIT`` missing (another OS, an old kernel, a file system that does
not take it) turns the in-place read off for good; a short read (part of the range cached)
falls back to the thread, and so does any other failure (its descriptor dropped: the thread
reads again and reports what it finds). Loop-only, except the pool's jobs.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Executor, Future
from functools import partial

from crc32c import crc32c

from storage.fileops import FileOps
from storage.segment_file import SegmentFile
from storage.segments import RECORD_HEADER_SIZE, check_record, crc_identity, length_bias

try:
    import storage._scan_accel as _scan_accel
except ImportError:   # built without a compiler: the reference
    _read_records = None
else:   # absent where the OS has no RWF_NOWAIT
    _read_records = getattr(_scan_accel, "read_records", None)

__all__ = ["MAX_READ_FDS", "NOWAIT_MAX_BYTES", "ReadFds"]

log = logging.getLogger("horae.storage")

#: Descriptors kept open for in-place reads, store-wide (the segments read most recently).
MAX_READ_FDS = 64

#: Largest read done in place: more is copied in a read thread (a loop turn stays short:
#: ~0.1 ms a MiB from the page cache into the kept buffer, then ~0.1 ms a MiB to check and copy
#: the records out).
NOWAIT_MAX_BYTES = 2 * 1024 * 1024

#: The kept buffer's smallest size (it grows by doubling to the largest read asked for).
_BUFFER_MIN_BYTES = 64 * 1024

_RWF_NOWAIT: int | None = getattr(os, "RWF_NOWAIT", None)


class ReadFds:
    """Store-wide read-only descriptors of the segments the loop reads (module docstring)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, ops: FileOps, pool: Executor,
                 limit: int = MAX_READ_FDS) -> None:
        self._loop = loop
        self._ops = ops
        self._pool = pool
        self._limit = max(0, limit)
        self._fds: OrderedDict[SegmentFile, int] = OrderedDict()
        self._opening: set[SegmentFile] = set()
        self._closed = False
        #: In-place reads are possible here (cleared for good when the kernel refuses them).
        self.enabled = _RWF_NOWAIT is not None and self._limit > 0
        #: Reads answered in place.
        self.hits = 0
        self._buf = bytearray(0)   # what in-place reads fill (grown on demand, then kept)
        # scattered records: the C twin where the reads are os's own (a test's FileOps
        # that reads otherwise sees each of them through the reference)
        self._read_run: Callable[..., tuple[list[bytes | None], int]] = self.read_records_py
        if _read_records is not None and type(ops).pread_nowait is FileOps.pread_nowait:
            self._read_run = partial(_read_records, self.read_records_py, crc32c)

    @property
    def open_count(self) -> int:
        return len(self._fds)

    def read(self, segment: SegmentFile, size: int, offset: int) -> memoryview | None:
        """``size`` bytes at ``offset`` of the segment if the page cache holds them all and a
        descriptor is at hand, read in place; else None (the caller reads in a thread, and
        a descriptor is asked for when the segment has none).

        The bytes are a view of a buffer this object keeps and fills again at the next read:
        parse them before anything else can read (:func:`storage.segments.parse_records`
        copies each record out). A fresh buffer per read cost a page fault per 4 KiB: a
        1 MiB read took ~0.7 ms that way against ~0.1 ms into a buffer already mapped."""
        if size > NOWAIT_MAX_BYTES:
            return None
        fd = self._descriptor(segment)
        if fd is None:
            return None
        view = self._kept_view(size)
        try:
            whole = self._ops.pread_nowait(fd, view, offset)
        except OSError as exc:
            self._failed(segment, exc)
            return None
        if not whole:
            return None
        self.hits += 1
        return view

    def read_records(self, segment: SegmentFile, records: list[tuple[int, int, int]],
                     budget: int, found_any: bool) -> tuple[list[bytes | None], int] | None:
        """The segment's scattered ``records`` (entry_id, offset, length), in order, each read
        on its own in place and checked: each one's data, None for one that fails its checks,
        up to the first the page cache lacks, the first past :data:`NOWAIT_MAX_BYTES`, or the
        first once ``budget`` bytes are spent and something is found (``found_any``: by the
        caller already). Returns those answers, in order, and the budget left; None when
        nothing can be read in place (no descriptor yet: one is asked for; in-place reads
        off). The data are bytes of their own.

        One system call a record, from C (storage/_scan_accel.c) when the extension is built
        and the FileOps reads as os does; else :meth:`read_records_py`, the reference, through
        ``FileOps.pread_nowait`` (a test's FileOps sees every read)."""
        fd = self._descriptor(segment)
        if fd is None:
            return None
        fmt = segment.format
        try:
            datas, budget = self._read_run(fd, records, length_bias(fmt),
                                           crc_identity(fmt, segment.ledger_id), budget,
                                           found_any, NOWAIT_MAX_BYTES)
        except OSError as exc:
            self._failed(segment, exc)
            return None
        self.hits += len(datas)
        return datas, budget

    def read_records_py(self, fd: int, records: list[tuple[int, int, int]], bias: int,
                        ident: int | None, budget: int, found_any: bool,
                        max_read_bytes: int) -> tuple[list[bytes | None], int]:
        """:meth:`read_records` on a descriptor, through ``FileOps.pread_nowait`` into the
        kept buffer (the reference of storage/_scan_accel.c's ``read_records``). An OSError
        is raised for the first record and ends the run for a later one."""
        datas: list[bytes | None] = []
        found = found_any
        for entry_id, offset, length in records:
            if budget <= 0 and found:
                break
            size = RECORD_HEADER_SIZE + length
            if size > max_read_bytes:
                break
            view = self._kept_view(size)
            try:
                whole = self._ops.pread_nowait(fd, view, offset)
            except OSError:
                if not datas:
                    raise
                break
            if not whole:
                break
            data = check_record(view, entry_id, length, bias, ident)
            datas.append(data)
            if data is not None:
                budget -= length
                found = True
        return datas, budget

    def _kept_view(self, size: int) -> memoryview:
        """The first ``size`` bytes of the kept buffer, grown (by doubling, at least
        :data:`_BUFFER_MIN_BYTES`, at most :data:`NOWAIT_MAX_BYTES` beyond a larger read) when
        it is smaller: a new buffer, not a resize, so a view handed out before stays valid."""
        if size > len(self._buf):
            self._buf = bytearray(max(size, min(NOWAIT_MAX_BYTES, max(
                _BUFFER_MIN_BYTES, 1 << (size - 1).bit_length()))))
        return memoryview(self._buf)[:size]

    def _failed(self, segment: SegmentFile, exc: OSError) -> None:
        """An in-place read of the segment raised: in-place reads go off for good where the
        kernel does not take them, else its descriptor goes."""
        if exc.errno in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            log.info("storage: reads without waiting for the disk are not available "
                     "here (%s); every read from disk goes to a read thread", exc)
            self.enabled = False
            return
        # anything else (EIO, ...): the read thread reads it again and reports what it
        # finds; the descriptor is not trusted again
        log.warning("storage: an in-place read of %s failed (%s); read in a thread",
                    segment.path, exc)
        self.forget(segment)

    def _descriptor(self, segment: SegmentFile) -> int | None:
        """The segment's descriptor for a read in place, the most recently read now; None when
        in-place reads are off or it has none yet (one is asked for)."""
        if not self.enabled:
            return None
        fd = self._fds.get(segment)
        if fd is None:
            self.want(segment)
            return None
        self._fds.move_to_end(segment)
        return fd

    def want(self, segment: SegmentFile) -> None:
        """Open a descriptor of the segment in the pool (once), kept when it comes back."""
        if not self.enabled or self._closed or segment in self._opening or segment in self._fds:
            return
        self._opening.add(segment)
        try:
            job = self._pool.submit(self._ops.open, segment.path, os.O_RDONLY)
        except RuntimeError:   # the pool is shutting down with the store
            self._opening.discard(segment)
            return

        def done(fut: Future[int]) -> None:   # in the pool's thread
            fd = -1 if fut.cancelled() or fut.exception() is not None else fut.result()
            try:
                self._loop.call_soon_threadsafe(self._opened, segment, fd)
            except RuntimeError:   # the loop is closed: nobody will read with it
                if fd >= 0:
                    self._ops.close(fd)

        job.add_done_callback(done)

    def _opened(self, segment: SegmentFile, fd: int) -> None:
        """The pool opened the segment (``fd`` -1: the open failed; the next read asks
        again)."""
        wanted = segment in self._opening and not self._closed   # not forgotten meanwhile
        self._opening.discard(segment)
        if fd < 0:
            return
        if not wanted:
            self._close_later(fd)
            return
        self._fds[segment] = fd
        while len(self._fds) > self._limit:
            _, old = self._fds.popitem(last=False)
            self._close_later(old)

    def forget(self, segment: SegmentFile) -> None:
        """The segment is trimmed, deleted or its managed ledger closed: its descriptor goes
        (closed in the pool), and one being opened is closed when it comes."""
        self._opening.discard(segment)
        fd = self._fds.pop(segment, None)
        if fd is not None:
            self._close_later(fd)

    def _close_later(self, fd: int) -> None:
        try:
            self._pool.submit(self._ops.close, fd)
        except RuntimeError:   # the pool is shut down: nothing else will read with it
            self._ops.close(fd)

    def close(self) -> list[int]:
        """The store closes: no more descriptors are kept. Returns those held, for the
        caller to close off the loop (before the pool shuts down)."""
        self._closed = True
        self._opening.clear()
        fds = list(self._fds.values())
        self._fds.clear()
        return fds
