"""SegmentFile and AppendBatch: the objects the loop and the writer thread hand each other.

A SegmentFile is one ledger's segment: its path, record format, index arrays (entry id ->
offset, data length) and the writer thread's state (fd, write/synced/zeroed offsets, its
:class:`WriteState`). An AppendBatch is one owner's appends to one segment in one loop iteration.
WriteOwner is what the writer may call on the owner (a managed ledger) when a group commit
completes. Ownership rules are in storage/writer.py (the only code that writes segments).

A batch's entries are completed in order by its ``completions``: a Future per entry appended
with ``ManagedLedger.append``, or one :class:`RunCompletion` for a run of consecutive entries
appended with ``ManagedLedger.append_run``, whose :class:`DurableSink` is told once per run
(no per-entry future, task or Position on the publish hot path).
"""

from __future__ import annotations

import asyncio
import enum
from array import array
from concurrent.futures import Future
from pathlib import Path
from typing import Protocol

from storage.positions import Position
from storage.segments import FORMAT_V3


class WriteState(enum.Enum):
    """What the writer may still do with a segment (writer threads only): WRITABLE ->
    BROKEN (a write or fdatasync failed, or a fenced owner's writes no fdatasync covers:
    never indexed, cut back when sealed) or WRITABLE -> ABANDONED (the file could not be
    created, out of file descriptors: nothing was written, no more writes)."""

    WRITABLE = "writable"
    BROKEN = "broken"
    ABANDONED = "abandoned"


class IndexResidency(enum.Enum):
    """Where a segment's index arrays are (loop only): RESIDENT (in memory, not pageable:
    the segment is open or its index not durable yet) -> PAGEABLE (in memory, sealed with a
    durable index: the store's IndexPager may page it out) <-> PAGED_OUT (read back from the
    index file on demand); a recovered segment may start UNCHECKED."""

    RESIDENT = "resident"
    PAGEABLE = "pageable"
    PAGED_OUT = "paged-out"
    #: paged out, and known only from the ledger's sealed-segment manifest: its first read
    #: checks the segment and its index file (storage/sealed_checks.py), then PAGEABLE (or
    #: RESIDENT, scanned, until its rewritten index is durable).
    UNCHECKED = "unchecked"


class SegmentFile:
    """A ledger's segment file. Index arrays are appended by the writer (or recovery) only;
    the loop reads indices <= its ledger's last confirmed entry, which the writer published
    before completing the batch (call_soon_threadsafe is the happens-before edge). A sealed
    segment with a durable index may have its arrays paged out (resident False): readers
    get them through the store's IndexPager. Its two lifecycles are :class:`WriteState`
    (``write_state``) and :class:`IndexResidency` (``index``); ``evicted`` and ``positioned``
    are the writer's fd cache marks, not lifecycle."""

    __slots__ = ("_path", "_where", "created_ms", "evicted", "fd", "format", "index",
                 "index_job", "ledger_id", "lengths", "offsets", "positioned", "synced_offset",
                 "write_offset", "write_state", "zeroed_end")

    def __init__(self, ledger_id: int, path: Path | str, created_ms: int) -> None:
        self.ledger_id = ledger_id
        # A str becomes a Path when first asked for (recovery builds tens of thousands of
        # segments whose path may never be used).
        self._path: Path | None = path if isinstance(path, Path) else None
        self._where = "" if isinstance(path, Path) else path
        self.created_ms = created_ms
        self.format = FORMAT_V3  # record format (recovered segments may be older)
        self.offsets: array[int] = array("q")
        self.lengths: array[int] = array("i")
        self.fd = -1  # writer thread only
        self.write_offset = 0  # writer thread only: the logical end
        self.synced_offset = 0  # writer thread only: end of what fdatasync made durable
        self.zeroed_end = 0  # writer thread only: zeros were written up to here
        self.write_state = WriteState.WRITABLE  # writer threads only
        self.evicted = False  # writer: its fd was closed by the LRU (storage/segment_fds.py)
        self.positioned = True  # writer: the fd's position is the write head (else pwrite)
        self.index_job: Future[bool] | None = None  # the persisted index being written
        self.index = IndexResidency.RESIDENT  # loop only (storage/index_pages)

    @property
    def path(self) -> Path:
        path = self._path
        if path is None:
            path = self._path = Path(self._where)
        return path

    def page_out(self) -> None:
        """Drop the index arrays (sealed segments with a durable index only; loop)."""
        self.offsets = array("q")
        self.lengths = array("i")
        self.index = IndexResidency.PAGED_OUT


class WriteOwner(Protocol):
    """What a managed ledger offers the writer. writer_fenced is written by the writer only."""

    writer_fenced: bool

    def complete_appends(self, batches: list[AppendBatch], error: BaseException | None) -> None:
        ...


class DurableSink(Protocol):
    """Told, on the loop, what became of a run of entries appended together
    (``ManagedLedger.append_run``). A run split by a ledger rollover is reported piece by
    piece, in order; every entry is reported exactly once."""

    def entries_durable(self, ledger_id: int, first_entry_id: int, count: int) -> None:
        """``count`` entries of the run, in order, are durable at ledger_id:first_entry_id..."""

    def entries_failed(self, count: int, error: BaseException) -> None:
        """The next ``count`` entries of the run were not stored (the ledger is fenced, closed,
        read-only, or the write failed); ``error`` is a StorageError."""


class RunCompletion:
    """``count`` consecutive entries of a batch whose outcome goes to one sink."""

    __slots__ = ("count", "sink")

    def __init__(self, sink: DurableSink, count: int) -> None:
        self.sink = sink
        self.count = count


class AppendBatch:
    """The appends one owner made to one segment during one loop iteration (entry ids
    first_entry_id, first_entry_id + 1, ...). Filled on the loop while open; the loop's kick
    closes it and hands it to the writer thread, which then owns it until it comes back to
    the loop with the group commit's result. Per-batch, not per-entry, objects and
    bookkeeping: per entry the loop appends a payload to ``datas``; ``completions`` covers
    the entries in order (a Future each, or a RunCompletion per run)."""

    __slots__ = ("completions", "datas", "first_entry_id", "open", "owner", "segment")

    def __init__(self, owner: WriteOwner, segment: SegmentFile, first_entry_id: int) -> None:
        self.owner = owner
        self.segment = segment
        self.first_entry_id = first_entry_id
        self.datas: list[bytes] = []
        self.completions: list[asyncio.Future[Position] | RunCompletion] = []
        self.open = True  # the loop may still add to it (loop-only flag)
