"""Which segment of each immutable bucket is in memory: load, park, keep in part, retry.

Theory of operation
-------------------
:class:`SegmentLoader` is the reading side of the bucket tracker's snapshots (the writing side,
merges and recovery are :class:`~broker.delayed.bucket_snapshots.BucketSnapshots`, which owns
it). Every immutable bucket serves at most one segment at a time, in segment order:

- when a bucket's loaded segment runs dry (:meth:`segment_done`), its next one serves:
  installed on the spot when it was *read ahead*, else the bucket sits in
  ``SealedBuckets.loading`` until it is read (the barrier: nothing later than that segment's
  first time is handed out, so every message due meanwhile waits for a disk read); a failed
  load is retried every ``RetryDelays.load_s``, a failed read-ahead is read again when its
  turn comes;
- read ahead (:meth:`read_ahead`): when a segment is installed from a persisted snapshot, or
  the snapshot of a bucket serving from memory becomes durable, and the bucket's next segment
  is due within the horizon, that one is read in the background at once and kept in
  ``bucket.read_ahead`` (at most :data:`READ_AHEAD_JOBS` reads at a time, the one due soonest
  first); a next segment not due within the horizon yet, such as the rest of a segment kept
  in part, is read once the horizon reaches it;
- a segment whose first time is past the *horizon* (the tracker's cutoff plus
  :data:`PRELOAD_MS`) is not loaded but *parked* (``SealedBuckets.park``): it stays on disk,
  its first time is a barrier like a load in flight, and :meth:`unpark` loads it once the
  horizon reaches it. So memory holds only the segments due soon, whatever the number of
  buckets: with fixed delays one bucket at a time, with delays spread over months one segment
  per bucket whose turn came;
- of a loaded segment only the indexes due by the horizon plus another :data:`PRELOAD_MS` are
  kept (``bucket.skip`` counts what was taken, and the segment's first time becomes that of
  the rest); the rest is read again when its turn comes, so a segment of five minutes of dense
  deliver times is not held whole. Deliver times stay exact to the millisecond;
- a segment read early (recovery of a store of an older version reads every bucket's first
  segment to apply the CANCEL indexes its snapshots put there; a merge writes the merged
  bucket's first one) is parked again when it is not due soon. Applying a CANCEL twice is
  harmless;
- recovery of a store without such CANCELs (:meth:`load_first_segments`) puts every bucket in
  ``loading`` at its first time and reads first segments in the background, earliest first,
  a bounded number of read jobs at a time, each of many segments (one hand-off to the IO
  pool per batch, not per segment), parking those not due soon without reading them: the
  bucket due soonest is read alone first and serves after one read.

Segments in the packed layout (:mod:`broker.delayed.snapshot_format`) are decoded on the loop
when they are small (:data:`INLINE_DECODE_BYTES`: a copy of three arrays); protobuf segments of
older snapshots and large ones in the executor (parsing thousands of indexes is CPU work).

Until a bucket's snapshot is durable its segments are served from memory
(``bucket.mem_segments``) by the same rules. Everything runs on the event loop thread; reads
run as background tasks of the owner.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import time
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Callable, Coroutine
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, Final

from broker.delayed.bucket_records import ImmutableBucket, LoadedSegment, SealedBuckets
from broker.delayed.packed import POSITION_BITS, POSITION_MASK
from broker.delayed.ports import SnapshotStorage
from broker.delayed.snapshot_format import (
    DecodedSegment,
    decode_segment,
    is_packed_segment,
    raw_to_decoded,
)

log = logging.getLogger("horae.delayed.bucket_segments")

OP_TYPES: Final = ("create", "load", "delete", "merge")
OP_STATES: Final = ("succeed", "failed")
LATENCY_BOUNDS_MS: Final = (50, 100, 500, 1000, 5000, 30000, 60000)

#: A segment is loaded once its first deliver time is within this of the tracker's cutoff
#: (loads take milliseconds; the margin keeps them ahead of the due time under load).
PRELOAD_MS: Final = 30_000

#: A segment in the packed layout up to this size is decoded on the event loop (a copy of
#: three arrays: about a millisecond for 4 MB); a larger one, and every protobuf segment, in the
#: executor. So a segment read is one background job, not a read and then a decode.
INLINE_DECODE_BYTES: Final = 4 << 20

#: Read-aheads of next segments running at a time (each one read job in the IO pool).
READ_AHEAD_JOBS: Final = 4

#: While recovery loads first segments in the background, the tracker is told of new ones at
#: most this often (seconds; the first at once).
RECOVERY_NOTIFY_S: Final = 0.02


@dataclass(frozen=True, slots=True)
class RetryDelays:
    """Seconds between attempts: a failed segment load is retried every ``load_s``; a failed
    snapshot create after ``create_first_s``, doubling up to ``create_max_s``."""

    load_s: float = 1.0
    create_first_s: float = 1.0
    create_max_s: float = 60.0


#: A placeholder for a segment still to be decoded in the executor.
_PENDING_DECODE: Final = ValueError("not decoded yet")


def _decode_each(datas: list[bytes | Exception]) -> list[DecodedSegment | Exception]:
    """Decode segments (executor); an unreadable one is its error."""
    out: list[DecodedSegment | Exception] = []
    for data in datas:
        try:
            out.append(decode_segment(data) if isinstance(data, bytes) else data)
        except Exception as exc:
            out.append(exc)
    return out


class SnapshotOps:
    """Counts and latencies of the snapshot operations (Pulsar's bucket op metrics) and the
    bytes of the live snapshots."""

    __slots__ = ("op_count", "op_latency_buckets", "op_latency_sum_ms", "snapshot_size_bytes")

    def __init__(self) -> None:
        self.snapshot_size_bytes = 0
        self.op_count: dict[tuple[str, str], int] = {
            (t, s): 0 for t in OP_TYPES for s in OP_STATES}
        self.op_latency_buckets: dict[str, list[int]] = {
            t: [0] * (len(LATENCY_BOUNDS_MS) + 1) for t in OP_TYPES}
        self.op_latency_sum_ms: dict[str, float] = {t: 0.0 for t in OP_TYPES}

    def record(self, op: str, ok: bool, started: float | None = None) -> None:
        self.op_count[(op, "succeed" if ok else "failed")] += 1
        if ok and started is not None:
            elapsed_ms = (time.monotonic() - started) * 1000.0
            self.op_latency_buckets[op][bisect_left(LATENCY_BOUNDS_MS, elapsed_ms)] += 1
            self.op_latency_sum_ms[op] += elapsed_ms


class SegmentLoader:
    """Loads, parks and retires the segments of the immutable buckets (module docstring)."""

    def __init__(self, *, buckets: SealedBuckets, store: SnapshotStorage, on_change: Callable[[], None],
                 loop: asyncio.AbstractEventLoop, ops: SnapshotOps,
                 horizon: Callable[[], int], retry: RetryDelays,
                 spawn: Callable[[Coroutine[Any, Any, None]], object],
                 finish: Callable[[ImmutableBucket], None],
                 executor: Executor | None = None) -> None:
        self._buckets = buckets
        self._executor = executor
        self._store = store
        self._on_change = on_change
        self._loop = loop
        self._ops = ops
        self._horizon = horizon
        self._retry = retry
        self._spawn = spawn
        self._finish = finish
        self._in_flight: set[ImmutableBucket] = set()   # a segment read is running
        # buckets whose next segment waits to be read ahead, the one due soonest first
        self._ahead_order: list[tuple[int, int, ImmutableBucket]] = []
        self._ahead_queued: set[ImmutableBucket] = set()
        # buckets whose next segment is read ahead once the horizon reaches its first time
        self._ahead_later: list[tuple[int, int, ImmutableBucket]] = []
        self._ahead_seq = itertools.count()
        self._ahead_running = 0
        self._notify_handle: asyncio.TimerHandle | None = None
        self._notify_pending = False
        self.closed = False

    def segment_done(self, loaded: LoadedSegment) -> None:
        """A loaded segment ran dry: load the bucket's next one, or retire the bucket."""
        bucket = loaded.bucket
        loaded.dead = True
        if bucket.loaded is loaded:
            bucket.loaded = None
        if bucket.alive:
            self.advance(bucket)

    def advance(self, bucket: ImmutableBucket) -> None:
        """The bucket has no segment in memory: load (or park) the next one, or retire the
        bucket."""
        if bucket.remaining <= 0 or not bucket.has_unloaded_segments():
            if not bucket.merging:
                self._finish(bucket)
            return
        ahead, bucket.read_ahead = bucket.read_ahead, None
        if bucket.next_min_ts > self._horizon():
            self._buckets.park(bucket)
        elif bucket.mem_segments is not None:
            self.install(bucket, raw_to_decoded(bucket.mem_segments[bucket.next_segment - 1]))
        elif ahead is not None and ahead[:2] == (bucket.next_segment, bucket.skip):
            self.install(bucket, ahead[2])
        else:
            # the barrier until it is read (by a read-ahead in flight, or a load)
            self._buckets.loading[bucket] = bucket.next_min_ts
            if bucket not in self._in_flight:
                self._in_flight.add(bucket)
                self._spawn(self._load_next(bucket))

    def unpark(self) -> None:
        """Load the parked segments whose first time the horizon has reached, and read ahead
        the next segments it reached."""
        horizon = self._horizon()
        for bucket in self._buckets.unpark_upto(horizon):
            if bucket.alive and bucket.loaded is None:
                self.advance(bucket)
        later = self._ahead_later
        while later and later[0][0] <= horizon:
            self.read_ahead(heapq.heappop(later)[2])

    def install(self, bucket: ImmutableBucket, segment: DecodedSegment) -> None:
        """Serve a segment read for ``bucket`` (its part due soon), or park it again."""
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
            return
        if skip == 0 and keep == len(ts):
            self._buckets.push_loaded(bucket, segment)
        else:
            self._buckets.push_loaded(bucket, DecodedSegment(ts[skip:keep],
                                                             segment.pos[skip:keep], []))
        self.read_ahead(bucket)

    def read_ahead(self, bucket: ImmutableBucket) -> None:
        """Read the next segment of a bucket serving a loaded one from its persisted snapshot,
        when that segment is due within the horizon: at most :data:`READ_AHEAD_JOBS` reads
        at a time, the segment due soonest first (a restart installs thousands of first
        segments at once; their reads come first)."""
        if not self._may_read_ahead(bucket):
            return
        entry = (bucket.next_min_ts, next(self._ahead_seq), bucket)
        if entry[0] > self._horizon():
            # not due soon (the rest of a segment kept in part): read once the horizon
            # reaches it, while the part in memory still serves (see unpark)
            heapq.heappush(self._ahead_later, entry)
        elif bucket not in self._ahead_queued:
            self._ahead_queued.add(bucket)
            heapq.heappush(self._ahead_order, entry)
            self._pump_read_ahead()

    def _may_read_ahead(self, bucket: ImmutableBucket) -> bool:
        return (bucket.alive and not self.closed and bucket.loaded is not None
                and bucket.mem_segments is None and bucket.read_ahead is None
                and bucket.has_unloaded_segments() and bucket not in self._in_flight)

    def _wants_read_ahead(self, bucket: ImmutableBucket) -> bool:
        return self._may_read_ahead(bucket) and bucket.next_min_ts <= self._horizon()

    def _pump_read_ahead(self) -> None:
        order = self._ahead_order
        while order and self._ahead_running < READ_AHEAD_JOBS:
            bucket = heapq.heappop(order)[2]
            self._ahead_queued.discard(bucket)
            if self._wants_read_ahead(bucket):
                self._ahead_running += 1
                self._in_flight.add(bucket)
                self._spawn(self._fetch_ahead(bucket))

    async def _fetch_ahead(self, bucket: ImmutableBucket) -> None:
        try:
            await self._read_next_ahead(bucket)
        finally:
            self._ahead_running -= 1
            self._pump_read_ahead()

    async def _read_next_ahead(self, bucket: ImmutableBucket) -> None:
        """Read the bucket's next segment while its loaded one serves: kept for
        :meth:`advance`, or installed at once when the loaded one ran dry meanwhile."""
        number, skip = bucket.next_segment, bucket.skip
        try:
            segment = await self.fetch(bucket, number)
        except Exception:
            self._in_flight.discard(bucket)
            log.warning("reading ahead segment %d of delayed bucket %s failed", number,
                        bucket.key, exc_info=True)
            if bucket.alive and not self.closed and bucket in self._buckets.loading:
                self._loop.call_later(self._retry.load_s, self.retry_load, bucket)
            return
        self._in_flight.discard(bucket)
        current = (bucket.alive and not self.closed and bucket.next_segment == number
                   and bucket.skip == skip)
        if bucket.loaded is None and bucket in self._buckets.loading:   # its turn came
            if current:
                self.install(bucket, segment)
                self._on_change()
            elif bucket.alive and not self.closed:
                self.advance(bucket)            # moved on meanwhile: the usual load
            else:
                self._buckets.loading.pop(bucket, None)
        elif current:
            bucket.read_ahead = (number, skip, segment)

    def _apply_old_cancel(self, packed: int) -> None:
        """A CANCEL index in a segment (snapshots of an older Horae put them first in segment 1;
        a cancel's record is now its target's acknowledgement): clear its target."""
        target = self._buckets.take(packed >> POSITION_BITS, packed & POSITION_MASK)
        if target is not None and target.remaining <= 0 and not target.merging:
            self._finish(target)

    async def fetch(self, bucket: ImmutableBucket, number: int) -> DecodedSegment:
        """Read and decode segment ``number`` of a persisted bucket."""
        assert bucket.snapshot_id is not None
        started = time.monotonic()
        try:
            data = await self._store.load_segment(bucket.snapshot_id, number)
            if is_packed_segment(data) and len(data) <= INLINE_DECODE_BYTES:
                segment = decode_segment(data)
            else:
                segment = await self._loop.run_in_executor(self._executor, decode_segment, data)
        except Exception:
            self._ops.record("load", False)
            raise
        self._ops.record("load", True, started)
        return segment

    async def load_first_segments(self, buckets: list[ImmutableBucket], readers: int,
                                  batch: int = 1, *, first_alone: bool = True) -> None:
        """Recovery without segment CANCELs: ``buckets`` (in first-time order) all sit in
        ``loading`` at their first time; read their first segments in that order, ``readers``
        read jobs at a time of up to ``batch`` segments each (the very first job one segment
        unless not ``first_alone``: the bucket due soonest serves after one read), and park
        those not due soon unread."""
        order = deque(buckets)
        first_job = [first_alone]

        async def reader() -> None:
            while order and not self.closed:
                size = 1 if first_job[0] else max(batch, 1)
                first_job[0] = False
                wanted: list[ImmutableBucket] = []
                while order and len(wanted) < size:
                    bucket = order.popleft()
                    if (not bucket.alive or bucket.loaded is not None
                            or bucket.next_segment != 1 or bucket in self._in_flight):
                        continue                    # merged, retired or loaded meanwhile
                    if bucket.remaining <= 0 or not bucket.has_unloaded_segments():
                        self._buckets.loading.pop(bucket, None)
                        self.advance(bucket)
                    elif bucket.next_min_ts > self._horizon():
                        self._buckets.loading.pop(bucket, None)
                        self._buckets.park(bucket)
                        self._on_change()
                    else:
                        self._buckets.loading[bucket] = bucket.next_min_ts
                        self._in_flight.add(bucket)
                        wanted.append(bucket)
                if wanted:
                    await self._load_batch(wanted)

        await asyncio.gather(*(reader() for _ in range(max(min(readers, len(order)), 1))))

    def install_first(self, bucket: ImmutableBucket, data: bytes) -> None:
        """Recovery: the first segment of a bucket whose membership was just read, read in the
        same job: installed (or parked, or the bucket retired) as :meth:`load_first_segments`
        would; left to it when the bucket moved on meanwhile or the segment needs the
        executor."""
        if (not bucket.alive or bucket.loaded is not None or bucket.next_segment != 1
                or bucket.skip or bucket in self._in_flight
                or not is_packed_segment(data) or len(data) > INLINE_DECODE_BYTES):
            return
        if bucket.remaining <= 0 or not bucket.has_unloaded_segments():
            self._buckets.loading.pop(bucket, None)
            self.advance(bucket)
            return
        try:
            segment = decode_segment(data)
        except ValueError:
            return                              # read again (and reported) the usual way
        self._ops.record("load", True)
        self.install(bucket, segment)

    async def _decode_all(self, datas: list[bytes | Exception]) -> list[DecodedSegment | Exception]:
        """Small packed segments decoded here, the rest in one executor job."""
        out: list[DecodedSegment | Exception] = []
        slow: list[int] = []
        for k, data in enumerate(datas):
            if isinstance(data, Exception):
                out.append(data)
                continue
            if is_packed_segment(data) and len(data) <= INLINE_DECODE_BYTES:
                try:
                    out.append(decode_segment(data))
                except ValueError as exc:
                    out.append(exc)
                continue
            out.append(_PENDING_DECODE)         # decoded below
            slow.append(k)
        if slow:
            raw = [datas[k] for k in slow]
            try:
                decoded = await self._loop.run_in_executor(self._executor, _decode_each, raw)
            except Exception as exc:
                decoded = [exc] * len(slow)
            for k, result in zip(slow, decoded, strict=True):
                out[k] = result
        return out

    async def _load_batch(self, buckets: list[ImmutableBucket]) -> None:
        """The next segment of each bucket (all in ``loading`` and in flight), read in one job;
        each is installed as it would be by :meth:`_load_next`."""
        wanted = [(bucket, bucket.next_segment, bucket.skip) for bucket in buckets]
        started = time.monotonic()
        try:
            datas = await self._store.load_parts(
                [(bucket.snapshot_id or 0, number) for bucket, number, _ in wanted])
        except Exception as exc:
            datas = [exc] * len(wanted)
        segments = await self._decode_all(datas)
        for (bucket, number, skip), segment in zip(wanted, segments, strict=True):
            self._in_flight.discard(bucket)
            if isinstance(segment, Exception):
                self._ops.record("load", False)
                log.error("loading segment %d of delayed bucket %s failed; retrying", number,
                          bucket.key, exc_info=segment)
                if bucket.alive and not self.closed:
                    self._loop.call_later(self._retry.load_s, self.retry_load, bucket)
                continue
            self._ops.record("load", True, started)
            if (not bucket.alive or self.closed or bucket.next_segment != number
                    or bucket.skip != skip):
                self._buckets.loading.pop(bucket, None)
                continue
            self.install(bucket, segment)
        self._notify_soon()

    def _notify_soon(self) -> None:
        """``on_change`` now, then at most once per :data:`RECOVERY_NOTIFY_S` while recovery
        loads first segments: each wake-up has the tracker look over every loaded segment,
        thousands of them here."""
        if self._notify_handle is None:
            self._on_change()
            self._notify_handle = self._loop.call_later(RECOVERY_NOTIFY_S, self._notified)
        else:
            self._notify_pending = True

    def _notified(self) -> None:
        self._notify_handle = None
        if self._notify_pending and not self.closed:
            self._notify_pending = False
            self._notify_soon()

    async def _load_next(self, bucket: ImmutableBucket,
                         notify: Callable[[], None] | None = None) -> None:
        number, skip = bucket.next_segment, bucket.skip
        try:
            segment = await self.fetch(bucket, number)
        except Exception:
            log.exception("loading segment %d of delayed bucket %s failed; retrying", number,
                          bucket.key)
            self._in_flight.discard(bucket)
            if bucket.alive and not self.closed:
                self._loop.call_later(self._retry.load_s, self.retry_load, bucket)
            return
        self._in_flight.discard(bucket)
        if (not bucket.alive or self.closed or bucket.next_segment != number
                or bucket.skip != skip):
            self._buckets.loading.pop(bucket, None)
            return
        self.install(bucket, segment)
        (notify or self._on_change)()

    def retry_load(self, bucket: ImmutableBucket) -> None:
        if bucket.alive and not self.closed and bucket.loaded is None:
            self.advance(bucket)
