"""Bucket delayed-delivery tracker (PIP-195): a persisted index that survives restarts.

Theory of operation
-------------------
The index is split by ledger ranges into *buckets*:

- the **last mutable bucket** indexes new positions of ledgers ``[start, end]`` in a packed
  time index (exact deliver times) plus a roaring bitmap per ledger. When a position of a
  ledger past ``end`` arrives and the bucket holds >= ``delayedDeliveryMinIndexCountPerBucket``
  indexes, it is **sealed** on that ledger boundary into an immutable bucket;
- an **immutable bucket** is one snapshot in the storage ``SnapshotStore``: metadata (per
  segment: min/max deliver time and a roaring bitmap per ledger) and segments cut by time step
  and index count (:mod:`broker.delayed.snapshot_format`). Encoding runs in an executor thread
  and the write is async: the loop never blocks on snapshot IO. Until the snapshot is durable
  its segments stay in memory. Once durable its id is recorded in the cursor properties under
  ``#pulsar.internal.delayed.bucket_<startLedger>_<endLedger>`` (Pulsar's key) and the cursor
  is flushed;
- only the current segment of each immutable bucket is in memory (sorted packed columns). Those
  segments plus the mutable bucket and an in-memory ``extra`` index (positions of sealed
  ledgers that were not indexed there) form the shared priority queue. ``get_scheduled(n)``
  finds by bisection the time T such that the n earliest due entries are those <= T, then
  takes whole runs per source (no per-entry heap work). When a bucket's segment runs dry its
  next segment is loaded asynchronously; nothing later than the first time of a segment not in
  memory yet is handed out (the *barrier*), so delivery stays in deliver-time order. The
  bucket machinery (seal, snapshots, merge, delete, recovery) is in
  :mod:`broker.delayed.bucket_lifecycle`;
- each immutable bucket keeps two per-ledger roaring bitmaps: ``indexed`` (everything its
  snapshot holds) and ``pending`` (not yet handed out or cancelled). A re-read entry found in
  ``pending`` is not indexed twice. One found in ``indexed`` but no longer pending was already
  handed out as a replay since the last cursor reset (``cursor.revision`` unchanged): the
  dispatcher only meets it again by reading sequentially after a restart, so it is skipped
  too. After a reset the ordinary rule applies (due -> deliver), so nothing is lost;
- a bucket whose pending set becomes empty is **deleted** (cursor property removed and
  flushed, then the snapshot). Past ``delayedDeliveryMaxNumBuckets`` (> 0) the two adjacent
  persisted buckets with the fewest pending indexes are **merged** into one new snapshot;
- **cancel** (PIP-423, tracker level) of a position in an immutable bucket clears its pending
  bit and queues a CANCEL index that the next sealed snapshot carries (first in segment 1);
  loading that segment (recovery always loads every first segment) re-applies it. A CANCEL is
  carried over by merges and deletes only while its target bucket lives, then expires. A cancel
  of a position still in the mutable bucket is in memory only: the durable form of a cancel is
  the individual ack the admin skip-by-message-ids API performs.

Recovery (:meth:`recover`): read the bucket keys from the cursor properties (a range enclosed
by another is the leftover of an interrupted merge and is deleted), load each metadata and the
first segment of each bucket, drop what the mark-delete position already covers. The backlog is
not re-read for this: the mutable bucket is rebuilt by the dispatcher's ordinary reading from
the cursor, and positions of sealed ledgers it meets are answered from the bitmaps. Positions
are only handed out when due, so nothing is delivered early; positions acknowledged before the
restart are filtered with ``cursor.is_deleted`` as they come up.

Metrics, read by the collector as plain attributes:
  ``bucket_count``        immutable buckets + the mutable one (pulsar_delayed_message_index_bucket_total)
  ``loaded_index_count``  indexes in memory (pulsar_delayed_message_index_loaded)
  ``snapshot_size_bytes`` bytes of live snapshots (pulsar_delayed_message_index_bucket_snapshot_size_bytes)
  ``op_count``            dict[(type, state), int]; type create/load/delete/merge, state
                          succeed/failed (the collector derives Pulsar's state="all" as the sum)
  ``op_latency_buckets``  dict[type, list[int]]: counts of succeeded ops by latency, buckets
                          <= 50, 100, 500, 1000, 5000, 30000, 60000 ms and the overflow (8 ints)
  ``op_latency_sum_ms``   dict[type, float]: total latency of the succeeded ops (histogram sum)
  ``memory_bytes``        pulsar_delayed_message_index_size_bytes
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import sys
from bisect import bisect_right
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any

from pyroaring import BitMap

from broker.delayed.bucket_lifecycle import (
    BUCKET_KEY_PREFIX,
    LATENCY_BOUNDS_MS,
    OP_STATES,
    OP_TYPES,
    BucketLifecycle,
    _Bucket,
    _Loaded,
    bucket_key,
    parse_bucket_key,
)
from broker.delayed.packed import (
    POSITION_BITS,
    POSITION_MASK,
    PackedTimeIndex,
    WideIndex,
    bitmap_bytes,
    fits,
    run_end_union,
    take_members,
)
from broker.delayed.tracker import TimedTracker
from storage.positions import Position

__all__ = ["BUCKET_KEY_PREFIX", "BucketDelayedDeliveryTracker", "bucket_key", "parse_bucket_key"]


class BucketDelayedDeliveryTracker(BucketLifecycle, TimedTracker):
    def __init__(self, *, cursor: Any, snapshots: Any, tick_time_ms: int, strict: bool,
                 on_due: Callable[[], None], loop: asyncio.AbstractEventLoop,
                 clock_ms: Callable[[], int] | None = None,
                 min_index_count_per_bucket: int = 50000,
                 time_step_per_segment_ms: int = 300_000,
                 max_indexes_per_segment: int = 5000,
                 max_num_buckets: int = -1,
                 executor: Executor | None = None) -> None:
        self._cursor = cursor
        self._snapshots = snapshots
        self._loop = loop
        self._init_timing(loop=loop, clock_ms=clock_ms, tick_time_ms=tick_time_ms,
                          strict=strict, on_due=on_due)
        self._min_index_count = max(min_index_count_per_bucket, 1)
        self._time_step_ms = time_step_per_segment_ms
        self._max_indexes_per_segment = max_indexes_per_segment
        self._max_num_buckets = max_num_buckets
        self._executor = executor
        # the last mutable bucket
        self._mutable = PackedTimeIndex()
        self._mut_members: dict[int, BitMap] = {}
        self._mut_count = 0
        self._mut_stale = 0                     # cancelled entries still in the index
        self._mut_start = -1
        self._mut_end = -1
        # in-memory only: positions of sealed ledgers that were not indexed there
        self._extra = PackedTimeIndex()
        self._extra_members: dict[int, BitMap] = {}
        self._extra_count = 0
        self._wide = WideIndex()
        # immutable buckets, sorted by start ledger
        self._buckets: list[_Bucket] = []
        self._starts: list[int] = []
        self._heap: list[tuple[int, int, _Loaded]] = []
        self._seq = itertools.count()
        self._loading: dict[_Bucket, int] = {}       # bucket -> min time of the segment awaited
        self._sealed_remaining = 0
        self._pending_cancels: list[int] = []
        # entry ids of retired buckets the sequential read has not passed yet (see add)
        self._retired: dict[int, BitMap] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._merge_task: asyncio.Task[None] | None = None
        self._epoch = int(getattr(cursor, "revision", 0))
        self._closed = False
        # metrics
        self.snapshot_size_bytes = 0
        self.op_count: dict[tuple[str, str], int] = {
            (t, s): 0 for t in OP_TYPES for s in OP_STATES}
        self.op_latency_buckets: dict[str, list[int]] = {
            t: [0] * (len(LATENCY_BOUNDS_MS) + 1) for t in OP_TYPES}
        self.op_latency_sum_ms: dict[str, float] = {t: 0.0 for t in OP_TYPES}

    # --- bookkeeping -----------------------------------------------------------------------

    def _is_deleted(self, ledger_id: int, entry_id: int) -> bool:
        check = getattr(self._cursor, "is_deleted", None)
        return bool(check is not None and check(Position(ledger_id, entry_id)))

    # --- time and timer --------------------------------------------------------------------

    def _barrier(self) -> int | None:
        return min(self._loading.values()) if self._loading else None

    def _heap_top(self) -> _Loaded | None:
        """The loaded segment with the earliest live head (drops stale heads)."""
        heap = self._heap
        while heap:
            loaded = heap[0][2]
            if loaded.dead:
                heapq.heappop(heap)
                continue
            bucket = loaded.bucket
            ts, pos, i = loaded.ts, loaded.pos, loaded.i
            n = len(ts)
            while i < n and not bucket.is_pending(pos[i] >> POSITION_BITS, pos[i] & POSITION_MASK):
                i += 1
            if i != loaded.i:
                loaded.i = i
                if i == n:
                    heapq.heappop(heap)
                    self._segment_done(loaded)
                    continue
                heapq.heapreplace(heap, (ts[i], loaded.seq, loaded))
                continue
            return loaded
        return None

    @staticmethod
    def _purge(index: PackedTimeIndex, members: dict[int, BitMap]) -> int | None:
        while index:
            packed = index.peek_packed()
            bm = members.get(packed >> POSITION_BITS)
            if bm is not None and (packed & POSITION_MASK) in bm:
                return index.peek_ts()
            index.drop_head()
        return None

    def _head_ts(self) -> int | None:
        heads = [self._purge(self._mutable, self._mut_members),
                 self._purge(self._extra, self._extra_members), self._wide.peek_ts()]
        top = self._heap_top()
        if top is not None:
            heads.append(top.ts[top.i])
        live = [h for h in heads if h is not None]
        return min(live) if live else None

    def _after_change(self) -> None:
        """Background work changed the index: re-aim the timer, wake the dispatcher if due."""
        if not self._closed and self.has_message_available():
            self._on_due()

    # --- add / cancel / contains -----------------------------------------------------------

    def add(self, ledger_id: int, entry_id: int, deliver_at_ms: int) -> bool:
        buckets = self._buckets
        sealed = bool(buckets) and ledger_id <= buckets[-1].end_ledger
        if sealed:
            bucket = self._find_bucket(ledger_id)
            if bucket is not None:
                if bucket.is_pending(ledger_id, entry_id):
                    return True
                if self._cursor_revision() == self._epoch:
                    indexed = bucket.indexed.get(ledger_id)
                    if indexed is not None and entry_id in indexed:
                        return True             # handed out already since the last reset
        if self._retired:
            if self._cursor_revision() != self._epoch:
                self._retired.clear()
            else:
                retired = self._retired.get(ledger_id)
                if retired is not None and entry_id in retired:
                    return True                 # handed out by a bucket deleted since
        if not fits(ledger_id, entry_id):
            return self._add_wide(ledger_id, entry_id, deliver_at_ms)
        mut = self._mut_members.get(ledger_id)
        if mut is not None and entry_id in mut:
            return True                         # re-read of a tracked entry
        if self._extra_count:
            bm = self._extra_members.get(ledger_id)
            if bm is not None and entry_id in bm:
                return True
        now = self._clock_ms()
        if deliver_at_ms < 0 or deliver_at_ms <= (now if self._strict else now + self._tick_ms):
            return False
        packed = (ledger_id << POSITION_BITS) | entry_id
        if sealed or (self._mut_count and ledger_id < self._mut_start):
            # Sealed ledgers (or older than the mutable bucket): in memory only, so bucket
            # ranges never overlap. A restart re-reads these entries anyway.
            if self._member_add(self._extra_members, ledger_id, entry_id):
                self._extra.push(deliver_at_ms, packed)
                self._extra_count += 1
        else:
            if self._mut_count >= self._min_index_count and ledger_id > self._mut_end:
                self._seal()
                mut = None
            if self._mut_count == 0:
                self._mutable.clear()           # stale leftovers only
                self._mut_members.clear()
                self._mut_stale = 0
                self._mut_start = self._mut_end = ledger_id
                mut = None
            if mut is None:
                mut = self._mut_members[ledger_id] = BitMap()
            mut.add(entry_id)
            self._mutable.push(deliver_at_ms, packed)
            self._mut_count += 1
            if ledger_id > self._mut_end:
                self._mut_end = ledger_id
        target = self._timer.target_ms
        if target is None or deliver_at_ms - (0 if self._strict else self._tick_ms) < target:
            self._update_timer()
        return True

    def _add_wide(self, ledger_id: int, entry_id: int, deliver_at_ms: int) -> bool:
        if (ledger_id, entry_id) in self._wide.members:
            return True
        if deliver_at_ms < 0 or deliver_at_ms <= self._cutoff():
            return False
        self._wide.add(deliver_at_ms, ledger_id, entry_id)
        self._update_timer()
        return True

    @staticmethod
    def _member_add(members: dict[int, BitMap], ledger_id: int, entry_id: int) -> bool:
        bm = members.get(ledger_id)
        if bm is None:
            members[ledger_id] = BitMap((entry_id,))
            return True
        if entry_id in bm:
            return False
        bm.add(entry_id)
        return True

    @staticmethod
    def _member_take(members: dict[int, BitMap], ledger_id: int, entry_id: int) -> bool:
        bm = members.get(ledger_id)
        if bm is None or entry_id not in bm:
            return False
        bm.remove(entry_id)
        if not bm:
            del members[ledger_id]
        return True

    def cancel(self, ledger_id: int, entry_id: int) -> bool:
        if not fits(ledger_id, entry_id):
            if (ledger_id, entry_id) not in self._wide.members:
                return False
            self._wide.members.discard((ledger_id, entry_id))
            return True
        bucket = self._find_bucket(ledger_id)
        if bucket is not None and bucket.take(ledger_id, entry_id):
            self._sealed_remaining -= 1
            self._pending_cancels.append((ledger_id << POSITION_BITS) | entry_id)
            if bucket.remaining <= 0 and not bucket.merging:
                self._finish_bucket(bucket)
        elif self._member_take(self._mut_members, ledger_id, entry_id):
            self._mut_count -= 1
            self._mut_stale += 1
        elif self._member_take(self._extra_members, ledger_id, entry_id):
            self._extra_count -= 1
        else:
            return False
        self._update_timer()
        return True

    def sequential_skip(self, ledger_id: int, entry_id: int) -> int:
        # The same verdicts as add(): pending in a sealed bucket, handed out since the last
        # reset (indexed; pending is a subset), retired, or in the mutable/extra members.
        same_epoch = self._cursor_revision() == self._epoch
        bucket = self._find_bucket(ledger_id) if self._buckets else None
        sets = [self._mut_members.get(ledger_id), self._extra_members.get(ledger_id)]
        if bucket is not None:
            sets.append((bucket.indexed if same_epoch else bucket.pending).get(ledger_id))
        if same_epoch and self._retired:
            sets.append(self._retired.get(ledger_id))
        return run_end_union(sets, entry_id)

    def contains(self, ledger_id: int, entry_id: int) -> bool:
        if not fits(ledger_id, entry_id):
            return (ledger_id, entry_id) in self._wide.members
        bucket = self._find_bucket(ledger_id)
        if bucket is not None and bucket.is_pending(ledger_id, entry_id):
            return True
        for members in (self._mut_members, self._extra_members):
            bm = members.get(ledger_id)
            if bm is not None and entry_id in bm:
                return True
        return False

    def __len__(self) -> int:
        return self._mut_count + self._extra_count + self._sealed_remaining + len(self._wide)

    # --- delivery ----------------------------------------------------------------------------

    def has_message_available(self) -> bool:
        head = self._head_ts()
        limit = self._cutoff()
        barrier = self._barrier()
        if barrier is not None and barrier < limit:
            limit = barrier
        available = head is not None and head <= limit
        if not available:
            self._update_timer()
        return available

    def get_scheduled(self, max_messages: int) -> list[tuple[int, int]]:
        if self._closed:
            return []
        out: list[tuple[int, int]] = []
        # A round takes the earliest `need` due entries across all sources: find the time
        # threshold by bisection on counts, then take whole runs per source. Rounds repeat only
        # when stale entries were skipped or a segment ran dry.
        for _ in range(1000):
            need = max_messages - len(out)
            if need <= 0:
                break
            self._heap_top()                    # drop dead segments and stale heads
            limit_ts = self._limit_ts()
            threshold = self._threshold(limit_ts, need)
            if threshold is None:
                break
            consumed = self._take_upto(threshold - 1, need, out)
            consumed += self._take_upto(threshold, max_messages - len(out), out)
            if not consumed:
                break
        if len(out) < max_messages and self._wide:
            self._wide.pop_due(self._cutoff(), max_messages - len(out), out)
        out.sort()
        self._update_timer()
        return out

    def _limit_ts(self) -> int:
        """Latest deliver time that may be handed out now: the cutoff, and never past the first
        time of a segment not in memory yet (so delivery stays in time order)."""
        limit = self._cutoff()
        barrier = self._barrier()
        if barrier is not None and barrier < limit:
            limit = barrier
        for _, _, loaded in self._heap:
            bucket = loaded.bucket
            if not loaded.dead and bucket.next_segment <= len(bucket.segment_min_ts):
                upcoming = bucket.segment_min_ts[bucket.next_segment - 1]
                if upcoming < limit:
                    limit = upcoming
        return limit

    def _count_upto(self, bound: int) -> int:
        count = self._mutable.count_upto(bound) + self._extra.count_upto(bound)
        for _, _, loaded in self._heap:
            if not loaded.dead:
                count += bisect_right(loaded.ts, bound, loaded.i) - loaded.i
        return count

    def _threshold(self, limit_ts: int, need: int) -> int | None:
        """The smallest time T <= limit_ts with at least ``need`` entries at or before it
        (limit_ts when fewer are due); None when nothing is due."""
        heads = [h for h in (self._mutable.peek_ts(), self._extra.peek_ts()) if h is not None]
        heads.extend(loaded.ts[loaded.i] for _, _, loaded in self._heap
                     if not loaded.dead and loaded.i < len(loaded.ts))
        if not heads:
            return None
        low = min(heads)
        if low > limit_ts:
            return None
        if self._count_upto(limit_ts) <= need:
            return limit_ts
        high = limit_ts
        while low < high:
            mid = (low + high) // 2
            if self._count_upto(mid) >= need:
                high = mid
            else:
                low = mid + 1
        return low

    def _take_upto(self, bound: int, limit: int, out: list[tuple[int, int]]) -> int:
        """Consume up to ``limit`` entries with time <= bound from every source; returns how
        many were consumed (stale ones included)."""
        consumed = 0
        buf: list[int] = []
        for index, members, is_mutable in ((self._mutable, self._mut_members, True),
                                           (self._extra, self._extra_members, False)):
            if limit - consumed <= 0:
                return consumed
            buf.clear()
            moved = index.pop_upto(bound, limit - consumed, buf)
            if moved:
                consumed += moved
                taken = take_members(buf, members, out)
                if is_mutable:
                    self._mut_count -= taken
                    self._mut_stale = max(0, self._mut_stale - (moved - taken))
                else:
                    self._extra_count -= taken
        exhausted: list[_Loaded] = []
        touched = False
        for _, _, loaded in self._heap:
            if limit - consumed <= 0:
                break
            if loaded.dead:
                continue
            moved = self._take_segment(loaded, bound, limit - consumed, out)
            if moved:
                touched = True
                consumed += moved
                if loaded.i == len(loaded.ts):
                    exhausted.append(loaded)
        if touched:
            self._heap = [(seg.ts[seg.i], seg.seq, seg) for _, _, seg in self._heap
                          if not seg.dead and seg.i < len(seg.ts)]
            heapq.heapify(self._heap)
        for loaded in exhausted:
            self._segment_done(loaded)
        return consumed

    def _take_segment(self, loaded: _Loaded, bound: int, limit: int,
                      out: list[tuple[int, int]]) -> int:
        ts, pos, i = loaded.ts, loaded.pos, loaded.i
        end = min(bisect_right(ts, bound, i), i + limit)
        bucket = loaded.bucket
        pending = bucket.pending
        check_acked = bucket.recovered
        taken = 0
        for k in range(i, end):
            packed = pos[k]
            ledger_id = packed >> POSITION_BITS
            entry_id = packed & POSITION_MASK
            bm = pending.get(ledger_id)
            if bm is None or entry_id not in bm:
                continue                        # handed out, cancelled or acked
            bm.remove(entry_id)
            taken += 1
            if check_acked and self._is_deleted(ledger_id, entry_id):
                continue                        # acknowledged before the restart
            out.append((ledger_id, entry_id))
        bucket.remaining -= taken
        self._sealed_remaining -= taken
        loaded.i = end
        return end - i

    def clear(self) -> None:
        for bucket in list(self._buckets):
            bucket.remaining = 0
            bucket.cancel_ops = []
            self._finish_bucket(bucket)
        self._buckets.clear()
        self._starts.clear()
        self._heap.clear()
        self._loading.clear()
        self._sealed_remaining = 0
        self._pending_cancels = []
        self._retired.clear()
        self._mutable.clear()
        self._mut_members.clear()
        self._mut_count = 0
        self._mut_start = self._mut_end = -1
        self._extra.clear()
        self._extra_members.clear()
        self._extra_count = 0
        self._wide.clear()
        self._timer.cancel()

    async def close(self) -> None:
        self._closed = True
        self._timer.cancel()
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def should_pause_all_deliveries(self) -> bool:
        return False

    # --- metrics and introspection -------------------------------------------------------------

    @property
    def bucket_count(self) -> int:
        return len(self._buckets) + 1

    @property
    def loaded_index_count(self) -> int:
        loaded = sum(len(entry[2].ts) - entry[2].i for entry in self._heap if not entry[2].dead)
        return len(self._mutable) + len(self._extra) + len(self._wide) + loaded

    @property
    def memory_bytes(self) -> int:
        total = (self._mutable.memory_bytes + self._extra.memory_bytes
                 + sys.getsizeof(self._heap) + 64 * len(self._heap))
        for members in (self._mut_members, self._extra_members):
            total += sum(bitmap_bytes(bm) for bm in members.values())
        for entry in self._heap:
            if not entry[2].dead:
                total += sys.getsizeof(entry[2].ts) + sys.getsizeof(entry[2].pos)
        total += sum(bitmap_bytes(bm) for bm in self._retired.values())
        for bucket in self._buckets:
            total += 200
            total += sum(bitmap_bytes(bm) for bm in bucket.indexed.values())
            total += sum(bitmap_bytes(bm) for bm in bucket.pending.values())
            if bucket.mem_segments is not None:
                total += sum(sys.getsizeof(t) + sys.getsizeof(p) for t, p in bucket.mem_segments)
        return total + (self._wide.memory_bytes if self._wide else 0)

    @property
    def pending_loads(self) -> int:
        """Segments being loaded (on_due follows when they make something due)."""
        return len(self._loading)

    @property
    def immutable_ranges(self) -> list[tuple[int, int]]:
        """(start, end) ledger ranges of the immutable buckets (tests, internal stats)."""
        return [(b.start_ledger, b.end_ledger) for b in self._buckets]

    @property
    def sealed_until_ledger(self) -> int:
        """End ledger of the last immutable bucket, -1 if none."""
        return self._buckets[-1].end_ledger if self._buckets else -1

    async def wait_idle(self) -> None:
        """Wait for background snapshot work (tests and benchmarks)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
