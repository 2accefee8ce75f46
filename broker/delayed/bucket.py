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
- only the current segment of each immutable bucket is in memory (sorted packed columns). A
  heap of those segments (keyed by their head time) plus the mutable bucket and an in-memory
  ``extra`` index form the shared priority queue. When a bucket's segment runs dry its next
  segment is loaded asynchronously; until it arrives nothing later than that segment's first
  time is handed out (the *barrier*), so delivery stays in deliver-time order;
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
  ``memory_bytes``        pulsar_delayed_message_index_size_bytes
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import sys
import time
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any

from pyroaring import BitMap

from broker.delayed.packed import (
    POSITION_BITS,
    POSITION_MASK,
    PackedTimeIndex,
    WideIndex,
    bitmap_bytes,
    fits,
)
from broker.delayed.snapshot_format import (
    DecodedSegment,
    RawSegment,
    cut_segments,
    decode_metadata,
    decode_segment,
    encode_snapshot,
    raw_to_decoded,
)
from broker.delayed.tracker import DeadlineTimer, DelayedDeliveryTracker, wall_clock_ms
from storage.errors import SnapshotNotFoundError
from storage.positions import Position

log = logging.getLogger(__name__)

BUCKET_KEY_PREFIX = "#pulsar.internal.delayed.bucket"
OP_TYPES = ("create", "load", "delete", "merge")
OP_STATES = ("succeed", "failed")
LATENCY_BOUNDS_MS = (50, 100, 500, 1000, 5000, 30000, 60000)
LOAD_RETRY_SECONDS = 1.0


def bucket_key(start_ledger: int, end_ledger: int) -> str:
    return f"{BUCKET_KEY_PREFIX}_{start_ledger}_{end_ledger}"


def parse_bucket_key(key: str) -> tuple[int, int] | None:
    if not key.startswith(BUCKET_KEY_PREFIX + "_"):
        return None
    parts = key[len(BUCKET_KEY_PREFIX) + 1:].split("_")
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        return None
    return int(parts[0]), int(parts[1])


class _Bucket:
    """An immutable bucket: ledgers [start_ledger, end_ledger], one snapshot."""

    __slots__ = ("alive", "cancel_ops", "end_ledger", "indexed", "loaded", "loading",
                 "mem_segments", "merging", "next_segment", "pending", "persist_task",
                 "remaining", "segment_min_ts", "snapshot_id", "snapshot_size", "start_ledger")

    def __init__(self, start_ledger: int, end_ledger: int) -> None:
        self.start_ledger = start_ledger
        self.end_ledger = end_ledger
        self.snapshot_id: int | None = None
        self.snapshot_size = 0
        self.indexed: dict[int, BitMap] = {}
        self.pending: dict[int, BitMap] = {}
        self.remaining = 0                      # pending indexes (sum of pending cardinalities)
        self.segment_min_ts: list[int] = []     # per segment 1..N
        self.next_segment = 1                   # next segment number to load
        self.mem_segments: list[RawSegment] | None = None   # until the snapshot is durable
        self.cancel_ops: list[int] = []         # packed targets this snapshot cancels
        self.loaded: _Loaded | None = None
        self.loading = False
        self.merging = False
        self.alive = True
        self.persist_task: asyncio.Task[None] | None = None

    @property
    def key(self) -> str:
        return bucket_key(self.start_ledger, self.end_ledger)

    def is_pending(self, ledger_id: int, entry_id: int) -> bool:
        bm = self.pending.get(ledger_id)
        return bm is not None and entry_id in bm

    def take(self, ledger_id: int, entry_id: int) -> bool:
        """Clear a pending bit; True if it was set."""
        bm = self.pending.get(ledger_id)
        if bm is None or entry_id not in bm:
            return False
        bm.remove(entry_id)
        self.remaining -= 1
        return True


class _Loaded:
    """The in-memory segment of a bucket: sorted packed columns and a read offset."""

    __slots__ = ("bucket", "dead", "i", "pos", "seq", "ts")

    def __init__(self, bucket: _Bucket, segment: DecodedSegment, seq: int) -> None:
        self.bucket = bucket
        self.ts = segment.ts
        self.pos = segment.pos
        self.i = 0
        self.seq = seq
        self.dead = False


class BucketDelayedDeliveryTracker(DelayedDeliveryTracker):
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
        self._clock_ms = clock_ms or wall_clock_ms
        self._tick_ms = tick_time_ms
        self._strict = strict
        self._on_due = on_due
        self._min_index_count = max(min_index_count_per_bucket, 1)
        self._time_step_ms = time_step_per_segment_ms
        self._max_indexes_per_segment = max_indexes_per_segment
        self._max_num_buckets = max_num_buckets
        self._executor = executor
        self._timer = DeadlineTimer(loop, self._clock_ms, tick_time_ms, self._on_timer)
        # the last mutable bucket
        self._mutable = PackedTimeIndex()
        self._mut_members: dict[int, BitMap] = {}
        self._mut_count = 0
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
        self._tasks: set[asyncio.Task[Any]] = set()
        self._merge_task: asyncio.Task[None] | None = None
        self._epoch = getattr(cursor, "revision", 0)
        self._closed = False
        # metrics
        self.snapshot_size_bytes = 0
        self.op_count: dict[tuple[str, str], int] = {
            (t, s): 0 for t in OP_TYPES for s in OP_STATES}
        self.op_latency_buckets: dict[str, list[int]] = {
            t: [0] * (len(LATENCY_BOUNDS_MS) + 1) for t in OP_TYPES}

    # --- bookkeeping -----------------------------------------------------------------------

    def _record(self, op: str, ok: bool, started: float | None = None) -> None:
        self.op_count[(op, "succeed" if ok else "failed")] += 1
        if ok and started is not None:
            elapsed_ms = (time.monotonic() - started) * 1000.0
            self.op_latency_buckets[op][bisect_left(LATENCY_BOUNDS_MS, elapsed_ms)] += 1

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task: asyncio.Task[Any] = self._loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _find_bucket(self, ledger_id: int) -> _Bucket | None:
        i = bisect_right(self._starts, ledger_id) - 1
        if i >= 0:
            bucket = self._buckets[i]
            if ledger_id <= bucket.end_ledger:
                return bucket
        return None

    def _insert_bucket(self, bucket: _Bucket) -> None:
        i = bisect_right(self._starts, bucket.start_ledger)
        self._buckets.insert(i, bucket)
        self._starts.insert(i, bucket.start_ledger)

    def _remove_bucket(self, bucket: _Bucket) -> None:
        i = self._buckets.index(bucket)
        del self._buckets[i], self._starts[i]

    def _is_deleted(self, ledger_id: int, entry_id: int) -> bool:
        check = getattr(self._cursor, "is_deleted", None)
        return bool(check is not None and check(Position(ledger_id, entry_id)))

    # --- time and timer --------------------------------------------------------------------

    def _cutoff(self) -> int:
        now = self._clock_ms()
        return now if self._strict else now + self._tick_ms

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

    def _update_timer(self) -> None:
        if self._closed:
            return
        head = self._head_ts()
        if head is None:
            self._timer.cancel()
        else:
            self._timer.update(head if self._strict else head - self._tick_ms)

    def _on_timer(self) -> None:
        if self.has_message_available():
            self._on_due()

    def _after_change(self) -> None:
        """Background work changed the index: re-aim the timer, wake the dispatcher if due."""
        if not self._closed and self.has_message_available():
            self._on_due()

    # --- add / cancel / contains -----------------------------------------------------------

    def add(self, ledger_id: int, entry_id: int, deliver_at_ms: int) -> bool:
        bucket = self._find_bucket(ledger_id) if self._buckets else None
        if bucket is not None:
            if bucket.is_pending(ledger_id, entry_id):
                return True
            if self._cursor_revision() == self._epoch:
                indexed = bucket.indexed.get(ledger_id)
                if indexed is not None and entry_id in indexed:
                    return True                 # handed out already since the last reset
        if deliver_at_ms < 0 or deliver_at_ms <= self._cutoff():
            return False
        if not fits(ledger_id, entry_id):
            self._wide.add(deliver_at_ms, ledger_id, entry_id)
            self._update_timer()
            return True
        packed = (ledger_id << POSITION_BITS) | entry_id
        if (bucket is not None or ledger_id <= self.sealed_until_ledger
                or (self._mut_count and ledger_id < self._mut_start)):
            # Sealed ledgers (or older than the mutable bucket): in memory only, so bucket
            # ranges never overlap. A restart re-reads these entries anyway.
            if self._member_add(self._extra_members, ledger_id, entry_id):
                self._extra.push(deliver_at_ms, packed)
                self._extra_count += 1
        else:
            bm = self._mut_members.get(ledger_id)
            if bm is not None and entry_id in bm:
                return True
            if self._mut_count >= self._min_index_count and ledger_id > self._mut_end:
                self._seal()
            if self._mut_count == 0:
                self._mutable.clear()           # stale leftovers only
                self._mut_members.clear()
                self._mut_start = ledger_id
            self._member_add(self._mut_members, ledger_id, entry_id)
            self._mutable.push(deliver_at_ms, packed)
            self._mut_count += 1
            if ledger_id > self._mut_end:
                self._mut_end = ledger_id
        target = self._timer.target_ms
        if target is None or deliver_at_ms - (0 if self._strict else self._tick_ms) < target:
            self._update_timer()
        return True

    def _cursor_revision(self) -> int:
        return int(getattr(self._cursor, "revision", 0))

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
        elif self._member_take(self._extra_members, ledger_id, entry_id):
            self._extra_count -= 1
        else:
            return False
        self._update_timer()
        return True

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
        limit_ts = self._cutoff()
        barrier = self._barrier()
        if barrier is not None and barrier < limit_ts:
            limit_ts = barrier
        out: list[tuple[int, int]] = []
        buf: list[int] = []
        heap = self._heap
        while len(out) < max_messages:
            top = self._heap_top()
            heads = (self._mutable.peek_ts(), self._extra.peek_ts(),
                     top.ts[top.i] if top is not None else None)
            kind = -1
            best = 0
            for k, head in enumerate(heads):
                if head is not None and (kind < 0 or head < best):
                    kind, best = k, head
            if kind < 0 or best > limit_ts:
                break
            # Take a run from the best source up to the next head of any other source.
            bound = limit_ts
            for k, head in enumerate(heads):
                if k != kind and head is not None and head < bound:
                    bound = head
            if kind == 2:
                for j in (1, 2):
                    if len(heap) > j and heap[j][0] < bound:
                        bound = heap[j][0]
            bound = max(bound, best)
            need = max_messages - len(out)
            if kind == 2:
                assert top is not None
                self._take_segment(top, bound, need, out)
            elif kind == 0:
                buf.clear()
                self._mutable.pop_upto(bound, need, buf)
                self._mut_count -= self._take_members(buf, self._mut_members, out)
            else:
                buf.clear()
                self._extra.pop_upto(bound, need, buf)
                self._extra_count -= self._take_members(buf, self._extra_members, out)
        if len(out) < max_messages and self._wide:
            self._wide.pop_due(limit_ts, max_messages - len(out), out)
        out.sort()
        self._update_timer()
        return out

    @staticmethod
    def _take_members(buf: list[int], members: dict[int, BitMap],
                      out: list[tuple[int, int]]) -> int:
        taken = 0
        for packed in buf:
            ledger_id = packed >> POSITION_BITS
            entry_id = packed & POSITION_MASK
            bm = members.get(ledger_id)
            if bm is not None and entry_id in bm:
                bm.remove(entry_id)
                if not bm:
                    del members[ledger_id]
                out.append((ledger_id, entry_id))
                taken += 1
        return taken

    def _take_segment(self, loaded: _Loaded, bound: int, need: int,
                      out: list[tuple[int, int]]) -> None:
        ts, pos, i = loaded.ts, loaded.pos, loaded.i
        end = min(bisect_right(ts, bound, i), i + need)
        bucket = loaded.bucket
        for k in range(i, end):
            packed = pos[k]
            ledger_id = packed >> POSITION_BITS
            entry_id = packed & POSITION_MASK
            if not bucket.take(ledger_id, entry_id):
                continue
            self._sealed_remaining -= 1
            if self._is_deleted(ledger_id, entry_id):
                continue                        # acknowledged before a restart
            out.append((ledger_id, entry_id))
        loaded.i = end
        if end == len(ts):
            heapq.heappop(self._heap)           # loaded is the top
            self._segment_done(loaded)
        else:
            heapq.heapreplace(self._heap, (ts[end], loaded.seq, loaded))

    def _segment_done(self, loaded: _Loaded) -> None:
        bucket = loaded.bucket
        loaded.dead = True
        if bucket.loaded is loaded:
            bucket.loaded = None
        if bucket.alive:
            self._advance_bucket(bucket)

    def _advance_bucket(self, bucket: _Bucket) -> None:
        """The bucket has no segment in memory: load the next one, or retire the bucket."""
        if bucket.remaining <= 0 or bucket.next_segment > len(bucket.segment_min_ts):
            if not bucket.merging:
                self._finish_bucket(bucket)
            return
        if bucket.mem_segments is not None:
            number = bucket.next_segment
            self._install(bucket, raw_to_decoded(bucket.mem_segments[number - 1]))
        elif not bucket.loading:
            self._loading[bucket] = bucket.segment_min_ts[bucket.next_segment - 1]
            bucket.loading = True
            self._spawn(self._load_next(bucket))

    def _install(self, bucket: _Bucket, segment: DecodedSegment) -> None:
        bucket.next_segment += 1
        self._loading.pop(bucket, None)
        for packed in segment.cancels:
            self._apply_cancel(packed)
        if not bucket.alive:
            return
        if len(segment.ts) == 0:
            self._advance_bucket(bucket)
            return
        loaded = _Loaded(bucket, segment, next(self._seq))
        bucket.loaded = loaded
        heapq.heappush(self._heap, (segment.ts[0], loaded.seq, loaded))

    def _apply_cancel(self, packed: int) -> None:
        ledger_id, entry_id = packed >> POSITION_BITS, packed & POSITION_MASK
        target = self._find_bucket(ledger_id)
        if target is not None and target.take(ledger_id, entry_id):
            self._sealed_remaining -= 1
            if target.remaining <= 0 and not target.merging:
                self._finish_bucket(target)

    async def _fetch_segment(self, bucket: _Bucket, number: int) -> DecodedSegment:
        started = time.monotonic()
        try:
            data = await self._snapshots.load_segment(bucket.snapshot_id, number)
            segment = decode_segment(data)
        except Exception:
            self._record("load", False)
            raise
        self._record("load", True, started)
        return segment

    async def _load_next(self, bucket: _Bucket) -> None:
        number = bucket.next_segment
        try:
            segment = await self._fetch_segment(bucket, number)
        except Exception:
            log.exception("loading segment %d of delayed bucket %s failed; retrying", number,
                          bucket.key)
            bucket.loading = False
            if bucket.alive and not self._closed:
                self._loop.call_later(LOAD_RETRY_SECONDS, self._retry_load, bucket)
            return
        bucket.loading = False
        if not bucket.alive or self._closed or bucket.next_segment != number:
            self._loading.pop(bucket, None)
            return
        self._install(bucket, segment)
        self._after_change()

    def _retry_load(self, bucket: _Bucket) -> None:
        if bucket.alive and not self._closed and bucket.loaded is None:
            self._advance_bucket(bucket)

    # --- sealing, persisting, deleting -------------------------------------------------------

    def _seal(self) -> None:
        members = self._mut_members
        seen: set[int] = set()
        items: list[tuple[int, int]] = []
        for ts, packed in self._mutable.items():
            bm = members.get(packed >> POSITION_BITS)
            if bm is not None and (packed & POSITION_MASK) in bm and packed not in seen:
                seen.add(packed)
                items.append((ts, packed))
        segments = cut_segments(items, self._time_step_ms, self._max_indexes_per_segment)
        bucket = _Bucket(self._mut_start, self._mut_end)
        bucket.indexed = members
        bucket.pending = {ledger_id: bm.copy() for ledger_id, bm in members.items()}
        bucket.remaining = len(items)
        bucket.segment_min_ts = [seg[0][0] for seg in segments]
        bucket.mem_segments = segments
        bucket.cancel_ops = self._live_cancels(self._pending_cancels)
        self._pending_cancels = []
        self._insert_bucket(bucket)
        self._sealed_remaining += bucket.remaining
        self._mutable = PackedTimeIndex()
        self._mut_members = {}
        self._mut_count = 0
        self._mut_start = self._mut_end = -1
        self._advance_bucket(bucket)
        bucket.persist_task = self._spawn(self._persist(bucket, segments, bucket.cancel_ops))

    def _live_cancels(self, cancels: list[int]) -> list[int]:
        """CANCEL targets still worth persisting: their bucket lives."""
        out = []
        for packed in cancels:
            target = self._find_bucket(packed >> POSITION_BITS)
            if target is not None and target.alive:
                out.append(packed)
        return out

    async def _encode(self, segments: list[RawSegment], cancels: list[int]
                      ) -> tuple[bytes, list[bytes]]:
        return await self._loop.run_in_executor(self._executor, encode_snapshot, segments,
                                                list(cancels))

    async def _persist(self, bucket: _Bucket, segments: list[RawSegment],
                       cancels: list[int]) -> None:
        started = time.monotonic()
        try:
            metadata, parts = await self._encode(segments, cancels)
            snapshot_id = await self._snapshots.create(metadata, parts)
        except Exception:
            # Keep serving the bucket from memory; it is just not durable (a restart re-reads
            # its ledgers since no cursor property names it).
            log.exception("creating the snapshot of delayed bucket %s failed", bucket.key)
            self._record("create", False)
            return
        self._record("create", True, started)
        if not bucket.alive:
            await self._delete_snapshot(snapshot_id, None)
            return
        bucket.snapshot_id = snapshot_id
        bucket.snapshot_size = self._snapshot_size(snapshot_id)
        self.snapshot_size_bytes += bucket.snapshot_size
        bucket.mem_segments = None
        self._cursor.set_property(bucket.key, str(snapshot_id))
        await self._flush_cursor()
        self._maybe_merge()

    def _snapshot_size(self, snapshot_id: int) -> int:
        try:
            return int(self._snapshots.size_bytes(snapshot_id))
        except Exception:
            return 0

    async def _flush_cursor(self) -> None:
        try:
            await self._cursor.flush()
        except Exception:
            log.exception("flushing cursor properties failed")

    def _finish_bucket(self, bucket: _Bucket) -> None:
        """Retire a bucket: fully scheduled (or cancelled); delete its snapshot."""
        if not bucket.alive:
            return
        bucket.alive = False
        if bucket.loaded is not None:
            bucket.loaded.dead = True
            bucket.loaded = None
        self._loading.pop(bucket, None)
        self._remove_bucket(bucket)
        self._sealed_remaining -= max(bucket.remaining, 0)
        bucket.remaining = 0
        self._pending_cancels = self._live_cancels(self._pending_cancels + bucket.cancel_ops)
        if bucket.snapshot_id is not None:
            self._spawn(self._delete_snapshot(bucket.snapshot_id, bucket))

    async def _delete_snapshot(self, snapshot_id: int, bucket: _Bucket | None) -> None:
        started = time.monotonic()
        try:
            if bucket is not None:
                if bucket.key in self._cursor.properties:
                    self._cursor.remove_property(bucket.key)
                    await self._flush_cursor()
                self.snapshot_size_bytes -= bucket.snapshot_size
            await self._snapshots.delete(snapshot_id)
        except Exception:
            log.exception("deleting delayed bucket snapshot %d failed", snapshot_id)
            self._record("delete", False)
            return
        self._record("delete", True, started)

    # --- merging -------------------------------------------------------------------------------

    def _maybe_merge(self) -> None:
        if (self._closed or self._max_num_buckets <= 0
                or len(self._buckets) <= self._max_num_buckets
                or (self._merge_task is not None and not self._merge_task.done())):
            return
        best: tuple[_Bucket, _Bucket] | None = None
        best_n = 0
        for a, b in itertools.pairwise(self._buckets):
            if a.merging or b.merging or a.snapshot_id is None or b.snapshot_id is None:
                continue
            n = a.remaining + b.remaining
            if best is None or n < best_n:
                best, best_n = (a, b), n
        if best is not None:
            best[0].merging = best[1].merging = True
            self._merge_task = self._spawn(self._merge(*best))

    async def _remaining_items(self, bucket: _Bucket) -> list[tuple[int, int]]:
        """Every index of the bucket not handed out yet, in time order."""
        items: list[tuple[int, int]] = []
        parts: list[tuple[Any, Any]] = []
        if bucket.loaded is not None and not bucket.loaded.dead:
            loaded = bucket.loaded
            parts.append((loaded.ts[loaded.i:], loaded.pos[loaded.i:]))
        first = bucket.next_segment
        for number in range(first, len(bucket.segment_min_ts) + 1):
            if bucket.mem_segments is not None:
                parts.append(bucket.mem_segments[number - 1])
            else:
                segment = await self._fetch_segment(bucket, number)
                parts.append((segment.ts, segment.pos))
        for ts_col, pos_col in parts:
            for ts, packed in zip(ts_col, pos_col, strict=True):
                if bucket.is_pending(packed >> POSITION_BITS, packed & POSITION_MASK):
                    items.append((ts, packed))
        return items

    async def _merge(self, a: _Bucket, b: _Bucket) -> None:
        started = time.monotonic()
        try:
            items = list(heapq.merge(await self._remaining_items(a),
                                     await self._remaining_items(b)))
            segments = cut_segments(items, self._time_step_ms, self._max_indexes_per_segment)
            cancels = [c for c in a.cancel_ops + b.cancel_ops
                       if not a.start_ledger <= c >> POSITION_BITS <= b.end_ledger]
            metadata, parts = await self._encode(segments, cancels)
            snapshot_id = await self._snapshots.create(metadata, parts)
            self._record("create", True, started)
        except Exception:
            log.exception("merging delayed buckets %s and %s failed", a.key, b.key)
            self._record("merge", False)
            a.merging = b.merging = False
            return
        a.merging = b.merging = False
        if not (a.alive and b.alive) or self._closed:
            await self._delete_snapshot(snapshot_id, None)
            self._record("merge", False)
            for old in (a, b):
                if old.alive and old.remaining <= 0:
                    self._finish_bucket(old)
            return
        merged = _Bucket(a.start_ledger, b.end_ledger)
        merged.indexed = {**a.indexed, **b.indexed}
        merged.pending = {**a.pending, **b.pending}
        merged.remaining = a.remaining + b.remaining
        merged.segment_min_ts = [seg[0][0] for seg in segments]
        merged.snapshot_id = snapshot_id
        merged.snapshot_size = self._snapshot_size(snapshot_id)
        merged.cancel_ops = cancels
        for old in (a, b):
            old.alive = False
            if old.loaded is not None:
                old.loaded.dead = True
                old.loaded = None
            self._loading.pop(old, None)
            self._remove_bucket(old)
        self._insert_bucket(merged)
        self.snapshot_size_bytes += merged.snapshot_size
        self._cursor.set_property(merged.key, str(snapshot_id))
        if segments:
            self._install(merged, raw_to_decoded(segments[0]))
        if merged.remaining <= 0:
            self._finish_bucket(merged)
        for old in (a, b):
            self._cursor.remove_property(old.key)
        await self._flush_cursor()
        for old in (a, b):
            if old.snapshot_id is not None:
                self._spawn(self._delete_snapshot(old.snapshot_id, old))
        self._record("merge", True, started)
        self._after_change()
        self._maybe_merge()

    # --- recovery ------------------------------------------------------------------------------

    async def recover(self) -> None:
        found: list[tuple[int, int, int, str]] = []
        for key, value in self._cursor.properties.items():
            rng = parse_bucket_key(key)
            if rng is not None and value.isdigit():
                found.append((rng[0], rng[1], int(value), key))
        found.sort(key=lambda t: (t[0], -t[1]))
        kept: list[tuple[int, int, int, str]] = []
        dropped = False
        for item in found:
            if kept and item[0] <= kept[-1][1]:
                # Enclosed by (or overlapping) an earlier range: leftover of an interrupted merge.
                self._cursor.remove_property(item[3])
                self._spawn(self._delete_snapshot(item[2], None))
                dropped = True
                continue
            kept.append(item)
        md = self._cursor.mark_delete_position
        for start, end, snapshot_id, key in kept:
            started = time.monotonic()
            try:
                infos = decode_metadata(await self._snapshots.load_metadata(snapshot_id))
            except SnapshotNotFoundError:
                log.warning("delayed bucket %s: snapshot %d is gone", key, snapshot_id)
                self._cursor.remove_property(key)
                dropped = True
                continue
            except Exception:
                log.exception("delayed bucket %s: loading snapshot %d failed", key, snapshot_id)
                self._record("load", False)
                continue
            self._record("load", True, started)
            bucket = _Bucket(start, end)
            bucket.snapshot_id = snapshot_id
            bucket.snapshot_size = self._snapshot_size(snapshot_id)
            bucket.segment_min_ts = [info.min_ts for info in infos]
            for info in infos:
                for ledger_id, bm in info.bitmaps.items():
                    if ledger_id < md.ledger_id:
                        continue                # acknowledged cumulatively
                    if ledger_id == md.ledger_id and md.entry_id >= 0:
                        bm.remove_range(0, md.entry_id + 1)
                    have = bucket.indexed.get(ledger_id)
                    if have is None:
                        bucket.indexed[ledger_id] = bm
                    else:
                        have |= bm
            bucket.pending = {ledger_id: bm.copy() for ledger_id, bm in bucket.indexed.items()}
            bucket.remaining = sum(len(bm) for bm in bucket.pending.values())
            self._insert_bucket(bucket)
            self.snapshot_size_bytes += bucket.snapshot_size
            self._sealed_remaining += bucket.remaining
        # First segments only once every bucket is known, so CANCELs find their targets.
        buckets = list(self._buckets)
        results = await asyncio.gather(*(self._fetch_segment(b, 1) for b in buckets),
                                       return_exceptions=True)
        for bucket, result in zip(buckets, results, strict=True):
            if isinstance(result, BaseException):
                log.error("delayed bucket %s: loading its first segment failed: %r",
                          bucket.key, result)
                self._loop.call_later(LOAD_RETRY_SECONDS, self._retry_load, bucket)
                continue
            if bucket.alive:
                self._install(bucket, result)
        for bucket in list(self._buckets):
            if bucket.remaining <= 0:
                self._finish_bucket(bucket)
        if dropped:
            await self._flush_cursor()
        self._epoch = self._cursor_revision()
        self._after_change()

    # --- lifecycle -----------------------------------------------------------------------------

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

    def reset_tick_time(self, tick_ms: int) -> None:
        if tick_ms != self._tick_ms:
            self._tick_ms = tick_ms
            self._timer.tick_ms = tick_ms
            self._timer.cancel()
            self._update_timer()

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
        for bucket in self._buckets:
            total += 200
            total += sum(bitmap_bytes(bm) for bm in bucket.indexed.values())
            total += sum(bitmap_bytes(bm) for bm in bucket.pending.values())
            if bucket.mem_segments is not None:
                total += sum(sys.getsizeof(t) + sys.getsizeof(p) for t, p in bucket.mem_segments)
        return total + (self._wide.memory_bytes if self._wide else 0)

    @property
    def timer(self) -> DeadlineTimer:
        return self._timer

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
