"""Bucket delayed-delivery tracker (PIP-195): the index and its hand-out.

Theory of operation
-------------------
The index is split by ledger ranges into *buckets*. This object owns the scheduling side:

- the **last mutable bucket** indexes new positions of ledgers ``[start, end]`` in a packed
  time index (exact deliver times) plus a roaring bitmap per ledger. When a position of a
  ledger past ``end`` arrives and the bucket holds >= ``delayedDeliveryMinIndexCountPerBucket``
  indexes, it is **sealed** on that ledger boundary: its columns go to the snapshot side
  (:class:`~broker.delayed.bucket_snapshots.BucketSnapshots`, owned here), which makes an
  immutable bucket of them, persists it, loads its segments, merges and deletes buckets and
  recovers them after a restart;
- the immutable buckets and the heap of their loaded segments
  (:class:`~broker.delayed.bucket_records.SealedBuckets`) plus the mutable bucket and an
  in-memory ``extra`` index (positions of sealed ledgers that were not indexed there; bounded:
  at ``max_late_index_count`` the dispatcher is asked to pause reading new entries) form the
  shared priority queue. ``get_scheduled(n)`` finds by bisection the time T such that the n
  earliest due entries are those <= T, then takes whole runs per source. Nothing later than the
  first time of a segment not in memory yet is handed out (the *barrier*);
- a re-read entry found pending in a bucket is not indexed twice. One found in a bucket's
  ``indexed`` set but no longer pending was already handed out as a replay (or cancelled): the
  dispatcher only meets it again by reading sequentially after a restart, so it is skipped
  too. This knowledge lasts until the tracker is reset: every cursor reset of the subscription
  calls :meth:`clear` (which retires every bucket); an ack, a skip or any other bump of the
  cursor's revision does not touch it, so messages held unacknowledged by consumers are never
  handed out twice.

Recovery: the snapshot side rebuilds the immutable buckets from the cursor properties; the
mutable bucket is rebuilt by the dispatcher's ordinary reading from the cursor. Positions are
only handed out when due; positions acknowledged before the restart are filtered with
``cursor.is_deleted`` as they come up.

Metrics (plain attributes; :meth:`stats` is the typed form): ``bucket_count`` (immutable + the
mutable one), ``loaded_index_count``, ``snapshot_size_bytes``, ``op_count``
{(create|load|delete|merge, succeed|failed): n}, ``op_latency_buckets`` {type: counts per bound
<= 50, 100, 500, 1000, 5000, 30000, 60000 ms + overflow}, ``op_latency_sum_ms``, ``memory_bytes``.
"""

from __future__ import annotations

import asyncio
from array import array
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Final

from pyroaring import BitMap

from broker.delayed.bucket_records import (
    BUCKET_KEY_PREFIX,
    ImmutableBucket,
    LoadedSegment,
    SealedBuckets,
    bucket_key,
    parse_bucket_key,
)
from broker.delayed.bucket_snapshots import BucketSnapshots, RetryDelays
from broker.delayed.cancel_journal import CancelJournal
from broker.delayed.cancels import CancelResult
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
from broker.delayed.ports import BucketCursor, SnapshotStorage
from broker.delayed.tracker import TimedTracker
from storage.positions import Position

#: Default bound of the late-entry (``extra``) index, in indexes.
MAX_LATE_INDEX_COUNT: Final = 100_000

__all__ = ["BUCKET_KEY_PREFIX", "MAX_LATE_INDEX_COUNT", "BucketDelayedDeliveryTracker", "bucket_key", "parse_bucket_key"]


class BucketDelayedDeliveryTracker(TimedTracker):
    def __init__(self, *, cursor: BucketCursor, snapshots: SnapshotStorage, tick_time_ms: int,
                 strict: bool, on_due: Callable[[], None], loop: asyncio.AbstractEventLoop,
                 clock_ms: Callable[[], int] | None = None,
                 min_index_count_per_bucket: int = 50000,
                 time_step_per_segment_ms: int = 300_000,
                 max_indexes_per_segment: int = 5000,
                 max_num_buckets: int = -1,
                 executor: Executor | None = None,
                 retry: RetryDelays | None = None,
                 max_late_index_count: int = MAX_LATE_INDEX_COUNT) -> None:
        self._cursor = cursor
        self._init_timing(loop=loop, clock_ms=clock_ms, tick_time_ms=tick_time_ms,
                          strict=strict, on_due=on_due)
        self._min_index_count = max(min_index_count_per_bucket, 1)
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
        self._max_late = max(max_late_index_count, 1)
        self._wide = WideIndex()
        # the immutable buckets and their snapshots
        self._sealed = SealedBuckets()
        self._snapshots = BucketSnapshots(
            buckets=self._sealed, cursor=cursor, store=snapshots, events=self, loop=loop,
            executor=executor, time_step_ms=time_step_per_segment_ms,
            max_indexes_per_segment=max_indexes_per_segment, max_num_buckets=max_num_buckets,
            retry=retry)
        # every live cancel, persisted in its own snapshot (cancel_journal)
        self._journal = CancelJournal(book=self._cancels, cursor=cursor, store=snapshots,
                                      loop=loop, retry=retry or RetryDelays())
        self._closed = False

    # --- events from the snapshot side (ports.BucketEvents) -----------------------------

    def on_background_change(self) -> None:
        """A segment loaded or a merge finished: re-aim the timer, wake the dispatcher if due."""
        if not self._closed and self.has_message_available():
            self._on_due()

    def on_bucket_retired(self, bucket: ImmutableBucket) -> None:
        self._sealed.retire(bucket, self._cursor.read_position.ledger_id)

    def _is_deleted(self, ledger_id: int, entry_id: int) -> bool:
        return self._cursor.is_deleted(Position(ledger_id, entry_id))

    # --- time and timer --------------------------------------------------------------------

    @staticmethod
    def _purge(index: PackedTimeIndex, members: dict[int, BitMap]) -> int | None:
        while index:
            packed = index.peek_packed()
            bm = members.get(packed >> POSITION_BITS)
            if bm is not None and (packed & POSITION_MASK) in bm:
                return index.peek_ts()
            index.drop_head()
        return None

    def _segment_done(self, loaded: LoadedSegment) -> None:
        self._snapshots.segment_done(loaded)

    def _head_ts(self) -> int | None:
        heads = [self._purge(self._mutable, self._mut_members),
                 self._purge(self._extra, self._extra_members), self._wide.peek_ts(),
                 self._sealed.head(self._segment_done)]
        live = [h for h in heads if h is not None]
        return min(live) if live else None

    # --- add / cancel / contains -----------------------------------------------------------

    def add(self, ledger_id: int, entry_id: int, deliver_at_ms: int) -> bool:
        records = self._sealed
        sealed = ledger_id <= records.last_end_ledger
        # Hot path: a position past every sealed bucket with nothing retired needs no lookup.
        if (sealed or records.retired) and records.holds(ledger_id, entry_id):
            return True                         # pending, or handed out since the last reset
        if not fits(ledger_id, entry_id):
            return self._add_wide(ledger_id, entry_id, deliver_at_ms)
        cancels = self._cancels
        if (cancels.waiting.count or cancels.used.count) \
                and cancels.blocks(ledger_id, entry_id, deliver_at_ms):
            return True                         # cancelled (PIP-423): never delivered
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
        bucket = self._sealed.take(ledger_id, entry_id)
        if bucket is not None:
            self._snapshots.bucket_emptied(bucket)
        elif self._member_take(self._mut_members, ledger_id, entry_id):
            self._mut_count -= 1
            self._mut_stale += 1
        elif self._member_take(self._extra_members, ledger_id, entry_id):
            self._extra_count -= 1
        else:
            return False
        self._update_timer()
        return True

    def cancel_delayed(self, ledger_id: int, entry_id: int, deliver_at_ms: int) -> CancelResult:
        if deliver_at_ms <= self._cutoff():
            return self._cancels.refuse()
        if not fits(ledger_id, entry_id):
            return CancelResult.APPLIED if self.cancel(ledger_id, entry_id) \
                else CancelResult.NOT_FOUND
        if self._is_deleted(ledger_id, entry_id):
            return CancelResult.NOT_FOUND       # acknowledged: nothing to cancel
        cleared = self.cancel(ledger_id, entry_id)
        if (not cleared and not self._cancels.used.contains(ledger_id, entry_id, deliver_at_ms)
                and self._sealed.holds(ledger_id, entry_id)):
            return CancelResult.NOT_FOUND       # a consumer has it already
        result = self._cancels.record(ledger_id, entry_id, deliver_at_ms, cleared=cleared)
        self._journal.changed()
        return result

    async def persist_cancels(self) -> None:
        await self._journal.sync()

    def _cancel_still_needed(self, ledger_id: int, entry_id: int) -> bool:
        return not self._is_deleted(ledger_id, entry_id)

    def sequential_skip(self, ledger_id: int, entry_id: int) -> int:
        # The same verdicts as add(): held by a sealed bucket (pending or handed out since the
        # last reset, retired buckets included), or in the mutable/extra members.
        sets = [self._mut_members.get(ledger_id), self._extra_members.get(ledger_id),
                *self._sealed.held_sets(ledger_id)]
        return run_end_union(sets, entry_id)

    def contains(self, ledger_id: int, entry_id: int) -> bool:
        if not fits(ledger_id, entry_id):
            return (ledger_id, entry_id) in self._wide.members
        bucket = self._sealed.find(ledger_id)
        if bucket is not None and bucket.is_pending(ledger_id, entry_id):
            return True
        for members in (self._mut_members, self._extra_members):
            bm = members.get(ledger_id)
            if bm is not None and entry_id in bm:
                return True
        return False

    def __len__(self) -> int:
        return self._mut_count + self._extra_count + self._sealed.sealed_remaining + len(self._wide)

    # --- delivery ----------------------------------------------------------------------------

    def has_message_available(self) -> bool:
        head = self._head_ts()
        limit = self._cutoff()
        barrier = self._sealed.barrier()
        if barrier is not None and barrier < limit:
            limit = barrier
        available = head is not None and head <= limit
        if not available:
            self._update_timer()
        return available

    def get_scheduled(self, max_messages: int) -> list[tuple[int, int]]:
        if self._closed:
            return []
        if self._expire_cancels():
            self._journal.changed()
        out: list[tuple[int, int]] = []
        # A round takes the earliest `need` due entries across all sources: find the time
        # threshold by bisection on counts, then take whole runs per source. Rounds repeat only
        # when stale entries were skipped or a segment ran dry.
        for _ in range(1000):
            need = max_messages - len(out)
            if need <= 0:
                break
            self._sealed.head(self._segment_done)   # drop dead segments and stale heads
            limit_ts = self._sealed.limit(self._cutoff())
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

    def _count_upto(self, bound: int) -> int:
        return (self._mutable.count_upto(bound) + self._extra.count_upto(bound)
                + self._sealed.count_upto(bound))

    def _threshold(self, limit_ts: int, need: int) -> int | None:
        """The smallest time T <= limit_ts with at least ``need`` entries at or before it
        (limit_ts when fewer are due); None when nothing is due."""
        heads = [h for h in (self._mutable.peek_ts(), self._extra.peek_ts()) if h is not None]
        heads.extend(self._sealed.live_heads())
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
        if limit - consumed <= 0:
            return consumed
        moved, exhausted = self._sealed.take_upto(bound, limit - consumed, out, self._is_deleted)
        for loaded in exhausted:
            self._segment_done(loaded)
        return consumed + moved

    def on_rewind(self) -> None:
        return  # durable: the snapshots stay valid, the re-read skips what they hold

    def clear(self) -> None:
        self._snapshots.clear()
        self._mutable.clear()
        self._mut_members.clear()
        self._mut_count = 0
        self._mut_stale = 0
        self._mut_start = self._mut_end = -1
        self._extra.clear()
        self._extra_members.clear()
        self._extra_count = 0
        self._wide.clear()
        self._timer.cancel()

    async def close(self) -> None:
        self._closed = True
        self._timer.cancel()
        await self._snapshots.close()
        await self._journal.close()

    def should_pause_all_deliveries(self) -> bool:
        # The late-entry index is in memory only: bounded by pausing new reads until due
        # entries drain it (replays and due hand-outs go on; nothing is dropped or early).
        return self._extra_count >= self._max_late

    async def recover(self) -> None:
        recovered = await self._journal.recover()
        await self._snapshots.recover()
        # Cancels first: clear their targets in the recovered buckets before any hand-out.
        self._cancels.restore(recovered)
        for ledger_id, entry_id, slot_ms in recovered.targets():
            if self.cancel(ledger_id, entry_id):
                self._cancels.record(ledger_id, entry_id, slot_ms, cleared=True)
        self.on_background_change()

    # --- seal ------------------------------------------------------------------------------

    def _seal(self) -> None:
        """Hand the mutable bucket to the snapshot side as a new immutable bucket."""
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
        start, end = self._mut_start, self._mut_end
        self._mutable = PackedTimeIndex()
        self._mut_members = {}
        self._mut_count = 0
        self._mut_stale = 0
        self._mut_start = self._mut_end = -1
        self._snapshots.seal(start, end, ts_col, pos_col, members)

    # --- metrics and introspection -------------------------------------------------------------

    @property
    def snapshot_size_bytes(self) -> int:
        return self._snapshots.snapshot_size_bytes

    @property
    def op_count(self) -> dict[tuple[str, str], int]:
        return self._snapshots.op_count

    @property
    def op_latency_buckets(self) -> dict[str, list[int]]:
        return self._snapshots.op_latency_buckets

    @property
    def op_latency_sum_ms(self) -> dict[str, float]:
        return self._snapshots.op_latency_sum_ms

    @property
    def cancel_journal_failures(self) -> int:
        """Failed writes of the cancel snapshot (each is retried)."""
        return self._journal.write_failures

    @property
    def bucket_count(self) -> int:
        return len(self._sealed) + 1

    @property
    def loaded_index_count(self) -> int:
        return (len(self._mutable) + len(self._extra) + len(self._wide)
                + self._sealed.loaded_index_count)

    @property
    def memory_bytes(self) -> int:
        total = self._mutable.memory_bytes + self._extra.memory_bytes + self._sealed.memory_bytes
        for members in (self._mut_members, self._extra_members):
            total += sum(bitmap_bytes(bm) for bm in members.values())
        total += self._cancels.memory_bytes
        return total + (self._wide.memory_bytes if self._wide else 0)

    @property
    def pending_loads(self) -> int:
        """Segments being loaded (on_due follows when they make something due)."""
        return len(self._sealed.loading)

    @property
    def immutable_ranges(self) -> list[tuple[int, int]]:
        """(start, end) ledger ranges of the immutable buckets (tests, internal stats)."""
        return self._sealed.ranges

    async def wait_idle(self) -> None:
        """Wait for background snapshot work (tests and benchmarks)."""
        await self._snapshots.wait_idle()
