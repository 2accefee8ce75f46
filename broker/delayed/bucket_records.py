"""The immutable buckets of the bucket tracker, and the queue of their loaded segments.

Theory of operation
-------------------
An :class:`ImmutableBucket` is the in-memory record of one sealed bucket (ledgers
``[start_ledger, end_ledger]``, one snapshot): two per-ledger roaring bitmaps, ``indexed``
(everything its snapshot holds) and ``pending`` (not handed out or cancelled yet; a ledger's
``pending`` bitmap is the ``indexed`` one itself until its first entry goes, then a copy: a
bucket nothing was taken from yet, most of them after a restart, holds one set), the first
deliver time of each segment, and at most one :class:`LoadedSegment` (sorted packed columns and
a read offset). Its lifecycle is one :class:`BucketState`: READING (recovered from its
snapshot's summary only: its range and first time are known, its membership is not read yet;
it hands out nothing, is never merged or retired as empty, and the tracker defers what it is
asked about its ledgers until :meth:`SealedBuckets.settle`) -> LIVE (in the bucket list, handing
out) -> MERGING (being merged with its neighbour: it is not retired when it runs dry
meanwhile) -> LIVE again, or RETIRED (handed out, cancelled, merged away or cleared; final).
``recovered`` is not a state: it says where the bucket's entries came from (a previous run:
some may have been acknowledged since).

:class:`SealedBuckets` owns every live bucket, sorted by start ledger (ranges never overlap), and
the *shared queue*: a heap of the loaded segments keyed by their head (time, position), so
the hand-out is a k-way merge of the segment heads whose cost per hand-out does not depend on
how many segments are loaded. It knows nothing of IO: the snapshot side
(:mod:`broker.delayed.bucket_snapshots`) inserts, loads and retires buckets; the tracker
(:mod:`broker.delayed.bucket`) hands out due indexes through :meth:`SealedBuckets.take_run` (one
merge step) and :meth:`SealedBuckets.take_all_due` (every segment's run up to a time, when all of
it goes: :meth:`SealedBuckets.due_count` says so first).
Invariants:

- ``remaining`` of a bucket == sum of its ``pending`` cardinalities; ``sealed_remaining`` ==
  sum of ``remaining`` over the live buckets;
- a bucket waiting for a segment is in ``loading`` with that segment's first time: nothing
  later than the smallest such time (the *barrier*) is handed out, so delivery stays in time
  order across buckets (the barrier's own millisecond is not held back: the loaded segments'
  entries of it may go before the loading bucket's, whatever their positions); a loaded
  segment's bucket with segments still on disk bounds the hand-out the same way at its next
  segment's first time (the *upcoming* heap);
- except for what was due already when the tracker recovered (``overdue_to``, the cutoff
  then): those messages are late whatever their order, so a bucket still loading holds back
  only what falls due after that time, and each bucket's overdue entries go out as soon as
  its segment is in (the hand-out takes a segment's whole overdue run at once, in (time,
  position) order within the segment, the segment with the smallest head first). Nothing is
  ever handed out before its time;
- the barrier, the upcoming bound and the head of the queue are heap tops: reading them costs
  O(1) amortized, whatever the number of buckets;
- a heap entry whose segment is ``dead`` (bucket retired or merged) is dropped lazily;
- ``reading`` == the number of live buckets in state READING (their ``remaining`` is 0 until
  :meth:`SealedBuckets.settle` gives them their membership).

Everything runs on the event loop thread.
"""

from __future__ import annotations

import heapq
import itertools
import sys
from array import array
from bisect import bisect_right
from collections.abc import Callable, Iterator
from enum import Enum
from typing import Final

from pyroaring import BitMap

from broker.delayed.packed import POSITION_BITS, POSITION_MASK, bitmap_bytes, make_positions
from broker.delayed.snapshot_format import DecodedSegment, RawSegment
from storage.positions import Position

#: Pulsar's cursor property prefix for a bucket: ``<prefix>_<startLedger>_<endLedger>``.
BUCKET_KEY_PREFIX: Final = "#pulsar.internal.delayed.bucket"


_KEY_START: Final = BUCKET_KEY_PREFIX + "_"
_KEY_START_LEN: Final = len(_KEY_START)


def bucket_key(start_ledger: int, end_ledger: int) -> str:
    return f"{BUCKET_KEY_PREFIX}_{start_ledger}_{end_ledger}"


def parse_bucket_key(key: str) -> tuple[int, int] | None:
    """(start, end) of a bucket property key; None for any other key."""
    if not key.startswith(_KEY_START):
        return None
    # a restart parses one key per bucket, tens of thousands: no list, no generator
    start, sep, end = key[_KEY_START_LEN:].partition("_")
    if not sep or not start.isdecimal() or not end.isdecimal():   # what int() reads
        return None
    return int(start), int(end)


class BucketState(Enum):
    """The lifecycle of an immutable bucket (module docstring)."""

    READING = "reading"
    LIVE = "live"
    MERGING = "merging"
    RETIRED = "retired"


class ImmutableBucket:
    """A sealed bucket: ledgers [start_ledger, end_ledger], one snapshot."""

    __slots__ = ("end_ledger", "indexed", "loaded", "mem_segments", "next_segment", "pending",
                 "read_ahead", "recovered", "remaining", "segment_min_ts", "skip", "snapshot_id",
                 "snapshot_size", "start_ledger", "state")

    def __init__(self, start_ledger: int, end_ledger: int, *, recovered: bool = False) -> None:
        self.start_ledger = start_ledger
        self.end_ledger = end_ledger
        self.snapshot_id: int | None = None
        self.snapshot_size = 0
        self.indexed: dict[int, BitMap] = {}
        self.pending: dict[int, BitMap] = {}
        self.remaining = 0                      # pending indexes (sum of pending cardinalities)
        self.segment_min_ts: array[int] = array("q")   # per segment 1..N
        self.next_segment = 1                   # next segment number to load
        self.skip = 0                           # its indexes already loaded (a partial load)
        self.mem_segments: list[RawSegment] | None = None   # until the snapshot is durable
        self.loaded: LoadedSegment | None = None
        # the next segment read while the loaded one serves: (number, skip, segment)
        self.read_ahead: tuple[int, int, DecodedSegment] | None = None
        self.recovered = recovered              # from a previous run: entries may be acked
        self.state = BucketState.LIVE

    @classmethod
    def from_summary(cls, start_ledger: int, end_ledger: int, snapshot_id: int,
                     first_ts: int) -> ImmutableBucket:
        """A recovered bucket known by its summary only (READING): its first time is a
        barrier until its membership and first segment are read."""
        bucket = cls(start_ledger, end_ledger, recovered=True)
        bucket.snapshot_id = snapshot_id
        bucket.segment_min_ts = array("q", [first_ts])
        bucket.state = BucketState.READING
        return bucket

    # --- lifecycle: one state, one guard each ------------------------------------------------

    @property
    def alive(self) -> bool:
        """Not retired (LIVE or MERGING)."""
        return self.state is not BucketState.RETIRED

    @property
    def merging(self) -> bool:
        return self.state is BucketState.MERGING

    @property
    def reading(self) -> bool:
        """Membership not read yet (recovered from its summary)."""
        return self.state is BucketState.READING

    def begin_merge(self) -> None:
        if self.state is BucketState.LIVE:
            self.state = BucketState.MERGING

    def end_merge(self) -> None:
        """The merge is over (done or failed); a bucket retired meanwhile stays retired."""
        if self.state is BucketState.MERGING:
            self.state = BucketState.LIVE

    def retire(self) -> None:
        self.state = BucketState.RETIRED
        self.read_ahead = None

    @property
    def key(self) -> str:
        return bucket_key(self.start_ledger, self.end_ledger)

    def is_pending(self, ledger_id: int, entry_id: int) -> bool:
        bm = self.pending.get(ledger_id)
        return bm is not None and entry_id in bm

    def was_indexed(self, ledger_id: int, entry_id: int) -> bool:
        bm = self.indexed.get(ledger_id)
        return bm is not None and entry_id in bm

    def take(self, ledger_id: int, entry_id: int) -> bool:
        """Clear a pending bit; True if it was set."""
        bm = self.pending.get(ledger_id)
        if bm is None or entry_id not in bm:
            return False
        if bm is self.indexed.get(ledger_id):   # shared until its first change
            bm = self.pending[ledger_id] = bm.copy()
        bm.discard(entry_id)      # checked: remove() is 5x slower in pyroaring
        self.remaining -= 1
        return True

    def has_unloaded_segments(self) -> bool:
        return self.next_segment <= len(self.segment_min_ts)

    @property
    def next_min_ts(self) -> int:
        """First deliver time of the next segment to load (there must be one)."""
        return self.segment_min_ts[self.next_segment - 1]


class LoadedSegment:
    """The in-memory segment of a bucket: sorted packed columns and a read offset."""

    __slots__ = ("bucket", "dead", "i", "pos", "seq", "ts")

    def __init__(self, bucket: ImmutableBucket, segment: DecodedSegment, seq: int) -> None:
        self.bucket = bucket
        self.ts = segment.ts
        self.pos = segment.pos
        self.i = 0
        self.seq = seq
        self.dead = False

    @property
    def live(self) -> bool:
        return not self.dead and self.i < len(self.ts)


class LoadingTimes(dict[ImmutableBucket, int]):
    """Bucket -> first time of the segment it waits for, with the smallest time at hand: a
    heap beside the dict, whose entries that no longer match the dict are dropped lazily."""

    __slots__ = ("_low", "_seq")

    def __init__(self) -> None:
        super().__init__()
        self._low: list[tuple[int, int, ImmutableBucket]] = []
        self._seq = itertools.count()

    def __setitem__(self, bucket: ImmutableBucket, ts: int) -> None:
        super().__setitem__(bucket, ts)
        heapq.heappush(self._low, (ts, next(self._seq), bucket))
        if len(self._low) > 2 * len(self) + 64:    # stale entries behind a live head
            self._rebuild()

    def _rebuild(self) -> None:
        self._low = [(ts, next(self._seq), b) for b, ts in self.items()]
        heapq.heapify(self._low)

    def clear(self) -> None:
        super().clear()
        self._low.clear()

    def low(self) -> int | None:
        """The smallest time, or None when nothing is loading."""
        heap = self._low
        while heap:
            ts, _, bucket = heap[0]
            if self.get(bucket) == ts:
                return ts
            heapq.heappop(heap)
        if self:                                # entries set around __setitem__
            self._rebuild()
            return self._low[0][0]
        return None


#: A heap entry of the shared queue: (head time, head position, load sequence, segment).
QueueEntry = tuple[int, int, int, LoadedSegment]


class SealedBuckets:
    """The live immutable buckets and the heap of their loaded segments (module docstring)."""

    __slots__ = ("_buckets", "_heap", "_parked", "_parked_heap", "_seq", "_starts", "_upcoming",
                 "loading", "overdue_to", "reading", "retired", "sealed_remaining")

    def __init__(self) -> None:
        self._buckets: list[ImmutableBucket] = []
        self._starts: list[int] = []
        self._heap: list[QueueEntry] = []
        # (first time of the bucket's next segment, seq, its loaded segment): see limit()
        self._upcoming: list[tuple[int, int, LoadedSegment]] = []
        self._seq = itertools.count()
        self.loading = LoadingTimes()   # bucket -> first time of the awaited segment
        # buckets whose next segment is not due soon: not in memory until it is (park/unpark)
        self._parked: dict[ImmutableBucket, int] = {}   # bucket -> first time of that segment
        self._parked_heap: list[tuple[int, int, ImmutableBucket]] = []
        self.sealed_remaining = 0
        self.reading = 0                # live buckets whose membership is not read yet
        # deliver times up to this were due when the tracker recovered: not held back by a
        # bucket still loading (module docstring)
        self.overdue_to = -1
        # entry ids of retired buckets a sequential read may still meet (see retire)
        self.retired: dict[int, BitMap] = {}

    # --- the bucket list -------------------------------------------------------------------

    def __iter__(self) -> Iterator[ImmutableBucket]:
        return iter(list(self._buckets))

    def __len__(self) -> int:
        return len(self._buckets)

    def __bool__(self) -> bool:
        return bool(self._buckets)

    @property
    def last_end_ledger(self) -> int:
        """End ledger of the last bucket, -1 if none."""
        return self._buckets[-1].end_ledger if self._buckets else -1

    def find(self, ledger_id: int) -> ImmutableBucket | None:
        i = bisect_right(self._starts, ledger_id) - 1
        if i >= 0:
            bucket = self._buckets[i]
            if ledger_id <= bucket.end_ledger:
                return bucket
        return None

    def insert(self, bucket: ImmutableBucket) -> None:
        i = bisect_right(self._starts, bucket.start_ledger)
        self._buckets.insert(i, bucket)
        self._starts.insert(i, bucket.start_ledger)
        self.sealed_remaining += bucket.remaining
        self.reading += bucket.reading

    def settle(self, bucket: ImmutableBucket, read: ImmutableBucket) -> None:
        """A READING bucket gets the membership ``read`` from its snapshot's metadata (and the
        first time of every segment); it is LIVE from now on."""
        bucket.indexed = read.indexed
        bucket.pending = read.pending
        bucket.remaining = read.remaining
        bucket.segment_min_ts = read.segment_min_ts
        bucket.snapshot_size = read.snapshot_size
        bucket.state = BucketState.LIVE
        self.reading -= 1
        self.sealed_remaining += bucket.remaining

    def remove(self, bucket: ImmutableBucket) -> None:
        """Take a bucket out (retired or merged): its segment dies, its count goes."""
        self.reading -= bucket.reading
        bucket.retire()
        if bucket.loaded is not None:
            bucket.loaded.dead = True
            bucket.loaded = None
        self.loading.pop(bucket, None)
        self._parked.pop(bucket, None)
        i = self._buckets.index(bucket)
        del self._buckets[i], self._starts[i]
        self.sealed_remaining -= max(bucket.remaining, 0)

    def reading_at(self, ledger_id: int) -> bool:
        """Is the ledger in a bucket whose membership is not read yet?"""
        bucket = self.find(ledger_id)
        return bucket is not None and bucket.reading

    def take(self, ledger_id: int, entry_id: int) -> ImmutableBucket | None:
        """Clear a pending index (cancel); the bucket it was in, or None."""
        bucket = self.find(ledger_id)
        if bucket is not None and bucket.take(ledger_id, entry_id):
            self.sealed_remaining -= 1
            return bucket
        return None

    def retire(self, bucket: ImmutableBucket, first_unread_ledger: int) -> None:
        """Remember what a deleted bucket handed out while a sequential read may still meet
        those entries (after a restart the read starts again at the mark-delete position)."""
        retired = self.retired
        for ledger_id, bm in bucket.indexed.items():
            if ledger_id >= first_unread_ledger:
                have = retired.get(ledger_id)
                if have is None:
                    retired[ledger_id] = bm
                else:
                    have |= bm
        for ledger_id in [k for k in retired if k < first_unread_ledger]:
            del retired[ledger_id]

    def holds(self, ledger_id: int, entry_id: int) -> bool:
        """Is the position pending in a bucket, or handed out (or cancelled) by a live or
        retired bucket since the last :meth:`clear`? A dispatcher meeting it again must skip
        it."""
        bucket = self.find(ledger_id)
        if bucket is not None and bucket.was_indexed(ledger_id, entry_id):
            return True                         # pending is a subset of indexed
        retired = self.retired.get(ledger_id)
        return retired is not None and entry_id in retired

    def held_sets(self, ledger_id: int) -> list[BitMap | None]:
        """The bitmaps :meth:`holds` consults for one ledger."""
        bucket = self.find(ledger_id)
        return [bucket.indexed.get(ledger_id) if bucket is not None else None,
                self.retired.get(ledger_id)]

    def clear(self) -> None:
        self.retired.clear()
        self._buckets.clear()
        self._starts.clear()
        self._heap.clear()
        self._upcoming.clear()
        self.loading.clear()
        self._parked.clear()
        self._parked_heap.clear()
        self.sealed_remaining = 0
        self.reading = 0

    # --- the shared queue ------------------------------------------------------------------

    def push_loaded(self, bucket: ImmutableBucket, segment: DecodedSegment) -> None:
        loaded = LoadedSegment(bucket, segment, next(self._seq))
        bucket.loaded = loaded
        heapq.heappush(self._heap, (segment.ts[0], segment.pos[0], loaded.seq, loaded))
        if bucket.has_unloaded_segments():
            upcoming = self._upcoming
            heapq.heappush(upcoming, (bucket.next_min_ts, loaded.seq, loaded))
            if len(upcoming) > 2 * len(self._heap) + 64:    # dead entries behind live ones
                self._upcoming = [e for e in upcoming if not e[2].dead]
                heapq.heapify(self._upcoming)

    def park(self, bucket: ImmutableBucket) -> None:
        """Keep the bucket's next segment on disk until its first time comes near."""
        ts = bucket.next_min_ts
        self._parked[bucket] = ts
        heapq.heappush(self._parked_heap, (ts, next(self._seq), bucket))

    def parked_head(self) -> int | None:
        """First time of the earliest parked segment (stale heap entries dropped)."""
        heap = self._parked_heap
        while heap:
            ts, _, bucket = heap[0]
            if self._parked.get(bucket) == ts:
                return ts
            heapq.heappop(heap)
        return None

    def unpark_upto(self, horizon: int) -> list[ImmutableBucket]:
        """Take out the parked buckets whose next segment starts at or before ``horizon``."""
        out: list[ImmutableBucket] = []
        while True:
            head = self.parked_head()
            if head is None or head > horizon:
                return out
            bucket = heapq.heappop(self._parked_heap)[2]
            del self._parked[bucket]
            out.append(bucket)

    def barrier(self) -> int | None:
        """First time of the earliest segment being loaded or parked (nothing later is
        handed out)."""
        parked = self.parked_head()
        low = self.loading.low()
        if low is None:
            return parked
        return low if parked is None or low < parked else parked

    def head(self, on_exhausted: Callable[[LoadedSegment], None]) -> int | None:
        """Earliest pending time among the loaded segments; stale heads are skipped and a
        segment found exhausted is passed to ``on_exhausted`` (load the next one)."""
        heap = self._heap
        while heap:
            loaded = heap[0][3]
            if loaded.dead:
                heapq.heappop(heap)
                continue
            bucket = loaded.bucket
            ts, pos, i = loaded.ts, loaded.pos, loaded.i
            n = len(ts)
            while i < n and not bucket.is_pending(pos[i] >> POSITION_BITS, pos[i] & POSITION_MASK):
                i += 1
            if i == loaded.i:
                return ts[i]
            loaded.i = i
            if i == n:
                heapq.heappop(heap)
                on_exhausted(loaded)
            else:
                heapq.heapreplace(heap, (ts[i], pos[i], loaded.seq, loaded))
        return None

    def limit(self, limit: int) -> int:
        """``limit`` lowered to the barrier and to the first time of every loaded bucket's next
        segment (delivery stays in time order), but not below ``overdue_to``."""
        barrier = self.barrier()
        upcoming = self._upcoming
        while upcoming and upcoming[0][2].dead:
            heapq.heappop(upcoming)
        if upcoming and (barrier is None or upcoming[0][0] < barrier):
            barrier = upcoming[0][0]
        if barrier is not None and barrier < limit:
            limit = max(barrier, min(self.overdue_to, limit))
        return limit

    def top(self) -> QueueEntry | None:
        """The heap entry of the loaded segment with the smallest head (time, position); dead
        segments on the way are dropped. Its head may be stale (handed out, cancelled)."""
        heap = self._heap
        while heap and heap[0][3].dead:
            heapq.heappop(heap)
        return heap[0] if heap else None

    def second_key(self) -> tuple[int, int] | None:
        """A lower bound of the head (time, position) of every loaded segment but the top's:
        the smaller of the top's two children (stale or dead ones included: a lower bound)."""
        heap = self._heap
        if len(heap) < 2:
            return None
        if len(heap) > 2 and heap[2] < heap[1]:
            return heap[2][0], heap[2][1]
        return heap[1][0], heap[1][1]

    def take_run(self, end: int, out: list[Position],
                 is_deleted: Callable[[Position], bool]) -> tuple[int, LoadedSegment | None]:
        """Consume the top segment's indexes up to (not including) offset ``end``; pending
        ones go to ``out`` (minus those ``is_deleted`` reports acknowledged before a restart).
        Returns how many were consumed, stale ones included, and the segment if it ran dry
        (out of the heap then: the caller loads the next one)."""
        heap = self._heap
        loaded = heap[0][3]
        moved = end - loaded.i
        self.sealed_remaining -= _take_segment(loaded, end, out, is_deleted)
        i = loaded.i
        if i == len(loaded.ts):
            heapq.heappop(heap)
            return moved, loaded
        heapq.heapreplace(heap, (loaded.ts[i], loaded.pos[i], loaded.seq, loaded))
        return moved, None

    def due_count(self, limit_ts: int, cap: int) -> int:
        """How many indexes of the loaded segments are at or before ``limit_ts`` (stale ones
        counted); once past ``cap``, some count above it. The segments with a head that
        early are a subtree at the heap's root: the count visits them and no other."""
        heap = self._heap
        size = len(heap)
        count = 0
        stack = [0] if size and heap[0][0] <= limit_ts else []
        while stack:
            k = stack.pop()
            loaded = heap[k][3]
            if not loaded.dead:
                count += bisect_right(loaded.ts, limit_ts, loaded.i) - loaded.i
                if count > cap:
                    return count
            for child in (2 * k + 1, 2 * k + 2):
                if child < size and heap[child][0] <= limit_ts:
                    stack.append(child)
        return count

    def take_all_due(self, limit_ts: int, out: list[Position],
                     is_deleted: Callable[[Position], bool]) -> list[LoadedSegment]:
        """Every loaded segment's whole run at or before ``limit_ts``, one step a segment (the
        caller knows all of them go, so their merge order decides nothing; see
        :meth:`take_run` for ``out`` and ``is_deleted``). Returns the segments that ran dry
        (out of the heap: the caller loads the next ones)."""
        heap = self._heap
        taken: list[LoadedSegment] = []
        while heap and heap[0][0] <= limit_ts:
            loaded = heapq.heappop(heap)[3]
            if not loaded.dead:
                end = bisect_right(loaded.ts, limit_ts, loaded.i)
                self.sealed_remaining -= _take_segment(loaded, end, out, is_deleted)
                taken.append(loaded)
        exhausted: list[LoadedSegment] = []
        for loaded in taken:
            i = loaded.i
            if i == len(loaded.ts):
                exhausted.append(loaded)
            else:
                heapq.heappush(heap, (loaded.ts[i], loaded.pos[i], loaded.seq, loaded))
        return exhausted

    # --- metrics ---------------------------------------------------------------------------

    @property
    def loaded_index_count(self) -> int:
        return sum(len(seg.ts) - seg.i for _, _, _, seg in self._heap if not seg.dead)

    @property
    def memory_bytes(self) -> int:
        total = sys.getsizeof(self._heap) + 64 * len(self._heap)
        total += sys.getsizeof(self._parked) + sys.getsizeof(self._parked_heap) \
            + 120 * len(self._parked_heap)
        total += sum(bitmap_bytes(bm) for bm in self.retired.values())
        for _, _, _, seg in self._heap:
            if not seg.dead:
                total += sys.getsizeof(seg.ts) + sys.getsizeof(seg.pos)
        for bucket in self._buckets:
            total += 200 + sys.getsizeof(bucket.segment_min_ts)
            total += sum(bitmap_bytes(bm) for bm in bucket.indexed.values())
            indexed = bucket.indexed
            total += sum(bitmap_bytes(bm) for ledger_id, bm in bucket.pending.items()
                         if bm is not indexed.get(ledger_id))
            if bucket.mem_segments is not None:
                total += sum(sys.getsizeof(t) + sys.getsizeof(p) for t, p in bucket.mem_segments)
            if bucket.read_ahead is not None:
                ahead = bucket.read_ahead[2]
                total += sys.getsizeof(ahead.ts) + sys.getsizeof(ahead.pos)
        return total

    @property
    def ranges(self) -> list[tuple[int, int]]:
        return [(b.start_ledger, b.end_ledger) for b in self._buckets]


def _take_segment(loaded: LoadedSegment, end: int, out: list[Position],
                  is_deleted: Callable[[Position], bool]) -> int:
    """Consume a segment's indexes up to offset ``end``: the pending ones go to ``out`` (minus
    those ``is_deleted`` reports acknowledged before a restart). Returns how many were pending
    (the bucket's ``remaining`` is lowered by as many; the caller lowers its total).

    Not :func:`~broker.delayed.packed.take_members`: a bucket's ``pending`` bitmap is shared
    with ``indexed`` until its first change (copied here on the way), and the runs of a
    dispatcher's hand-out are a few entries a segment, which this loop takes 4-7% faster
    (``bench/delayed.py --handout``); a drain of long runs would gain from its bulk path."""
    pos = loaded.pos
    bucket = loaded.bucket
    pending = bucket.pending
    indexed = bucket.indexed
    ledgers: list[int] = []
    entries: list[int] = []
    last = -1
    bm: BitMap | None = None
    for k in range(loaded.i, end):
        packed = pos[k]
        ledger_id = packed >> POSITION_BITS
        if ledger_id != last:               # a run is mostly of one ledger
            last = ledger_id
            bm = pending.get(ledger_id)
            if bm is not None and bm is indexed.get(ledger_id):
                # shared until its first change, which is now: an entry of the segment is
                # in indexed, and so pending, unless the bitmap was changed before
                bm = pending[ledger_id] = bm.copy()
        entry_id = packed & POSITION_MASK
        if bm is None or entry_id not in bm:
            continue                        # handed out, cancelled or acked
        bm.discard(entry_id)                # checked: remove() is 5x slower in pyroaring
        ledgers.append(ledger_id)
        entries.append(entry_id)
    taken = len(entries)
    bucket.remaining -= taken
    loaded.i = end
    if bucket.recovered:                    # some may have been acknowledged before a restart
        out.extend(p for p in make_positions(ledgers, entries) if not is_deleted(p))
    else:
        out.extend(make_positions(ledgers, entries))
    return taken
