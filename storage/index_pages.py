"""IndexPager: the per-entry index of sealed segments, kept in memory within a byte budget.

A segment's index (entry id -> offset, data length) costs 12 bytes per entry in memory. The
open segment's index must stay resident (the writer extends it), but a sealed segment whose
index is durably on disk (``.idx``, storage/segments.py) can be dropped from memory and read
back when a read needs it. The pager owns that: store-wide, loop-only, LRU over the sealed
segments that have a persisted index, evicting beyond index_cache_bytes; a load runs in a
read thread (load_index, or a scan of the segment if the index went missing meanwhile).

So recovery never keeps a sealed, indexed segment's arrays (storage/recovery.py drops them
after validating the index): a 50-million-entry ledger opens in the memory of one segment's
index at a time, and reads page the indexes they touch in.
"""

from __future__ import annotations

import asyncio
from array import array
from collections import OrderedDict
from concurrent.futures import Executor, Future

from storage.fileops import FileOps
from storage.segment_file import IndexResidency, SegmentFile
from storage.segments import load_index, scan_segment

ENTRY_INDEX_BYTES = 12  # i64 offset + i32 length


def resident_bytes(segment: SegmentFile) -> int:
    return (len(segment.offsets) * ENTRY_INDEX_BYTES
            if segment.index is not IndexResidency.PAGED_OUT else 0)


class IndexPager:
    def __init__(
        self, loop: asyncio.AbstractEventLoop, ops: FileOps, pool: Executor, budget_bytes: int
    ) -> None:
        self._loop = loop
        self._ops = ops
        self._pool = pool
        self._budget = max(0, budget_bytes)
        self._lru: OrderedDict[SegmentFile, int] = OrderedDict()  # pageable, resident -> bytes
        self._bytes = 0
        self._loading: dict[SegmentFile, asyncio.Future[None]] = {}
        self.loads = 0
        self.evictions = 0

    @property
    def resident_bytes(self) -> int:
        return self._bytes

    def watch(self, segment: SegmentFile, job: Future[bool]) -> None:
        """segment's index is being written (job, in the I/O thread); once it is on disk the
        segment's arrays may be paged out. Any thread."""

        def done(fut: Future[bool]) -> None:
            if not fut.cancelled() and fut.exception() is None and fut.result():
                self._loop.call_soon_threadsafe(self.pageable, segment)

        job.add_done_callback(done)

    def pageable(self, segment: SegmentFile) -> None:
        """Loop: segment is sealed and its index is durable on disk."""
        if segment.index is not IndexResidency.RESIDENT:
            return
        segment.index = IndexResidency.PAGEABLE
        self._admit(segment)

    def adopt(self, segment: SegmentFile, offsets: array[int], lengths: array[int]) -> None:
        """Loop: a sealed segment's arrays were read from its durable index elsewhere (its
        first-read check, storage/sealed_checks.py): a page-in like the pager's own."""
        segment.offsets, segment.lengths = offsets, lengths
        segment.index = IndexResidency.PAGEABLE
        self.loads += 1
        self._admit(segment)

    def forget(self, segment: SegmentFile) -> None:
        """Loop: the segment is gone (trimmed, deleted)."""
        size = self._lru.pop(segment, None)
        if size is not None:
            self._bytes -= size

    async def arrays(self, segment: SegmentFile) -> tuple[array[int], array[int]]:
        """Loop: the segment's index arrays, paged in if needed (an UNCHECKED segment too,
        though its reader checks it first: storage/sealed_checks.py)."""
        if segment.index not in (IndexResidency.PAGED_OUT, IndexResidency.UNCHECKED):
            if segment in self._lru:
                self._lru.move_to_end(segment)
            return segment.offsets, segment.lengths
        loading = self._loading.get(segment)
        if loading is None:
            loading = self._loop.create_future()
            self._loading[segment] = loading
            try:
                offsets, lengths = await self._loop.run_in_executor(
                    self._pool, _load_arrays, self._ops, segment
                )
                segment.offsets, segment.lengths = offsets, lengths
                segment.index = IndexResidency.PAGEABLE
                self.loads += 1
                self._admit(segment)
                loading.set_result(None)
            except BaseException as exc:
                loading.set_exception(exc)
                loading.exception()  # retrieved: waiters (if any) re-raise it
                raise
            finally:
                del self._loading[segment]
        else:
            await asyncio.shield(loading)
        return segment.offsets, segment.lengths

    def _admit(self, segment: SegmentFile) -> None:
        size = resident_bytes(segment)
        old = self._lru.pop(segment, None)
        if old is not None:
            self._bytes -= old
        self._lru[segment] = size
        self._bytes += size
        while self._bytes > self._budget and len(self._lru) > 1:
            victim, victim_size = self._lru.popitem(last=False)
            self._bytes -= victim_size
            victim.page_out()
            self.evictions += 1


def _load_arrays(ops: FileOps, segment: SegmentFile) -> tuple[array[int], array[int]]:
    """Blocking: a sealed segment's index from its .idx file, else from a scan (read only)."""
    result = load_index(ops, segment.path, segment.ledger_id)
    if result is None:
        result = scan_segment(ops, segment.path, segment.ledger_id, truncate=False)
    return result.offsets, result.lengths
