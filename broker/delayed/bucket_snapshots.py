"""The snapshot lifecycle of the bucket tracker: seal, write, load, merge, delete, recover.

Theory of operation
-------------------
:class:`BucketSnapshots` is owned by the bucket tracker (:mod:`broker.delayed.bucket`), which
hands it the :class:`~broker.delayed.bucket_records.SealedBuckets` they share, the cursor and
the snapshot store (:mod:`broker.delayed.ports`), and ``on_change`` to call when something
changed in the background (a segment loaded, buckets merged). It never sees the mutable bucket
or the hand-out logic.

- **seal**: the tracker passes the mutable bucket's columns and membership; a new
  :class:`~broker.delayed.bucket_records.ImmutableBucket` serves from memory at once while its
  snapshot is encoded (executor thread) and written (async). Once durable the snapshot id is
  recorded in the cursor property ``#pulsar.internal.delayed.bucket_<start>_<end>`` (Pulsar's
  key), the cursor is flushed and the in-memory segments are dropped. A failed create is
  retried with capped exponential backoff (``CREATE_RETRY_*``); meanwhile the bucket keeps
  serving from memory;
- **load**: which segment of each bucket is in memory (loaded, parked until it is due soon,
  kept in part) is :class:`~broker.delayed.bucket_segments.SegmentLoader`'s, owned here;
- **delete**: a bucket whose pending set is empty is retired (what it handed out is remembered
  by ``SealedBuckets.retire`` while a re-read may meet it), its property removed and flushed, then its snapshot deleted;
- **merge**: past ``delayedDeliveryMaxNumBuckets`` (> 0) the two adjacent persisted buckets with
  the fewest pending indexes are merged into one new snapshot; the property of the merged range
  is written before the two old ones are removed, so a crash in between leaves a range that
  encloses others, which recovery resolves;
- **recover**: read the bucket keys from the cursor properties (a range enclosed by another is
  the leftover of an interrupted merge and is deleted), load each metadata, drop what the
  mark-delete position already covers. With the format property
  (:data:`~broker.delayed.snapshot_format.FORMAT_KEY`: no snapshot has CANCELs in a segment)
  recovery returns then and first segments load in the background, each bucket a barrier at
  its first time until its segment is in; a store without it (an older version's) has every
  first segment read and its CANCELs applied before recovery returns, and gets the property
  once a recovery finds no CANCEL left. Reads run ``RECOVERY_READS`` jobs at a time, each
  of up to ``RECOVERY_BATCH`` snapshots (IO in the store's pool, decoding in the executor,
  never on the loop), first segments in order of their first deliver time, so the bucket
  due soonest is in memory first. With the format property, a bucket whose snapshot has a
  summary naming its range (:class:`~broker.delayed.snapshot_format.BucketSummary`, written
  beside each snapshot when it is created) is not read before serving at all: it is READING
  (:mod:`broker.delayed.bucket_records`), a barrier at the summary's first time, and its
  membership is read in the background in first-time order, then its first segment; what the
  tracker is asked about its ledgers meanwhile waits (:mod:`broker.delayed.bucket_deferred`).
  Only the buckets without a usable summary are read before serving (and get one then).

IO runs in background tasks (counted in :class:`~broker.delayed.bucket_segments.SnapshotOps`); everything else
runs on the event loop thread. What merge and recovery decide about bucket records (which pair,
the merged bucket, which ranges are live, a bucket rebuilt from its metadata) are the pure
functions of :mod:`broker.delayed.bucket_rebuild`.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
import time
from array import array
from collections import deque
from collections.abc import Callable, Coroutine
from concurrent.futures import Executor
from typing import Any

from pyroaring import BitMap

from broker.delayed.bucket_rebuild import (
    cheapest_pair,
    live_ranges,
    merged_bucket,
    recovered_bucket,
)
from broker.delayed.bucket_records import ImmutableBucket, SealedBuckets
from broker.delayed.bucket_segments import RetryDelays, SegmentLoader, SnapshotOps
from broker.delayed.packed import POSITION_BITS, POSITION_MASK
from broker.delayed.ports import BucketCursor, SnapshotStorage
from broker.delayed.snapshot_format import (
    FORMAT_KEY,
    FORMAT_NO_SEGMENT_CANCELS,
    BucketSummary,
    DecodedSegment,
    RawSegment,
    cut_columns,
    cut_segments,
    decode_metadata,
    decode_summary,
    encode_snapshot,
    encode_summary,
    raw_to_decoded,
)
from storage.errors import SnapshotNotFoundError
from storage.positions import Position

log = logging.getLogger("horae.delayed.bucket_snapshots")

#: Snapshot read jobs recovery keeps in flight at once (metadata, then first segments): enough
#: to keep the disk busy, few enough that a broker with thousands of buckets neither floods the
#: IO pool nor holds thousands of decoded segments at once.
RECOVERY_READS = 16

#: Snapshots whose metadata (or first segment) one recovery read job fetches: one hand-off to
#: the IO pool and one to the executor per batch instead of per bucket, which is most of the
#: cost of a part of a few kilobytes on a busy machine.
RECOVERY_BATCH = 64

#: (start ledger, end ledger, snapshot id, property key) of a bucket named in the cursor
BucketRef = tuple[int, int, int, str]


def _decode_buckets(items: list[tuple[int, int, int, int, bytes]], mark_delete: Position
                    ) -> list[ImmutableBucket | Exception]:
    """Recovered buckets from their snapshot metadata, (start, end, snapshot id, size, bytes)
    each (runs in the executor); an unreadable one is its error."""
    out: list[ImmutableBucket | Exception] = []
    for start, end, snapshot_id, size, data in items:
        try:
            out.append(recovered_bucket(start, end, snapshot_id, size, decode_metadata(data),
                                        mark_delete))
        except Exception as exc:
            out.append(exc)
    return out


def _first_time(bucket: ImmutableBucket) -> int:
    """The first deliver time of a bucket's first segment (recovery reads those first)."""
    return bucket.segment_min_ts[0] if len(bucket.segment_min_ts) else 0

class BucketSnapshots:
    """Seal, persist, load, merge, delete and recover the immutable buckets."""

    def __init__(self, *, buckets: SealedBuckets, cursor: BucketCursor,
                 store: SnapshotStorage, on_change: Callable[[], None],
                 on_membership: Callable[[ImmutableBucket], None],
                 loop: asyncio.AbstractEventLoop, executor: Executor | None,
                 time_step_ms: int, max_indexes_per_segment: int, max_num_buckets: int,
                 horizon: Callable[[], int], retry: RetryDelays | None = None) -> None:
        self._buckets = buckets
        self._cursor = cursor
        self._store = store
        self._on_change = on_change
        self._on_membership = on_membership
        self._loop = loop
        self._executor = executor
        self._time_step_ms = time_step_ms
        self._max_indexes_per_segment = max_indexes_per_segment
        self._max_num_buckets = max_num_buckets
        self._horizon = horizon
        self._retry = retry or RetryDelays()
        self.ops = SnapshotOps()
        self._wake_on_close = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._merge_task: asyncio.Task[None] | None = None
        self._closed = False
        self.loader = SegmentLoader(buckets=buckets, store=store, on_change=on_change, loop=loop,
                                    ops=self.ops, horizon=horizon, retry=self._retry,
                                    spawn=self._spawn, finish=self.finish, executor=executor)

    # --- plumbing --------------------------------------------------------------------------

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
        self.loader.closed = True
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

    def bucket_emptied(self, bucket: ImmutableBucket) -> None:
        """The tracker cleared the last pending index of a bucket (cancel)."""
        if bucket.remaining <= 0 and not bucket.merging:
            self.finish(bucket)

    # --- seal and persist ------------------------------------------------------------------

    def seal(self, start_ledger: int, end_ledger: int, ts_col: array[int], pos_col: array[int],
             members: dict[int, BitMap]) -> None:
        """Turn the mutable bucket's content into an immutable bucket (time-ordered columns,
        stale indexes already filtered); the snapshot is written in the background."""
        segments = cut_columns(ts_col, pos_col, self._time_step_ms,
                               self._max_indexes_per_segment)
        bucket = ImmutableBucket(start_ledger, end_ledger)
        bucket.indexed = members
        bucket.pending = dict(members)      # shared until changed (ImmutableBucket.take)
        bucket.remaining = len(ts_col)
        bucket.segment_min_ts = array("q", (seg[0][0] for seg in segments))
        bucket.mem_segments = segments
        self._buckets.insert(bucket)
        self.loader.advance(bucket)
        self._spawn(self._persist(bucket, segments))

    async def _encode(self, segments: list[RawSegment]) -> tuple[bytes, list[bytes]]:
        return await self._loop.run_in_executor(self._executor, encode_snapshot, segments, [])

    async def _create(self, start_ledger: int, end_ledger: int,
                      segments: list[RawSegment]) -> int:
        """Encode and store a bucket's snapshot, with its summary (snapshot_format)."""
        metadata, parts = await self._encode(segments)
        summary = encode_summary(BucketSummary(
            start_ledger, end_ledger, segments[0][0][0], sum(len(seg[0]) for seg in segments),
            len(segments))) if segments and len(segments[0][0]) else b""
        return await self._store.create(metadata, parts, summary)

    async def _persist(self, bucket: ImmutableBucket, segments: list[RawSegment]) -> None:
        delay = self._retry.create_first_s
        while True:
            started = time.monotonic()
            try:
                snapshot_id = await self._create(bucket.start_ledger, bucket.end_ledger,
                                                 segments)
                break
            except Exception:
                # Keep serving the bucket from memory meanwhile; a restart before it is durable
                # re-reads its ledgers, since no cursor property names it.
                log.exception("creating the snapshot of delayed bucket %s failed; retrying in "
                              "%.0f s", bucket.key, delay)
                self.ops.record("create", False)
            await self._pause(delay)
            delay = min(delay * 2, self._retry.create_max_s)
            if not bucket.alive or self._closed:
                return
        self.ops.record("create", True, started)
        if not bucket.alive:
            await self._delete_snapshot(snapshot_id, None)
            return
        bucket.snapshot_id = snapshot_id
        bucket.snapshot_size = self._snapshot_size(snapshot_id)
        self.ops.snapshot_size_bytes += bucket.snapshot_size
        bucket.mem_segments = None
        self.loader.read_ahead(bucket)          # its next segments come from the snapshot now
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
        self._buckets.retire(bucket, self._cursor.read_position.ledger_id)
        if bucket.snapshot_id is not None:
            self._spawn(self._delete_snapshot(bucket.snapshot_id, bucket))

    async def _delete_snapshot(self, snapshot_id: int, bucket: ImmutableBucket | None) -> None:
        started = time.monotonic()
        try:
            if bucket is not None:
                # no membership test first: ``properties`` is a copy, O(buckets) per retired
                # bucket; a flush with nothing to save returns at once
                self._cursor.remove_property(bucket.key)
                await self._flush_cursor()
                self.ops.snapshot_size_bytes -= bucket.snapshot_size
            await self._store.delete(snapshot_id)
        except Exception:
            log.exception("deleting delayed bucket snapshot %d failed", snapshot_id)
            self.ops.record("delete", False)
            return
        self.ops.record("delete", True, started)

    def clear(self) -> None:
        """Retire every bucket (cursor reset / clear backlog): snapshots are deleted."""
        for bucket in self._buckets:
            bucket.remaining = 0
            self.finish(bucket)
        self._buckets.clear()

    # --- merge -----------------------------------------------------------------------------

    def _maybe_merge(self) -> None:
        if (self._closed or self._max_num_buckets <= 0 or self._buckets.reading
                or len(self._buckets) <= self._max_num_buckets
                or (self._merge_task is not None and not self._merge_task.done())):
            return
        best = cheapest_pair(itertools.pairwise(self._buckets))   # over a copy
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
                segment = await self.loader.fetch(bucket, number)
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
            create_started = time.monotonic()
            try:
                snapshot_id = await self._create(a.start_ledger, b.end_ledger, segments)
            except Exception:
                self.ops.record("create", False)
                raise
            self.ops.record("create", True, create_started)
        except Exception:
            log.exception("merging delayed buckets %s and %s failed", a.key, b.key)
            self.ops.record("merge", False)
            a.end_merge()
            b.end_merge()
            return
        a.end_merge()
        b.end_merge()
        if not (a.alive and b.alive) or self._closed:
            await self._delete_snapshot(snapshot_id, None)
            self.ops.record("merge", False)
            for old in (a, b):
                if old.alive and old.remaining <= 0:
                    self.finish(old)
            return
        merged = merged_bucket(a, b, array("q", (seg[0][0] for seg in segments)), snapshot_id,
                               self._snapshot_size(snapshot_id))
        for old in (a, b):
            self._buckets.remove(old)
        self._buckets.insert(merged)
        self.ops.snapshot_size_bytes += merged.snapshot_size
        self._cursor.set_property(merged.key, str(snapshot_id))
        if segments:
            self.loader.install(merged, raw_to_decoded(segments[0]))
        if merged.remaining <= 0:
            self.finish(merged)
        for old in (a, b):
            self._cursor.remove_property(old.key)
        await self._flush_cursor()
        for old in (a, b):
            if old.snapshot_id is not None:
                self._spawn(self._delete_snapshot(old.snapshot_id, old))
        self.ops.record("merge", True, started)
        self._on_change()
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
        no_segment_cancels = (
            self._cursor.properties.get(FORMAT_KEY) == FORMAT_NO_SEGMENT_CANCELS or not kept)
        gate = asyncio.Semaphore(RECOVERY_READS)
        mark_delete = self._cursor.mark_delete_position
        # With a summary that names the same range, a bucket serves before its metadata is
        # read (READING: bucket_records); the others' metadata is read before serving.
        summaries = await self._read_summaries() if no_segment_cancels and kept else {}
        reading: list[ImmutableBucket] = []
        unread: list[BucketRef] = []
        for ref in kept:
            summary = summaries.get(ref[2])
            if (summary is not None and summary.start_ledger == ref[0]
                    and summary.end_ledger == ref[1]):
                reading.append(ImmutableBucket.from_summary(ref[0], ref[1], ref[2],
                                                            summary.first_ts))
            else:
                unread.append(ref)
        kept = unread

        async def recover_batch(batch: list[BucketRef]) -> list[ImmutableBucket | None]:
            async with gate:
                return (await self._recover_buckets(batch, mark_delete))[0]

        batches = [kept[i:i + RECOVERY_BATCH] for i in range(0, len(kept), RECOVERY_BATCH)]
        recovered = [bucket for batch in await asyncio.gather(*map(recover_batch, batches))
                     for bucket in batch]
        for (_, _, _, key), bucket in zip(kept, recovered, strict=True):
            if bucket is None:
                dropped = dropped or key not in self._cursor.properties
                continue
            self._buckets.insert(bucket)
            self.ops.snapshot_size_bytes += bucket.snapshot_size
        if no_segment_cancels and any(b is not None for b in recovered):
            # a store written before summaries: the next restart has them
            self._spawn(self._write_summaries([b for b in recovered if b is not None]))
        for bucket in reading:          # its size is counted once read (no stat each here)
            self._buckets.insert(bucket)
        if no_segment_cancels:
            # Membership is known or on its way: serve now, memberships still to read and
            # first segments in the background, earliest first; every bucket is a barrier at
            # its first time until its segment is in.
            for bucket in list(self._buckets):
                if bucket.remaining <= 0 and not bucket.reading:
                    self.finish(bucket)
            buckets = sorted(self._buckets, key=_first_time)
            for bucket in buckets:
                self._buckets.loading[bucket] = _first_time(bucket)
            if reading:
                self._spawn(self._serve_in_order(buckets, mark_delete))
            else:
                self._spawn(self.loader.load_first_segments(buckets, RECOVERY_READS,
                                                            RECOVERY_BATCH))
        else:
            cancels_seen, lost = await self._load_first_segments()
            dropped = dropped or lost
            for bucket in self._buckets:
                if bucket.remaining <= 0:
                    self.finish(bucket)
            no_segment_cancels = not cancels_seen
        if no_segment_cancels and FORMAT_KEY not in self._cursor.properties:
            # every snapshot from now on is written without CANCELs (broker.delayed.cancels)
            self._cursor.set_property(FORMAT_KEY, FORMAT_NO_SEGMENT_CANCELS)
            dropped = True
        if dropped:
            await self._flush_cursor()

    async def _read_summaries(self) -> dict[int, BucketSummary]:
        """Snapshot id -> its bucket's summary; those that are unreadable are left out (their
        metadata is read before serving), and all of them when the summaries cannot be read."""
        try:
            raw = await self._store.summaries()
        except Exception:
            log.warning("reading the delayed bucket summaries failed; reading every "
                        "bucket's metadata first", exc_info=True)
            return {}
        out: dict[int, BucketSummary] = {}
        for snapshot_id, data in raw.items():
            summary = decode_summary(data)
            if summary is not None:
                out[snapshot_id] = summary
        return out

    async def _write_summaries(self, buckets: list[ImmutableBucket]) -> None:
        """Summaries of recovered snapshots that had none (a store written before them)."""
        items = [(b.snapshot_id, encode_summary(BucketSummary(
                     b.start_ledger, b.end_ledger, b.segment_min_ts[0], b.remaining,
                     len(b.segment_min_ts))))
                 for b in buckets
                 if b.snapshot_id is not None and b.remaining > 0 and len(b.segment_min_ts)]
        if not items:
            return
        try:
            await self._store.add_summaries(items)
        except Exception:
            log.warning("writing delayed bucket summaries failed", exc_info=True)

    async def _serve_in_order(self, buckets: list[ImmutableBucket], mark_delete: Position
                              ) -> None:
        """Recovery with summaries: ``buckets`` (in first-time order, all in ``loading``) get
        their membership read when they are READING (:meth:`_settle`), with their first
        segment in the same read job, ``RECOVERY_READS`` jobs at a time of up to
        ``RECOVERY_BATCH`` buckets each, the first job the bucket due soonest alone (decoded
        on the loop: no hand-off). A first segment that could not come with its
        membership is read after it (``load_first_segments``)."""
        order = deque(buckets)
        started = time.monotonic()

        async def job(size: int) -> None:
            batch = [order.popleft() for _ in range(min(size, len(order)))]
            await self._settle([b for b in batch if b.reading and b.alive], mark_delete)
            if not self._closed:
                self._spawn(self.loader.load_first_segments(batch, 1, RECOVERY_BATCH,
                                                            first_alone=False))

        async def worker(first: bool) -> None:
            if first:
                await job(1)
            while order and not self._closed:
                await job(RECOVERY_BATCH)

        # the first job is not awaited alone: a read that hangs holds back its own buckets only
        await asyncio.gather(*(worker(k == 0)
                               for k in range(max(min(RECOVERY_READS, len(order)), 1))))
        if not self._closed:
            # the moment the index serves whole (every ledger's membership is known)
            log.info("delayed index of cursor %s serving: the memberships of %d buckets read "
                     "in %.3f s", getattr(self._cursor, "name", "?"), len(buckets),
                     time.monotonic() - started)

    async def _settle(self, batch: list[ImmutableBucket], mark_delete: Position) -> None:
        """Read the membership of READING buckets (one read job, one decode job); each is
        LIVE then, or dropped when its snapshot is gone or unreadable; what was deferred for
        its ledgers is applied either way (``on_membership``)."""
        if not batch:
            return
        refs = [(b.start_ledger, b.end_ledger, b.snapshot_id or 0, b.key) for b in batch]
        horizon = self._horizon()
        # the first segment of a bucket due soon comes in the same read (one open per file)
        results, firsts = await self._recover_buckets(
            refs, mark_delete, [b.segment_min_ts[0] <= horizon for b in batch])
        dropped = False
        for bucket, read, first in zip(batch, results, firsts, strict=True):
            if not bucket.alive:
                continue                        # cleared meanwhile (a cursor reset)
            if read is None:
                # its ledgers' entries are read again: not held by a bucket any more
                self._buckets.remove(bucket)
                dropped = dropped or bucket.key not in self._cursor.properties
            else:
                if read.segment_min_ts[0] != bucket.segment_min_ts[0]:
                    log.warning("delayed bucket %s: its summary's first time %d is not its "
                                "snapshot's %d", bucket.key, bucket.segment_min_ts[0],
                                read.segment_min_ts[0])
                self._buckets.settle(bucket, read)
                self.ops.snapshot_size_bytes += bucket.snapshot_size
                if bucket in self._buckets.loading:
                    self._buckets.loading[bucket] = _first_time(bucket)
            self._on_membership(bucket)
            if first is not None and read is not None:
                self.loader.install_first(bucket, first)
        self._on_change()
        if dropped:
            await self._flush_cursor()

    async def _recover_buckets(self, batch: list[BucketRef], mark_delete: Position,
                               first_too: list[bool] | None = None
                               ) -> tuple[list[ImmutableBucket | None], list[bytes | None]]:
        """The buckets of ``batch`` from their snapshot metadata: one read job, one decode
        job. None for a bucket whose snapshot is gone (its property removed) or unreadable.
        Besides, the first segment's bytes of those ``first_too`` names, read in the same job
        (None when not asked for or not read)."""
        started = time.monotonic()
        wanted = first_too or [False] * len(batch)
        parts: list[tuple[int, int]] = []
        for ref, first in zip(batch, wanted, strict=True):
            parts.append((ref[2], 0))
            if first:
                parts.append((ref[2], 1))
        try:
            got = await self._store.load_parts(parts)
        except Exception as exc:
            got = [exc] * len(parts)
        datas: list[bytes | Exception] = []
        firsts: list[bytes | None] = []
        k = 0
        for first in wanted:
            datas.append(got[k])
            segment = got[k + 1] if first else None
            firsts.append(segment if isinstance(segment, bytes) else None)
            k += 2 if first else 1
        return await self._decode_read(batch, datas, mark_delete, started), firsts

    async def _decode_read(self, batch: list[BucketRef], datas: list[bytes | Exception],
                           mark_delete: Position, started: float
                           ) -> list[ImmutableBucket | None]:
        out: list[ImmutableBucket | None] = [None] * len(batch)
        todo: list[int] = []
        for k, ((_, _, snapshot_id, key), data) in enumerate(zip(batch, datas, strict=True)):
            if isinstance(data, SnapshotNotFoundError):
                log.warning("delayed bucket %s: snapshot %d is gone", key, snapshot_id)
                self._cursor.remove_property(key)
            elif isinstance(data, Exception):
                log.error("delayed bucket %s: loading snapshot %d failed", key, snapshot_id,
                          exc_info=data)
                self.ops.record("load", False)
            else:
                todo.append(k)
        if not todo:
            return out
        items: list[tuple[int, int, int, int, bytes]] = []
        for k in todo:
            data = datas[k]
            assert isinstance(data, bytes)
            items.append((batch[k][0], batch[k][1], batch[k][2],
                          self._snapshot_size(batch[k][2]), data))
        try:    # roaring bitmaps of every segment: CPU work, in the executor (one bucket,
            # the first one due after a restart, here: tens of microseconds, no hand-off)
            decoded = _decode_buckets(items, mark_delete) if len(items) == 1 else \
                await self._loop.run_in_executor(self._executor, _decode_buckets, items,
                                                 mark_delete)
        except Exception as exc:
            decoded = [exc] * len(items)
        for k, result in zip(todo, decoded, strict=True):
            if isinstance(result, Exception):
                log.error("delayed bucket %s: snapshot %d is unreadable", batch[k][3],
                          batch[k][2], exc_info=result)
                self.ops.record("load", False)
                continue
            self.ops.record("load", True, started)
            out[k] = result
        return out

    async def _load_first_segments(self) -> tuple[bool, bool]:
        """A store of an older version: every first segment, once every bucket is known, so
        the CANCELs there find their targets before anything is handed out. (Any CANCEL seen,
        a bucket dropped (its property removed))."""
        dropped = False
        cancels_seen = False
        buckets = sorted(self._buckets, key=_first_time)
        order: asyncio.Queue[ImmutableBucket] = asyncio.Queue()
        for bucket in buckets:
            order.put_nowait(bucket)
        results: dict[ImmutableBucket, DecodedSegment | BaseException] = {}

        async def reader() -> None:             # earliest due first, RECOVERY_READS at a time
            while not order.empty():
                bucket = order.get_nowait()
                try:
                    results[bucket] = await self.loader.fetch(bucket, 1)
                except Exception as exc:     # sorted out below, per bucket
                    results[bucket] = exc

        await asyncio.gather(*(reader() for _ in range(min(RECOVERY_READS, len(buckets)))))
        for bucket in buckets:
            result = results[bucket]
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
                self._loop.call_later(self._retry.load_s, self.loader.retry_load, bucket)
                continue
            cancels_seen = cancels_seen or bool(result.cancels)
            if bucket.alive:
                self.loader.install(bucket, result)
        return cancels_seen, dropped
