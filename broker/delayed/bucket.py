"""Bucket delayed-delivery tracker (PIP-195): the index and its hand-out.

Theory of operation
-------------------
The index is split by ledger ranges into *buckets*. This object owns the scheduling side:

- the **last mutable bucket** (:class:`~broker.delayed.indexed.MutableBucket`) indexes new
  positions of ledgers ``[start, end]`` in a packed time index (exact deliver times) plus a
  roaring bitmap per ledger. When a position of a
  ledger past ``end`` arrives and the bucket holds >= ``delayedDeliveryMinIndexCountPerBucket``
  indexes, it is **sealed** on that ledger boundary: its columns go to the snapshot side
  (:class:`~broker.delayed.bucket_snapshots.BucketSnapshots`, owned here), which makes an
  immutable bucket of them, persists it, loads its segments, merges and deletes buckets and
  recovers them after a restart;
- the immutable buckets and the heap of their loaded segments
  (:class:`~broker.delayed.bucket_records.SealedBuckets`) plus the mutable bucket and an
  in-memory late-entry index (:class:`~broker.delayed.indexed.IndexedPositions` of positions
  of sealed ledgers that were not indexed there; bounded:
  at ``max_late_index_count`` the dispatcher is asked to pause reading new entries) form the
  shared priority queue. ``get_scheduled(n)`` takes the n smallest due (time, position) entries
  by a k-way merge of the source heads (the loaded segments are one heap), run by run, so its
  cost does not grow with the number of loaded segments. Nothing later than the first time of
  a segment not in memory yet is handed out (the *barrier*), except what was due already
  when the tracker recovered: after a restart each bucket's overdue entries go out as soon
  as its first segment is in, without waiting for the others, a segment's overdue run at a
  time (thousands of segments each holding a few late entries are not merged entry by entry);
- a re-read entry found pending in a bucket is not indexed twice. One found in a bucket's
  ``indexed`` set but no longer pending was already handed out as a replay (or cancelled): the
  dispatcher only meets it again by reading sequentially after a restart, so it is skipped
  too. This knowledge lasts until the tracker is reset: every cursor reset of the subscription
  calls :meth:`clear` (which retires every bucket); an ack, a skip or any other bump of the
  cursor's revision does not touch it, so messages held unacknowledged by consumers are never
  handed out twice.

Recovery: the snapshot side rebuilds the immutable buckets from the cursor properties (and
the snapshots' summaries: the bucket due soonest serves before the others' metadata is read;
cancels, acknowledgements and re-reads of a bucket not read yet wait for its membership in
:class:`~broker.delayed.bucket_deferred.DeferredOps`, and the dispatcher reads no new entries
until every membership is in); the mutable bucket is rebuilt by the dispatcher's ordinary
reading from the cursor. Positions are only handed out when due; positions acknowledged before
the restart -- cancelled ones included: a PIP-423 cancel's durable record is the
subscription's acknowledgement of its target (:mod:`broker.delayed.cancels`) -- are filtered
with ``cursor.is_deleted`` as they come up, so nothing is replayed per cancel. A cancel
journal an earlier version left is applied as acknowledgements first, once
(:mod:`broker.delayed.cancel_journal`).

Metrics (plain attributes; :meth:`stats` is the typed form): ``bucket_count`` (immutable + the
mutable one), ``loaded_index_count``, ``snapshot_size_bytes``, ``op_count``
{(create|load|delete|merge, succeed|failed): n}, ``op_latency_buckets`` {type: counts per bound
<= 50, 100, 500, 1000, 5000, 30000, 60000 ms + overflow}, ``op_latency_sum_ms``, ``memory_bytes``.
"""

from __future__ import annotations

import asyncio
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Final

from pyroaring import BitMap

from broker.delayed.bucket_deferred import ADD, CANCEL, FORGET, DeferredOps
from broker.delayed.bucket_records import (
    BUCKET_KEY_PREFIX,
    LoadedSegment,
    SealedBuckets,
    bucket_key,
    parse_bucket_key,
)
from broker.delayed.bucket_segments import PRELOAD_MS, RetryDelays
from broker.delayed.bucket_snapshots import BucketSnapshots
from broker.delayed.cancel_journal import retire_journal
from broker.delayed.cancels import CancelResult
from broker.delayed.indexed import IndexedPositions, MutableBucket
from broker.delayed.packed import POSITION_BITS, WideIndex, fits, run_end_union
from broker.delayed.ports import BucketCursor, SnapshotStorage
from broker.delayed.schedule_view import ScheduledSources
from broker.delayed.tracker import TimedTracker
from storage.positions import Position

#: Ledger and entry ids below this pack into one uint64 (:func:`~broker.delayed.packed.fits`).
_PACKABLE: Final = 1 << POSITION_BITS

#: Default bound of the late-entry index, in indexes.
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
        self._mutable = MutableBucket()
        # in-memory only: positions of sealed ledgers that were not indexed there
        self._late = IndexedPositions()
        self._max_late = max(max_late_index_count, 1)
        self._wide = WideIndex()
        # the immutable buckets, their snapshots, and which of their segments are in memory
        self._sealed = SealedBuckets()
        # what is asked about buckets recovered from their summary whose membership is not
        # read yet, applied when it is (bucket_deferred)
        self._deferred = DeferredOps()
        self._snapshots = BucketSnapshots(
            buckets=self._sealed, cursor=cursor, store=snapshots, on_change=self._on_timer,
            on_membership=lambda bucket: self._deferred.replay(
                bucket, self._sealed, self.add, self._late.add, self._late.discard),
            loop=loop, executor=executor, time_step_ms=time_step_per_segment_ms,
            max_indexes_per_segment=max_indexes_per_segment, max_num_buckets=max_num_buckets,
            horizon=lambda: self._cutoff() + PRELOAD_MS, retry=retry)
        self._loader = self._snapshots.loader
        self._due = _DueQueue((self._mutable, self._late), self._wide, self._sealed,
                              self._loader.segment_done, cursor.is_deleted)
        self._store = snapshots
        #: reads of an earlier version's cancel journal that failed (cancel_journal)
        self.cancel_journal_failures = 0
        self._closed = False

    # --- time and timer --------------------------------------------------------------------

    def _head_ts(self) -> int | None:
        # The timer also fires PRELOAD_MS before a parked segment falls due, to load it.
        head = self._due.head()
        parked = self._sealed.parked_head()
        if parked is not None and (head is None or parked - PRELOAD_MS < head):
            return parked - PRELOAD_MS
        return head

    # --- add / cancel / contains -----------------------------------------------------------

    def add(self, position: Position, deliver_at_ms: int) -> bool:
        ledger_id, entry_id = position
        records = self._sealed
        sealed = ledger_id <= records.last_end_ledger
        # Hot path: a position past every sealed bucket with nothing retired needs no lookup.
        if (sealed or records.retired) and records.holds(ledger_id, entry_id):
            return True                         # pending, or handed out since the last reset
        if sealed and records.reading and records.reading_at(ledger_id):
            self._deferred.defer(ledger_id, entry_id, deliver_at_ms, ADD)
            return True                         # decided once the bucket is read
        if not (0 <= ledger_id < _PACKABLE and 0 <= entry_id < _PACKABLE):   # fits(), inlined
            if position in self._wide.members:
                return True
            if deliver_at_ms < 0 or deliver_at_ms <= self._cutoff():
                return False
            self._wide.add(deliver_at_ms, ledger_id, entry_id)
            self._update_timer()
            return True
        in_flight = self._cancels.in_flight
        if in_flight and position in in_flight:
            return True                         # cancelled (PIP-423), its ack on its way
        mutable = self._mutable
        bm = mutable.members.get(ledger_id)
        if bm is not None and entry_id in bm:
            return True                         # re-read of a tracked entry
        late = self._late
        if late.count and late.contains(ledger_id, entry_id):
            return True
        now = self._clock_ms()
        if deliver_at_ms < 0 or deliver_at_ms <= (now if self._strict else now + self._tick_ms):
            return False
        if sealed or (mutable.count and ledger_id < mutable.start):
            # Sealed ledgers (or older than the mutable bucket): in memory only, so bucket
            # ranges never overlap. A restart re-reads these entries anyway.
            late.add(deliver_at_ms, ledger_id, entry_id)
        else:
            if mutable.count >= self._min_index_count and ledger_id > mutable.end:
                self._snapshots.seal(*mutable.take_all())   # a new immutable bucket
            mutable.add(deliver_at_ms, ledger_id, entry_id)
        target = self._timer.target_ms
        if target is None or deliver_at_ms - (0 if self._strict else self._tick_ms) < target:
            self._update_timer()
        return True

    def cancel(self, position: Position) -> bool:
        ledger_id, entry_id = position
        if not fits(ledger_id, entry_id):
            if position not in self._wide.members:
                return False
            self._wide.members.discard(position)
            return True
        bucket = self._sealed.take(ledger_id, entry_id)
        if bucket is not None:
            self._snapshots.bucket_emptied(bucket)
        elif self._sealed.reading and self._sealed.reading_at(ledger_id):
            self._deferred.defer(ledger_id, entry_id, -1, FORGET)
            return False                        # cleared once the bucket is read
        elif not (self._mutable.discard(ledger_id, entry_id)
                  or self._late.discard(ledger_id, entry_id)):
            return False
        self._update_timer()
        return True

    def cancel_delayed(self, position: Position, deliver_at_ms: int) -> CancelResult:
        cancels = self._cancels
        if deliver_at_ms <= self._cutoff():
            return cancels.refuse()
        if cancels.again(position):
            return CancelResult.APPLIED         # cancelled already, its ack on its way
        ledger_id, entry_id = position
        if not fits(ledger_id, entry_id):
            if not self.cancel(position):
                return CancelResult.NOT_FOUND
            return cancels.accept(position, deliver_at_ms, cleared=True)
        if self._cursor.is_deleted(position):
            return CancelResult.NOT_FOUND       # acknowledged: nothing to cancel
        if self._sealed.reading and self._sealed.reading_at(ledger_id):
            # its bucket's membership is not read yet: its pending bit is cleared when it is
            # (bucket_deferred); nothing was handed out of it later than the cutoff
            self._deferred.defer(ledger_id, entry_id, deliver_at_ms, CANCEL)
            return cancels.accept(position, deliver_at_ms, cleared=False)
        cleared = self.cancel(position)
        if not cleared and self._sealed.holds(ledger_id, entry_id):
            return CancelResult.NOT_FOUND       # a consumer has it already
        return cancels.accept(position, deliver_at_ms, cleared=cleared)

    def sequential_skip(self, position: Position) -> int:
        # The same verdicts as add(): held by a sealed bucket (pending or handed out since the
        # last reset, retired buckets included), or in the mutable/late-entry members.
        ledger_id = position.ledger_id
        sets = [self._mutable.ledger_members(ledger_id), self._late.ledger_members(ledger_id),
                *self._sealed.held_sets(ledger_id)]
        return run_end_union(sets, position.entry_id)

    def contains(self, position: Position) -> bool:
        ledger_id, entry_id = position
        if not fits(ledger_id, entry_id):
            return position in self._wide.members
        bucket = self._sealed.find(ledger_id)
        if bucket is not None and bucket.is_pending(ledger_id, entry_id):
            return True
        return self._mutable.contains(ledger_id, entry_id) \
            or self._late.contains(ledger_id, entry_id)

    def pending_entry_ids(self, ledger_id: int, entries: int) -> BitMap | None:
        if entries and not fits(ledger_id, entries - 1):
            return None     # some of them are wide positions
        # contains()'s three places, as one union
        bucket = self._sealed.find(ledger_id)
        sets = [s for s in (bucket.pending.get(ledger_id) if bucket is not None else None,
                            self._mutable.ledger_members(ledger_id),
                            self._late.ledger_members(ledger_id)) if s]
        return BitMap.union(*sets) if sets else BitMap()

    def __len__(self) -> int:
        return (self._mutable.count + self._late.count + self._sealed.sealed_remaining
                + len(self._wide))

    # --- delivery ----------------------------------------------------------------------------

    def has_message_available(self) -> bool:
        self._loader.unpark()
        head = self._due.head()
        available = head is not None and head <= self._sealed.limit(self._cutoff())
        if not available:
            self._update_timer()
        return available

    def get_scheduled(self, max_messages: int) -> list[Position]:
        if self._closed:
            return []
        self._expire_cancels()
        self._loader.unpark()
        out = self._due.take(max_messages, self._cutoff())
        self._update_timer()
        return out

    def scheduled_sources(self) -> ScheduledSources:
        """The mutable bucket, the late-entry index and the loaded segments; the pending
        positions of segments only on disk are counted as ``not_loaded``."""
        segments = tuple(b.loaded for b in self._sealed if b.alive and b.loaded is not None)
        in_segments = sum(len(seg.ts) - seg.i for seg in segments if seg.live)
        sealed_pending = sum(b.remaining for b in self._sealed if b.alive)
        return ScheduledSources(indexes=(self._mutable, self._late), segments=segments,
                                wide=tuple(self._wide.items()),
                                not_loaded=max(0, sealed_pending - in_segments))

    def next_due_ms(self) -> int | None:
        heads = [h for h in (self._due.head(), self._sealed.parked_head()) if h is not None]
        return min(heads) if heads else None

    def last_due_ms(self) -> int | None:
        """From the indexes in memory and, for a sealed bucket, the first time of its last
        segment (its later times are on disk)."""
        lasts = [self._mutable.index.last_ts(), self._late.index.last_ts()]
        wide = self._wide.items()
        if wide:
            lasts.append(wide[-1][0])
        for bucket in self._sealed:
            if bucket.alive and bucket.remaining and bucket.segment_min_ts:
                lasts.append(bucket.segment_min_ts[-1])
            if bucket.alive and bucket.loaded is not None and bucket.loaded.live:
                lasts.append(bucket.loaded.ts[-1])
        live = [t for t in lasts if t is not None]
        return max(live) if live and len(self) else None

    def on_rewind(self) -> None:
        return  # durable: the snapshots stay valid, the re-read skips what they hold

    def clear(self) -> None:
        self._snapshots.clear()
        self._deferred.clear()
        self._mutable.clear()
        self._late.clear()
        self._wide.clear()
        self._timer.cancel()

    async def close(self) -> None:
        self._closed = True
        self._timer.cancel()
        await self._snapshots.close()

    def should_pause_all_deliveries(self) -> bool:
        # The late-entry index is in memory only: bounded by pausing new reads until due
        # entries drain it (replays and due hand-outs go on; nothing is dropped or early).
        # Also while a recovered bucket's membership is not read: a re-read entry of its
        # ledgers could not be told held or not (bucket_deferred).
        return self._late.count >= self._max_late or self._sealed.reading > 0

    async def recover(self) -> None:
        # what is due already is late whatever its order: each bucket's share goes out as
        # soon as its first segment is in (bucket_records)
        self._sealed.overdue_to = self._cutoff()
        # An earlier version's cancel journal: its targets acknowledged first, once.
        try:
            await retire_journal(self._cursor, self._store)
        except Exception:
            self.cancel_journal_failures += 1
            raise
        await self._snapshots.recover()
        self._on_timer()

    # --- metrics and introspection -------------------------------------------------------------

    @property
    def snapshot_size_bytes(self) -> int:
        return self._snapshots.ops.snapshot_size_bytes

    @property
    def op_count(self) -> dict[tuple[str, str], int]:
        return self._snapshots.ops.op_count

    @property
    def op_latency_buckets(self) -> dict[str, list[int]]:
        return self._snapshots.ops.op_latency_buckets

    @property
    def op_latency_sum_ms(self) -> dict[str, float]:
        return self._snapshots.ops.op_latency_sum_ms

    @property
    def bucket_count(self) -> int:
        return len(self._sealed) + 1

    @property
    def loaded_index_count(self) -> int:
        return (self._mutable.indexed + self._late.indexed + len(self._wide)
                + self._sealed.loaded_index_count)

    @property
    def memory_bytes(self) -> int:
        total = self._mutable.memory_bytes + self._late.memory_bytes + self._sealed.memory_bytes
        total += self._cancels.memory_bytes
        return total + (self._wide.memory_bytes if self._wide else 0)

    @property
    def sealed(self) -> SealedBuckets:
        """The immutable buckets (read-only use: tests, benchmarks): ``ranges``, the segments
        ``loading`` (on_due follows when they make something due)."""
        return self._sealed

    async def wait_idle(self) -> None:
        """Wait for background snapshot work (tests and benchmarks)."""
        await self._snapshots.wait_idle()


#: guesses of the time up to which a take fits before the merge takes all of it
EARLIEST_TRIES = 4
#: takes of the earliest run in one hand-out before the merge takes the rest
EARLIEST_ROUNDS = 4
#: a hand-out of fewer goes through the merge alone (its count would read more than it takes)
EARLIEST_MIN_TAKE = 16
#: counting stops past this many takes' worth (a herd is not counted to its end; a segment
#: is counted in one bisection, the index in memory a column at a time)
EARLIEST_COUNT_CAP = 64


class _DueQueue:
    """One hand-out over every source of due indexes: the indexed positions in memory (the
    mutable bucket, the late-entry index), the loaded segments of the sealed buckets and the
    positions too wide to pack."""

    __slots__ = ("_done", "_indexes", "_is_deleted", "_sealed", "_wide")

    def __init__(self, indexes: tuple[IndexedPositions, ...], wide: WideIndex,
                 sealed: SealedBuckets, segment_done: Callable[[LoadedSegment], None],
                 is_deleted: Callable[[Position], bool]) -> None:
        self._indexes = indexes
        self._wide = wide
        self._sealed = sealed
        self._done = segment_done
        self._is_deleted = is_deleted

    def head(self) -> int | None:
        """The earliest deliver time in memory (stale heads dropped on the way)."""
        heads = [p.head_ts() for p in self._indexes]
        heads.append(self._wide.peek_ts())
        heads.append(self._sealed.head(self._done))
        live = [h for h in heads if h is not None]
        return min(live) if live else None

    def take(self, max_messages: int, cutoff: int) -> list[Position]:
        """Up to ``max_messages`` due positions, the earliest (time, position) first across the
        sources, then sorted by position."""
        out: list[Position] = []
        sealed = self._sealed
        limit_ts = sealed.limit(cutoff)
        rounds = 2 * max_messages + 1000        # each merge round consumes at least one entry
        for _ in range(EARLIEST_ROUNDS if max_messages >= EARLIEST_MIN_TAKE else 0):
            if len(out) >= max_messages:
                break
            bound, ran_dry = self._take_earliest(max_messages - len(out), limit_ts, out)
            if bound is None:
                break
            if ran_dry:                             # their bound is lifted: the next
                limit_ts = sealed.limit(cutoff)     # segments may be in already
            elif bound == limit_ts:
                rounds = 0                          # all that is due is out: no merge
                break
        # A k-way merge of the source heads: each round takes, from the source whose head is
        # the smallest (time, position), the run of entries below every other source's head.
        # The loaded segments are one heap, so a round costs O(run + log segments) whatever
        # the number of segments; the sources in memory are a handful.
        while len(out) < max_messages and rounds:
            rounds -= 1
            best: IndexedPositions | None = None
            best_key: tuple[int, int] | None = None
            other: tuple[int, int] | None = None   # the smallest head of every other source
            for positions in self._indexes:
                index = positions.index
                head_ts = index.peek_ts()
                if head_ts is None:
                    continue
                key = (head_ts, index.peek_packed())
                if best_key is None or key < best_key:
                    if best_key is not None and (other is None or best_key < other):
                        other = best_key
                    best, best_key = positions, key
                elif other is None or key < other:
                    other = key
            top = sealed.top()
            if top is not None:
                key = (top[0], top[1])
                if best_key is None or key < best_key:
                    if best_key is not None and (other is None or best_key < other):
                        other = best_key
                    second = sealed.second_key()
                    if second is not None and (other is None or second < other):
                        other = second
                    best, best_key = None, key
                elif other is None or key < other:
                    other = key
            if best_key is None or best_key[0] > limit_ts:
                break
            need = max_messages - len(out)
            if best is not None:
                self._take_index_run(best, limit_ts, other, need, out)
                continue
            assert top is not None
            seg = top[3]
            if best_key[0] <= sealed.overdue_to:
                # due already when the tracker recovered: late whatever the order, so the
                # segment's whole overdue run goes at once, not interleaved entry by entry
                # with thousands of other segments' (one heap step per segment, not per entry)
                end = _run_end(seg.ts, seg.pos, seg.i, min(limit_ts, sealed.overdue_to),
                               None, need)
            else:
                end = _run_end(seg.ts, seg.pos, seg.i, limit_ts, other, need)
            _, exhausted = sealed.take_run(end, out, self._is_deleted)
            if exhausted is not None:
                self._done(exhausted)           # its next segment: a new barrier or in memory
                limit_ts = sealed.limit(cutoff)
        if len(out) < max_messages and self._wide:
            self._wide.pop_due(cutoff, max_messages - len(out), out)
        out.sort()
        return out

    def _take_earliest(self, max_messages: int, limit_ts: int,
                       out: list[Position]) -> tuple[int | None, bool]:
        """Take, one step a source, every index at or before a time ``bound`` (``limit_ts``
        when all of them fit) when there are at most ``max_messages`` of them: exactly what
        the merge would take first, since everything at or before ``bound`` comes before
        anything later, and ``out`` is sorted by position. Under random delays every loaded
        segment has about one entry due a millisecond, and the merge takes one heap step
        for each. Answers the time it took everything up to (None: nothing taken this way,
        the merge takes it; ``limit_ts`` with nothing taken: nothing is due), and whether a
        segment ran dry doing so (its next one may serve at once)."""
        heads = [ts for ts in (p.peek_ts() for p in self._indexes) if ts is not None]
        top = self._sealed.top()
        if top is not None:
            heads.append(top[0])
        if not heads:
            return limit_ts, False              # nothing tracked
        first = min(heads)
        if first > limit_ts:
            return limit_ts, False              # nothing due
        bound = limit_ts
        for _ in range(EARLIEST_TRIES):        # each guess is at or after first
            cap = EARLIEST_COUNT_CAP * max_messages
            count = sum(p.count_upto(bound, cap) for p in self._indexes)
            if count <= cap:
                count += self._sealed.due_count(bound, cap - count)
            if count <= max_messages:
                break
            if bound == first:
                return None, False              # a herd in one millisecond: the merge
            # a little before where ``max_messages`` would end if the due times were spread
            # evenly (past the cap the count is short: the guess lands late, and is retried)
            bound = first + (bound - first) * max_messages * 7 // (count * 8)
        else:
            return None, False
        if not count:
            return bound, False                 # nothing due up to it
        for positions in self._indexes:
            positions.pop_upto(bound, max_messages, out)
        exhausted = self._sealed.take_all_due(bound, out, self._is_deleted)
        for loaded in exhausted:
            self._done(loaded)                  # its next segment: a new barrier or in memory
        return bound, bool(exhausted)

    @staticmethod
    def _take_index_run(positions: IndexedPositions, limit_ts: int,
                        other: tuple[int, int] | None, need: int, out: list[Position]) -> int:
        """Consume from an index in memory its entries below ``other`` (the next source's
        head) and at or before ``limit_ts``, at most ``need``; at least its head."""
        if other is None or other[0] > limit_ts:
            return positions.pop_upto(limit_ts, need, out)
        other_ts, other_pos = other
        consumed = positions.pop_upto(other_ts - 1, need, out)
        if consumed < need and positions.peek_ts() == other_ts:
            run = positions.index.peek_run(other_ts, need - consumed)
            count = bisect_left(run, other_pos)
            if count:
                consumed += positions.pop_upto(other_ts, count, out)
        if not consumed:                        # ties with a dead or stale head elsewhere
            consumed = positions.pop_upto(limit_ts, 1, out)
        return consumed


def _run_end(ts: array[int], pos: array[int], i: int, limit_ts: int,
             other: tuple[int, int] | None, need: int) -> int:
    """The end offset of a segment's run from offset ``i``: entries at or before ``limit_ts``,
    below ``other`` in (time, position), at most ``need``, at least one."""
    if other is None or other[0] > limit_ts:
        end = bisect_right(ts, limit_ts, i)
    else:
        other_ts, other_pos = other
        end = bisect_left(ts, other_ts, i)
        if end < len(ts) and ts[end] == other_ts:
            end = bisect_left(pos, other_pos, end, bisect_right(ts, other_ts, end))
    return max(min(end, i + need), i + 1)
