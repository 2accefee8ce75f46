"""The persistent side of the bucket tracker: buckets, segments, snapshots, merge, recovery.

See :mod:`broker.delayed.bucket` for the theory of operation. This module holds the bucket
records and :class:`BucketLifecycle`, the half of the tracker that seals the mutable bucket,
writes, loads, merges and deletes snapshots, keeps the cursor properties in step, and recovers
after a restart. All of it runs on the event loop; IO is awaited in background tasks (counted
in ``op_count`` / ``op_latency_buckets``), snapshot encoding runs in an executor thread.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import time
from array import array
from bisect import bisect_left, bisect_right
from concurrent.futures import Executor
from typing import Any

from pyroaring import BitMap

from broker.delayed.packed import POSITION_BITS, POSITION_MASK, PackedTimeIndex
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

log = logging.getLogger("horae.delayed.bucket_lifecycle")

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
                 "recovered", "remaining", "segment_min_ts", "snapshot_id", "snapshot_size",
                 "start_ledger")

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
        self.recovered = False                  # from a previous run: entries may be acked
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


class BucketLifecycle:
    """Bucket bookkeeping shared with :class:`~broker.delayed.bucket.BucketDelayedDeliveryTracker`
    (which initialises every attribute declared here)."""

    _cursor: Any
    _snapshots: Any
    _loop: asyncio.AbstractEventLoop
    _executor: Executor | None
    _time_step_ms: int
    _max_indexes_per_segment: int
    _max_num_buckets: int
    _mutable: PackedTimeIndex
    _mut_members: dict[int, BitMap]
    _mut_count: int
    _mut_stale: int
    _mut_start: int
    _mut_end: int
    _buckets: list[_Bucket]
    _starts: list[int]
    _heap: list[tuple[int, int, _Loaded]]
    _seq: itertools.count[int]
    _loading: dict[_Bucket, int]
    _sealed_remaining: int
    _pending_cancels: list[int]
    _retired: dict[int, BitMap]
    _tasks: set[asyncio.Task[Any]]
    _merge_task: asyncio.Task[None] | None
    _epoch: int
    _closed: bool
    snapshot_size_bytes: int
    op_count: dict[tuple[str, str], int]
    op_latency_buckets: dict[str, list[int]]
    op_latency_sum_ms: dict[str, float]

    def _after_change(self) -> None:
        raise NotImplementedError

    def _cursor_revision(self) -> int:
        return int(getattr(self._cursor, "revision", 0))

    def _record(self, op: str, ok: bool, started: float | None = None) -> None:
        self.op_count[(op, "succeed" if ok else "failed")] += 1
        if ok and started is not None:
            elapsed_ms = (time.monotonic() - started) * 1000.0
            self.op_latency_buckets[op][bisect_left(LATENCY_BOUNDS_MS, elapsed_ms)] += 1
            self.op_latency_sum_ms[op] += elapsed_ms

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

    def _seal(self) -> None:
        """Turn the mutable bucket into an immutable one (snapshot written in the background)."""
        members = self._mut_members
        ts_col, pos_col = self._mutable.columns()
        if self._mut_stale:
            # Cancelled entries (and re-added duplicates) are still in the index: filter.
            seen: set[int] = set()
            keep_ts: array[int] = array("q")
            keep_pos: array[int] = array("Q")
            for ts, packed in zip(ts_col, pos_col, strict=True):
                bm = members.get(packed >> POSITION_BITS)
                if bm is not None and (packed & POSITION_MASK) in bm and packed not in seen:
                    seen.add(packed)
                    keep_ts.append(ts)
                    keep_pos.append(packed)
            ts_col, pos_col = keep_ts, keep_pos
        segments = cut_columns(ts_col, pos_col, self._time_step_ms,
                               self._max_indexes_per_segment)
        bucket = _Bucket(self._mut_start, self._mut_end)
        bucket.indexed = members
        bucket.pending = {ledger_id: bm.copy() for ledger_id, bm in members.items()}
        bucket.remaining = len(ts_col)
        bucket.segment_min_ts = [seg[0][0] for seg in segments]
        bucket.mem_segments = segments
        bucket.cancel_ops = self._live_cancels(self._pending_cancels)
        self._pending_cancels = []
        self._insert_bucket(bucket)
        self._sealed_remaining += bucket.remaining
        self._mutable = PackedTimeIndex()
        self._mut_members = {}
        self._mut_count = 0
        self._mut_stale = 0
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
        self._retire(bucket)
        if bucket.snapshot_id is not None:
            self._spawn(self._delete_snapshot(bucket.snapshot_id, bucket))

    def _retire(self, bucket: _Bucket) -> None:
        """Remember what a deleted bucket handed out while a sequential read may still meet
        those entries (after a restart the read starts again at the mark-delete position)."""
        if self._cursor_revision() != self._epoch:
            self._retired.clear()
            return
        read_position = getattr(self._cursor, "read_position", None)
        first = read_position.ledger_id if read_position is not None else -1
        for ledger_id, bm in bucket.indexed.items():
            if ledger_id >= first:
                have = self._retired.get(ledger_id)
                if have is None:
                    self._retired[ledger_id] = bm
                else:
                    have |= bm
        for ledger_id in [k for k in self._retired if k < first]:
            del self._retired[ledger_id]

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
            create_started = time.monotonic()
            try:
                snapshot_id = await self._snapshots.create(metadata, parts)
            except Exception:
                self._record("create", False)
                raise
            self._record("create", True, create_started)
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
        merged.recovered = a.recovered or b.recovered
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

    async def recover(self) -> None:
        found: list[tuple[int, int, int, str]] = []
        for key, value in self._cursor.properties.items():
            rng = parse_bucket_key(key)
            if rng is not None and value.isdigit():
                found.append((rng[0], rng[1], int(value), key))
        found.sort(key=lambda t: (t[0], -t[1]))
        kept: list[tuple[int, int, int, str]] = []
        stale: list[int] = []
        dropped = False
        for item in found:
            if kept and item[0] <= kept[-1][1]:
                # Enclosed by (or overlapping) an earlier range: leftover of an interrupted merge.
                self._cursor.remove_property(item[3])
                stale.append(item[2])
                dropped = True
                continue
            kept.append(item)
        live_ids = {item[2] for item in kept}
        for snapshot_id in stale:
            if snapshot_id not in live_ids:
                self._spawn(self._delete_snapshot(snapshot_id, None))
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
            bucket.recovered = True
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
            if isinstance(result, SnapshotNotFoundError):
                log.warning("delayed bucket %s: snapshot %s is incomplete", bucket.key,
                            bucket.snapshot_id)
                self._cursor.remove_property(bucket.key)
                bucket.snapshot_id = None
                self._finish_bucket(bucket)
                dropped = True
                continue
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
