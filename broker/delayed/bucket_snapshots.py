"""The snapshot lifecycle of the bucket tracker: seal, write, load, merge, delete, recover.

Theory of operation
-------------------
:class:`BucketSnapshots` is owned by the bucket tracker (:mod:`broker.delayed.bucket`), which
hands it the :class:`~broker.delayed.bucket_records.SealedBuckets` they share, the cursor and
the snapshot store (:mod:`broker.delayed.ports`), and a narrow
:class:`~broker.delayed.ports.BucketEvents` to report background changes. It never sees the
mutable bucket or the hand-out logic.

- **seal**: the tracker passes the mutable bucket's columns and membership; a new
  :class:`~broker.delayed.bucket_records.ImmutableBucket` serves from memory at once while its
  snapshot is encoded (executor thread) and written (async). Once durable the snapshot id is
  recorded in the cursor property ``#pulsar.internal.delayed.bucket_<start>_<end>`` (Pulsar's
  key), the cursor is flushed and the in-memory segments are dropped. A failed create is
  retried with capped exponential backoff (``CREATE_RETRY_*``); meanwhile the bucket keeps
  serving from memory;
- **load**: when a bucket's loaded segment runs dry the next one is loaded in the background
  (the bucket sits in ``loading`` meanwhile: the barrier); a failed load is retried. A segment
  whose first time is past the *horizon* (the tracker's cutoff plus :data:`PRELOAD_MS`) is not
  loaded but *parked* (:meth:`SealedBuckets.park`): it stays on disk, its first time is a
  barrier like a load in flight, and :meth:`unpark` loads it once the horizon reaches it. So
  memory holds only segments due soon, whatever the number of buckets: with fixed delays one
  bucket at a time, with delays spread over months one segment per bucket whose turn came.
  Of a loaded segment only the indexes due by the horizon plus another :data:`PRELOAD_MS` are
  kept (``bucket.skip`` counts what was taken, and the segment's first time becomes that of
  the rest): the rest is read again when its turn comes, so a segment of 5 minutes of dense
  deliver times is not held whole;
- **delete**: a bucket whose pending set is empty is retired (``events.on_bucket_retired``),
  its property removed and flushed, then its snapshot deleted;
- **merge**: past ``delayedDeliveryMaxNumBuckets`` (> 0) the two adjacent persisted buckets with
  the fewest pending indexes are merged into one new snapshot; the property of the merged range
  is written before the two old ones are removed, so a crash in between leaves a range that
  encloses others, which recovery resolves;
- **recover**: read the bucket keys from the cursor properties (a range enclosed by another is
  the leftover of an interrupted merge and is deleted), load each metadata and the first segment
  of each bucket, drop what the mark-delete position already covers.

IO runs in background tasks (counted in ``op_count`` / ``op_latency_buckets``); everything else
runs on the event loop thread. What merge and recovery decide about bucket records (which pair,
the merged bucket, which ranges are live, a bucket rebuilt from its metadata) are the pure
functions of :mod:`broker.delayed.bucket_rebuild`.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import time
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Coroutine
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, Final

from pyroaring import BitMap

from broker.delayed.bucket_rebuild import (
    cheapest_pair,
    live_ranges,
    merged_bucket,
    recovered_bucket,
)
from broker.delayed.bucket_records import (
    ImmutableBucket,
    LoadedSegment,
    SealedBuckets,
)
from broker.delayed.packed import POSITION_BITS, POSITION_MASK
from broker.delayed.ports import BucketCursor, BucketEvents, SnapshotStorage
from broker.delayed.snapshot_format import (
    DecodedSegment,
    RawSegment,
    cut_columns,
    cut_segments,
    decode_metadata,
    decode_segment,
    encode_snapshot,
    raw_to_decoded,
)
from storage.errors import SnapshotNotFoundError

log = logging.getLogger("horae.delayed.bucket_snapshots")

OP_TYPES: Final = ("create", "load", "delete", "merge")
OP_STATES: Final = ("succeed", "failed")
LATENCY_BOUNDS_MS: Final = (50, 100, 500, 1000, 5000, 30000, 60000)

#: A segment is loaded once its first deliver time is within this of the tracker's cutoff
#: (loads take milliseconds; the margin keeps them ahead of the due time under load).
PRELOAD_MS: Final = 30_000


@dataclass(frozen=True, slots=True)
class RetryDelays:
    """Seconds between attempts: a failed segment load is retried every ``load_s``; a failed
    snapshot create after ``create_first_s``, doubling up to ``create_max_s``."""

    load_s: float = 1.0
    create_first_s: float = 1.0
    create_max_s: float = 60.0


class BucketSnapshots:
    """Seal, persist, load, merge, delete and recover the immutable buckets."""

    def __init__(self, *, buckets: SealedBuckets, cursor: BucketCursor,
                 store: SnapshotStorage, events: BucketEvents,
                 loop: asyncio.AbstractEventLoop, executor: Executor | None,
                 time_step_ms: int, max_indexes_per_segment: int, max_num_buckets: int,
                 horizon: Callable[[], int], retry: RetryDelays | None = None) -> None:
        self._buckets = buckets
        self._horizon = horizon
        self._cursor = cursor
        self._store = store
        self._events = events
        self._loop = loop
        self._executor = executor
        self._time_step_ms = time_step_ms
        self._max_indexes_per_segment = max_indexes_per_segment
        self._max_num_buckets = max_num_buckets
        self._retry = retry or RetryDelays()
        self._wake_on_close = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._merge_task: asyncio.Task[None] | None = None
        self._loads_in_flight: set[ImmutableBucket] = set()   # a segment read is running
        self._closed = False
        self.snapshot_size_bytes = 0
        self.op_count: dict[tuple[str, str], int] = {
            (t, s): 0 for t in OP_TYPES for s in OP_STATES}
        self.op_latency_buckets: dict[str, list[int]] = {
            t: [0] * (len(LATENCY_BOUNDS_MS) + 1) for t in OP_TYPES}
        self.op_latency_sum_ms: dict[str, float] = {t: 0.0 for t in OP_TYPES}

    # --- plumbing --------------------------------------------------------------------------

    def _record(self, op: str, ok: bool, started: float | None = None) -> None:
        self.op_count[(op, "succeed" if ok else "failed")] += 1
        if ok and started is not None:
            elapsed_ms = (time.monotonic() - started) * 1000.0
            self.op_latency_buckets[op][bisect_left(LATENCY_BOUNDS_MS, elapsed_ms)] += 1
            self.op_latency_sum_ms[op] += elapsed_ms

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = self._loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    @property
    def busy(self) -> bool:
        return bool(self._tasks)

    async def wait_idle(self) -> None:
        """Wait for background snapshot work (tests and benchmarks)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def close(self) -> None:
        self._closed = True
        self._wake_on_close.set()           # a create waiting to retry gives up now
        await self.wait_idle()

    async def _pause(self, seconds: float) -> None:
        """Sleep, cut short by :meth:`close`."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake_on_close.wait(), seconds)

    async def _flush_cursor(self) -> None:
        try:
            await self._cursor.flush()
        except Exception:
            log.exception("flushing cursor properties failed")

    def _snapshot_size(self, snapshot_id: int) -> int:
        try:
            return int(self._store.size_bytes(snapshot_id))
        except Exception:
            return 0

    # --- segments ----------------------------------------------------------------------------

    def segment_done(self, loaded: LoadedSegment) -> None:
        """A loaded segment ran dry: load the bucket's next one, or retire the bucket."""
        bucket = loaded.bucket
        loaded.dead = True
        if bucket.loaded is loaded:
            bucket.loaded = None
        if bucket.alive:
            self.advance(bucket)

    def advance(self, bucket: ImmutableBucket) -> None:
        """The bucket has no segment in memory: load the next one, or retire the bucket."""
        if bucket.remaining <= 0 or not bucket.has_unloaded_segments():
            if not bucket.merging:
                self.finish(bucket)
            return
        if bucket.next_min_ts > self._horizon():
            self._buckets.park(bucket)
        elif bucket.mem_segments is not None:
            self._install(bucket, raw_to_decoded(bucket.mem_segments[bucket.next_segment - 1]))
        elif bucket not in self._loads_in_flight:
            self._buckets.loading[bucket] = bucket.next_min_ts
            self._loads_in_flight.add(bucket)
            self._spawn(self._load_next(bucket))

    def unpark(self, horizon: int) -> None:
        """Load the parked segments whose first time is at or before ``horizon``."""
        for bucket in self._buckets.unpark_upto(horizon):
            if bucket.alive and bucket.loaded is None:
                self.advance(bucket)

    def _install(self, bucket: ImmutableBucket, segment: DecodedSegment) -> None:
        self._buckets.loading.pop(bucket, None)
        for packed in segment.cancels:
            self._apply_old_cancel(packed)      # idempotent: a segment may be read again
        if not bucket.alive:
            return
        ts, skip = segment.ts, bucket.skip
        horizon = self._horizon()
        if len(ts) > skip and ts[skip] > horizon:
            self._buckets.park(bucket)          # read early (recovery, merge): not kept
            return
        keep = bisect_right(ts, horizon + PRELOAD_MS, skip)
        if keep < len(ts):                      # the rest is read again when it comes near
            bucket.skip = keep
            bucket.segment_min_ts[bucket.next_segment - 1] = ts[keep]
        else:
            bucket.skip = 0
            bucket.next_segment += 1
        if keep == skip:
            self.advance(bucket)
        elif skip == 0 and keep == len(ts):
            self._buckets.push_loaded(bucket, segment)
        else:
            self._buckets.push_loaded(bucket, DecodedSegment(ts[skip:keep],
                                                             segment.pos[skip:keep], []))

    def _apply_old_cancel(self, packed: int) -> None:
        """A CANCEL index in a segment (snapshots of an older Horae put them first in segment 1;
        cancels now live in the cancel journal): clear its target."""
        target = self._buckets.take(packed >> POSITION_BITS, packed & POSITION_MASK)
        if target is not None and target.remaining <= 0 and not target.merging:
            self.finish(target)

    def bucket_emptied(self, bucket: ImmutableBucket) -> None:
        """The tracker cleared the last pending index of a bucket (cancel)."""
        if bucket.remaining <= 0 and not bucket.merging:
            self.finish(bucket)

    async def _fetch_segment(self, bucket: ImmutableBucket, number: int) -> DecodedSegment:
        assert bucket.snapshot_id is not None
        started = time.monotonic()
        try:
            segment = decode_segment(await self._store.load_segment(bucket.snapshot_id, number))
        except Exception:
            self._record("load", False)
            raise
        self._record("load", True, started)
        return segment

    async def _load_next(self, bucket: ImmutableBucket) -> None:
        number, skip = bucket.next_segment, bucket.skip
        try:
            segment = await self._fetch_segment(bucket, number)
        except Exception:
            log.exception("loading segment %d of delayed bucket %s failed; retrying", number,
                          bucket.key)
            self._loads_in_flight.discard(bucket)
            if bucket.alive and not self._closed:
                self._loop.call_later(self._retry.load_s, self._retry_load, bucket)
            return
        self._loads_in_flight.discard(bucket)
        if (not bucket.alive or self._closed or bucket.next_segment != number
                or bucket.skip != skip):
            self._buckets.loading.pop(bucket, None)
            return
        self._install(bucket, segment)
        self._events.on_background_change()

    def _retry_load(self, bucket: ImmutableBucket) -> None:
        if bucket.alive and not self._closed and bucket.loaded is None:
            self.advance(bucket)

    # --- seal and persist ------------------------------------------------------------------

    def seal(self, start_ledger: int, end_ledger: int, ts_col: array[int], pos_col: array[int],
             members: dict[int, BitMap]) -> None:
        """Turn the mutable bucket's content into an immutable bucket (time-ordered columns,
        stale indexes already filtered); the snapshot is written in the background."""
        segments = cut_columns(ts_col, pos_col, self._time_step_ms,
                               self._max_indexes_per_segment)
        bucket = ImmutableBucket(start_ledger, end_ledger)
        bucket.indexed = members
        bucket.pending = {ledger_id: bm.copy() for ledger_id, bm in members.items()}
        bucket.remaining = len(ts_col)
        bucket.segment_min_ts = array("q", (seg[0][0] for seg in segments))
        bucket.mem_segments = segments
        self._buckets.insert(bucket)
        self.advance(bucket)
        self._spawn(self._persist(bucket, segments))

    async def _encode(self, segments: list[RawSegment]) -> tuple[bytes, list[bytes]]:
        return await self._loop.run_in_executor(self._executor, encode_snapshot, segments, [])

    async def _persist(self, bucket: ImmutableBucket, segments: list[RawSegment]) -> None:
        delay = self._retry.create_first_s
        while True:
            started = time.monotonic()
            try:
                metadata, parts = await self._encode(segments)
                snapshot_id = await self._store.create(metadata, parts)
                break
            except Exception:
                # Keep serving the bucket from memory meanwhile; a restart before it is durable
                # re-reads its ledgers, since no cursor property names it.
                log.exception("creating the snapshot of delayed bucket %s failed; retrying in "
                              "%.0f s", bucket.key, delay)
                self._record("create", False)
            await self._pause(delay)
            delay = min(delay * 2, self._retry.create_max_s)
            if not bucket.alive or self._closed:
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

    # --- retire and delete -----------------------------------------------------------------

    def finish(self, bucket: ImmutableBucket) -> None:
        """Retire a bucket: fully handed out (or cancelled); delete its snapshot."""
        if not bucket.alive:
            return
        self._buckets.remove(bucket)
        bucket.remaining = 0
        self._events.on_bucket_retired(bucket)
        if bucket.snapshot_id is not None:
            self._spawn(self._delete_snapshot(bucket.snapshot_id, bucket))

    async def _delete_snapshot(self, snapshot_id: int, bucket: ImmutableBucket | None) -> None:
        started = time.monotonic()
        try:
            if bucket is not None:
                if bucket.key in self._cursor.properties:
                    self._cursor.remove_property(bucket.key)
                    await self._flush_cursor()
                self.snapshot_size_bytes -= bucket.snapshot_size
            await self._store.delete(snapshot_id)
        except Exception:
            log.exception("deleting delayed bucket snapshot %d failed", snapshot_id)
            self._record("delete", False)
            return
        self._record("delete", True, started)

    def clear(self) -> None:
        """Retire every bucket (cursor reset / clear backlog): snapshots are deleted."""
        for bucket in self._buckets:
            bucket.remaining = 0
            self.finish(bucket)
        self._buckets.clear()

    # --- merge -----------------------------------------------------------------------------

    def _maybe_merge(self) -> None:
        if (self._closed or self._max_num_buckets <= 0
                or len(self._buckets) <= self._max_num_buckets
                or (self._merge_task is not None and not self._merge_task.done())):
            return
        best = cheapest_pair(self._buckets.pairs())
        if best is not None:
            best[0].begin_merge()
            best[1].begin_merge()
            self._merge_task = self._spawn(self._merge(*best))

    async def _remaining_items(self, bucket: ImmutableBucket) -> list[tuple[int, int]]:
        """Every index of the bucket not handed out yet, in time order."""
        items: list[tuple[int, int]] = []
        parts: list[tuple[array[int], array[int]]] = []
        if bucket.loaded is not None and not bucket.loaded.dead:
            loaded = bucket.loaded
            parts.append((loaded.ts[loaded.i:], loaded.pos[loaded.i:]))
        first, skip = bucket.next_segment, bucket.skip     # the part of `first` not loaded
        for number in range(first, len(bucket.segment_min_ts) + 1):
            if bucket.mem_segments is not None:
                ts_col, pos_col = bucket.mem_segments[number - 1]
            else:
                segment = await self._fetch_segment(bucket, number)
                ts_col, pos_col = segment.ts, segment.pos
            start = skip if number == first else 0
            parts.append((ts_col[start:], pos_col[start:]))
        for ts_col, pos_col in parts:
            for ts, packed in zip(ts_col, pos_col, strict=True):
                if bucket.is_pending(packed >> POSITION_BITS, packed & POSITION_MASK):
                    items.append((ts, packed))
        return items

    async def _merge(self, a: ImmutableBucket, b: ImmutableBucket) -> None:
        started = time.monotonic()
        try:
            items = list(heapq.merge(await self._remaining_items(a),
                                     await self._remaining_items(b)))
            segments = cut_segments(items, self._time_step_ms, self._max_indexes_per_segment)
            metadata, parts = await self._encode(segments)
            create_started = time.monotonic()
            try:
                snapshot_id = await self._store.create(metadata, parts)
            except Exception:
                self._record("create", False)
                raise
            self._record("create", True, create_started)
        except Exception:
            log.exception("merging delayed buckets %s and %s failed", a.key, b.key)
            self._record("merge", False)
            a.end_merge()
            b.end_merge()
            return
        a.end_merge()
        b.end_merge()
        if not (a.alive and b.alive) or self._closed:
            await self._delete_snapshot(snapshot_id, None)
            self._record("merge", False)
            for old in (a, b):
                if old.alive and old.remaining <= 0:
                    self.finish(old)
            return
        merged = merged_bucket(a, b, array("q", (seg[0][0] for seg in segments)), snapshot_id,
                               self._snapshot_size(snapshot_id))
        for old in (a, b):
            self._buckets.remove(old)
        self._buckets.insert(merged)
        self.snapshot_size_bytes += merged.snapshot_size
        self._cursor.set_property(merged.key, str(snapshot_id))
        if segments:
            self._install(merged, raw_to_decoded(segments[0]))
        if merged.remaining <= 0:
            self.finish(merged)
        for old in (a, b):
            self._cursor.remove_property(old.key)
        await self._flush_cursor()
        for old in (a, b):
            if old.snapshot_id is not None:
                self._spawn(self._delete_snapshot(old.snapshot_id, old))
        self._record("merge", True, started)
        self._events.on_background_change()
        self._maybe_merge()

    # --- recovery --------------------------------------------------------------------------

    async def recover(self) -> None:
        """Rebuild the immutable buckets from the cursor properties (module docstring)."""
        kept, stale = live_ranges(self._cursor.properties)
        for _, _, _, key in stale:  # leftovers of an interrupted merge
            self._cursor.remove_property(key)
        dropped = bool(stale)
        live_ids = {item[2] for item in kept}
        for _, _, snapshot_id, _ in stale:
            if snapshot_id not in live_ids:
                self._spawn(self._delete_snapshot(snapshot_id, None))
        for start, end, snapshot_id, key in kept:
            bucket = await self._recover_bucket(start, end, snapshot_id, key)
            if bucket is None:
                dropped = dropped or key not in self._cursor.properties
                continue
            self._buckets.insert(bucket)
            self.snapshot_size_bytes += bucket.snapshot_size
        dropped = await self._load_first_segments() or dropped
        for bucket in self._buckets:
            if bucket.remaining <= 0:
                self.finish(bucket)
        if dropped:
            await self._flush_cursor()

    async def _recover_bucket(self, start: int, end: int, snapshot_id: int,
                              key: str) -> ImmutableBucket | None:
        started = time.monotonic()
        try:
            infos = decode_metadata(await self._store.load_metadata(snapshot_id))
        except SnapshotNotFoundError:
            log.warning("delayed bucket %s: snapshot %d is gone", key, snapshot_id)
            self._cursor.remove_property(key)
            return None
        except Exception:
            log.exception("delayed bucket %s: loading snapshot %d failed", key, snapshot_id)
            self._record("load", False)
            return None
        self._record("load", True, started)
        return recovered_bucket(start, end, snapshot_id, self._snapshot_size(snapshot_id), infos,
                                self._cursor.mark_delete_position)

    async def _load_first_segments(self) -> bool:
        """First segments only once every bucket is known, so CANCELs find their targets.
        True when a bucket had to be dropped (its property removed)."""
        dropped = False
        buckets = list(self._buckets)
        results = await asyncio.gather(*(self._fetch_segment(b, 1) for b in buckets),
                                       return_exceptions=True)
        for bucket, result in zip(buckets, results, strict=True):
            if isinstance(result, SnapshotNotFoundError):
                log.warning("delayed bucket %s: snapshot %s is incomplete", bucket.key,
                            bucket.snapshot_id)
                self._cursor.remove_property(bucket.key)
                bucket.snapshot_id = None
                self.finish(bucket)
                dropped = True
                continue
            if isinstance(result, BaseException):
                log.error("delayed bucket %s: loading its first segment failed: %r",
                          bucket.key, result)
                self._loop.call_later(self._retry.load_s, self._retry_load, bucket)
                continue
            if bucket.alive:
                self._install(bucket, result)
        return dropped
