"""Packed building blocks of the trackers: a time-ordered index in machine-word arrays.

Theory of operation
-------------------
A delayed position is ``(deliver_at_ms, ledger_id, entry_id)``. A heap of Python tuples costs
~170 bytes per message; Pulsar's Java index ~24. :class:`PackedTimeIndex` keeps two parallel
``array`` columns per chunk, ``deliver_at_ms`` (int64) and the position packed into one
uint64 (``ledger_id << 32 | entry_id``), sorted by time: 16 bytes per message plus array
over-allocation (~6 %) and one small header per chunk of up to ``2 * CHUNK`` entries.

- push: appending at the tail (the usual case: fixed delays, or delays that grow with publish
  time) is an ``array.append``; an earlier time bisects the chunk maxima, then the chunk, and
  inserts there (a memmove of at most ``2 * CHUNK`` words). A chunk over ``2 * CHUNK`` splits.
- pop: due entries are taken from the head chunk as one slice (bisect on the time column);
  the consumed prefix of the head chunk is just skipped (``_head``) and freed with the chunk.
- ties keep insertion order; callers sort their output by position.

The index is a multiset and knows nothing about cancellation: trackers keep a membership
bitmap per ledger and drop stale entries lazily when they reach the head, or filter them out
with :meth:`PackedTimeIndex.retain` (one pass; the chunks refilled to ``CHUNK`` entries) or
:meth:`PackedTimeIndex.retain_from` (a few chunks per call), both with the per-entry work in C
(``map`` of a C membership test, ``itertools.compress``).

Positions that do not fit 32+32 bits (never produced by Horae's storage, which numbers ledgers
from a store-wide counter and caps entries per ledger) go to :class:`WideIndex`, a plain heap.
"""

from __future__ import annotations

import heapq
import sys
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import compress, repeat
from operator import sub

from pyroaring import BitMap, BitMap64

from storage.positions import Position

_insert_run: Callable[[object, list[array[int]], list[array[int]], list[int], Sequence[int],
                       Sequence[int]], tuple[int, list[int]]] | None
try:
    from broker.delayed._packed_accel import insert_run as _insert_run
except ImportError:     # built without a compiler: push_run_py, same results
    _insert_run = None

#: Entries per chunk before it may split (at twice this).
CHUNK = 1024
_SPLIT = 2 * CHUNK
_EMPTY: array[int] = array("q")
#: Cancelled entries a :class:`WideIndex` keeps whatever its live count.
_WIDE_STALE_FLOOR = 1024

POSITION_BITS = 32
POSITION_MASK = (1 << POSITION_BITS) - 1
_LIMIT = 1 << POSITION_BITS


def fits(ledger_id: int, entry_id: int) -> bool:
    """Can the position be packed into one uint64?"""
    return 0 <= ledger_id < _LIMIT and 0 <= entry_id < _LIMIT


def pack(ledger_id: int, entry_id: int) -> int:
    return (ledger_id << POSITION_BITS) | entry_id


def unpack(packed: int) -> tuple[int, int]:
    return packed >> POSITION_BITS, packed & POSITION_MASK


def run_end(bm: BitMap | None, start: int) -> int:
    """The first value >= ``start`` that is not in ``bm`` (binary search on ranges, O(log n))."""
    if bm is None or not 0 <= start < _LIMIT or start not in bm:
        return start
    lo, hi = start + 1, bm.max() + 1        # [start, lo) is in bm; hi is not
    while lo < hi:
        mid = (lo + hi) // 2
        if bm.contains_range(start, mid + 1):
            lo = mid + 1
        else:
            hi = mid
    return lo


def run_end_union(bitmaps: list[BitMap | None], start: int) -> int:
    """The first value >= ``start`` in none of ``bitmaps``."""
    live = [bm for bm in bitmaps if bm]
    pos = start
    while live:
        before = pos
        for bm in live:
            pos = run_end(bm, pos)
        if pos == before:
            break
    return pos


def make_positions(ledger_ids: Iterable[int], entry_ids: Iterable[int]) -> Iterator[Position]:
    """Positions from paired ids (``ledger_ids`` may be endless: a ``repeat``), built by
    ``tuple.__new__`` in C: the NamedTuple's own ``__new__`` is a Python call, twice the cost
    of everything else a hand-out does per position."""
    return map(tuple.__new__, repeat(Position), zip(ledger_ids, entry_ids, strict=False))


def take_members(buf: list[int], members: dict[int, BitMap], out: list[Position]) -> int:
    """Move the packed positions of ``buf`` still in ``members`` to ``out``, as positions.

    A position no longer in its ledger's bitmap was cancelled or already handed out: skipped.
    Returns how many were taken. The usual buffer -- one ledger's positions, each still a
    member, none twice -- moves with a few bitmap operations instead of one per position.
    """
    if len(buf) > 8:
        ledger_id = min(buf) >> POSITION_BITS
        bm = members.get(ledger_id)
        if bm is not None and max(buf) >> POSITION_BITS == ledger_id:
            base = ledger_id << POSITION_BITS
            entry_ids = list(map(sub, buf, repeat(base)))   # packed - base, in C
            wanted = BitMap(entry_ids)
            if len(wanted) == len(entry_ids) and wanted.issubset(bm):
                bm.difference_update(wanted)
                if not bm:
                    del members[ledger_id]
                out.extend(make_positions(repeat(ledger_id), entry_ids))
                return len(entry_ids)
    ledgers: list[int] = []
    entries: list[int] = []
    for packed in buf:
        ledger_id = packed >> POSITION_BITS
        entry_id = packed & POSITION_MASK
        bm = members.get(ledger_id)
        if bm is not None and entry_id in bm:
            bm.discard(entry_id)      # checked: remove() is 5x slower in pyroaring
            if not bm:
                del members[ledger_id]
            ledgers.append(ledger_id)
            entries.append(entry_id)
    out.extend(make_positions(ledgers, entries))
    return len(entries)


def bitmap_bytes(bm: BitMap | BitMap64) -> int:
    """Estimated heap bytes of a roaring bitmap: container payloads plus headers.

    CRoaring allocates with malloc, invisible to tracemalloc and ``sys.getsizeof``; its
    statistics give the payload sizes, to which we add the bitmap object (~64 B) and ~16 B of
    bookkeeping per container.
    """
    s = bm.get_statistics()
    return (64 + 16 * s["n_containers"] + s["n_bytes_array_containers"]
            + s["n_bytes_run_containers"] + s["n_bytes_bitset_containers"])


class PackedTimeIndex:
    """A sorted multiset of ``(deliver_at_ms, packed position)`` in chunked arrays."""

    __slots__ = ("_head", "_len", "_maxes", "_pos", "_ts")

    def __init__(self) -> None:
        self._ts: list[array[int]] = []
        self._pos: list[array[int]] = []
        self._maxes: list[int] = []        # last (largest) time of each chunk
        self._head = 0                     # consumed prefix of chunk 0
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def __bool__(self) -> bool:
        return self._len > 0

    def push(self, ts: int, packed: int) -> None:
        maxes = self._maxes
        if not maxes:
            self._ts.append(array("q", (ts,)))
            self._pos.append(array("Q", (packed,)))
            maxes.append(ts)
            self._len = 1
            return
        last = maxes[-1]
        if ts > last or (ts == last and packed >= self._pos[-1][-1]):
            # at the tail (fixed delays, or delays growing with publish time)
            ts_col = self._ts[-1]
            ts_col.append(ts)
            self._pos[-1].append(packed)
            maxes[-1] = ts
            self._len += 1
            if len(ts_col) > _SPLIT:
                self._split(len(maxes) - 1)
            return
        # (time, position) order: entries of one time sorted by position
        i = bisect_left(maxes, ts)     # first chunk whose last time is >= ts
        while True:
            ts_col, pos_col = self._ts[i], self._pos[i]
            j = bisect_left(ts_col, ts, self._head if i == 0 else 0)
            if j < len(ts_col) and ts_col[j] == ts:     # a run of this time: by position
                j = bisect_right(pos_col, packed, j, bisect_right(ts_col, ts, j))
            if j < len(ts_col) or i + 1 == len(maxes) or self._ts[i + 1][0] != ts \
                    or self._pos[i + 1][0] > packed:
                break
            i += 1                      # the run of this time goes on in the next chunk
        ts_col.insert(j, ts)
        pos_col.insert(j, packed)
        self._len += 1
        if len(ts_col) > _SPLIT:
            self._split(i)

    def push_run(self, times: Sequence[int], packed: Sequence[int]) -> None:
        """:meth:`push` of each ``(times[k], packed[k])``: the same entries in the same order,
        in one pass (:meth:`push_run_py`; its loop in C, ``broker/delayed/_packed_accel.c``,
        when that is built)."""
        if _insert_run is None or len(times) < 4 or not self._maxes:
            self.push_run_py(times, packed)
            return
        inserted, touched = _insert_run(self, self._ts, self._pos, self._maxes, times, packed)
        self._len += inserted
        self._split_touched(touched)

    def push_run_py(self, times: Sequence[int], packed: Sequence[int]) -> None:
        """The reference of :meth:`push_run`, and what it runs without its C twin. The pairs
        are sorted first, so each goes in after the one before: the chunk and the offset in it
        are searched from where the last went (the chunk only moves on, as the times grow), and
        the chunks touched split once at the end (:meth:`_split_touched`). A pair whose time
        the index holds already (a run of one time is ordered by position, possibly across
        chunks) takes :meth:`push` itself."""
        if len(times) < 4 or not self._maxes:
            for ts, one in zip(times, packed, strict=True):
                self.push(ts, one)
            return
        pairs = sorted(zip(times, packed, strict=True))
        maxes, ts_cols, pos_cols = self._maxes, self._ts, self._pos
        last = len(maxes) - 1
        i = min(bisect_left(maxes, pairs[0][0]), last)
        touched = [i]
        ts_col, pos_col = ts_cols[i], pos_cols[i]
        lo = self._head if i == 0 else 0
        for ts, one in pairs:
            if maxes[i] < ts and i < last:
                i = min(bisect_left(maxes, ts, i + 1), last)   # first chunk ending at or after
                ts_col, pos_col = ts_cols[i], pos_cols[i]
                lo = 0
                touched.append(i)
            if ts > maxes[i] or lo == len(ts_col):  # the tail (lo is there after a tail one)
                ts_col.append(ts)
                pos_col.append(one)
                maxes[i] = ts
                lo = len(ts_col)
                continue
            j = bisect_left(ts_col, ts, lo)     # < len(ts_col): maxes[i] >= ts
            if ts_col[j] == ts:                 # this time is held: by position, as push does
                self._len -= 1                  # (push counts it again)
                self.push(ts, one)
                last = len(maxes) - 1           # push may have split a chunk
                i = min(bisect_left(maxes, ts), last)
                touched += (i, i + 1) if i < last else (i,)   # (i + 1: the upper half)
                ts_col, pos_col = ts_cols[i], pos_cols[i]
                lo = self._head if i == 0 else 0
                continue
            ts_col.insert(j, ts)
            pos_col.insert(j, one)
            lo = j + 1
        self._len += len(pairs)
        self._split_touched(touched)

    def _split_touched(self, touched: Sequence[int]) -> None:
        """Split the chunks of a run's insert that are over their size. ``touched``: their
        indexes as they are after the run (repeats allowed; a :meth:`push` of a tie splits
        at most the chunk it names, and the run's later chunks come after it). They are split
        from the last one down, so a split never moves a chunk still to split; each is split
        until its parts fit."""
        ts_cols = self._ts
        for k in sorted(set(touched), reverse=True):
            end = k
            while k <= end:
                if len(ts_cols[k]) > _SPLIT:
                    self._split(k)      # chunk k again: its lower half may still be over
                    end += 1            # and its upper half, next
                else:
                    k += 1

    def _split(self, i: int) -> None:
        ts_col, pos_col = self._ts[i], self._pos[i]
        if i == 0 and self._head:
            del ts_col[:self._head]
            del pos_col[:self._head]
            self._head = 0
            if len(ts_col) <= _SPLIT:
                return
        half = len(ts_col) // 2
        self._ts.insert(i + 1, ts_col[half:])
        self._pos.insert(i + 1, pos_col[half:])
        del ts_col[half:]
        del pos_col[half:]
        self._maxes[i] = ts_col[-1]
        self._maxes.insert(i + 1, self._ts[i + 1][-1])

    def peek_ts(self) -> int | None:
        """Earliest time, or None when empty."""
        return self._ts[0][self._head] if self._len else None

    def peek_packed(self) -> int:
        """Packed position of the earliest entry (the index must not be empty)."""
        return self._pos[0][self._head]

    def drop_head(self) -> None:
        """Remove the earliest entry (the index must not be empty)."""
        self._len -= 1
        self._head += 1
        if self._head == len(self._ts[0]):
            del self._ts[0], self._pos[0], self._maxes[0]
            self._head = 0

    def pop_upto(self, bound_ts: int, limit: int, out: list[int]) -> int:
        """Move up to ``limit`` entries with time <= ``bound_ts``, earliest first, into ``out``
        (packed positions). Returns how many were moved."""
        moved = 0
        while moved < limit and self._len:
            ts_col = self._ts[0]
            h = self._head
            if ts_col[h] > bound_ts:
                break
            end = min(bisect_right(ts_col, bound_ts, h), h + limit - moved)
            out.extend(self._pos[0][h:end])
            moved += end - h
            self._len -= end - h
            if end == len(ts_col):
                del self._ts[0], self._pos[0], self._maxes[0]
                self._head = 0
            else:
                self._head = end
        return moved

    def peek_run(self, ts: int, limit: int) -> list[int]:
        """The packed positions of up to ``limit`` entries at the head with time == ``ts``
        (position order), not consumed."""
        out: list[int] = []
        for c, ts_col in enumerate(self._ts):
            start = self._head if c == 0 else 0
            if ts_col[start] != ts:
                break
            end = min(bisect_right(ts_col, ts, start), start + limit - len(out))
            out.extend(self._pos[c][start:end])
            if end < len(ts_col) or len(out) >= limit:
                break
        return out

    def count_upto(self, bound_ts: int, cap: int | None = None) -> int:
        """Entries with time <= ``bound_ts``; once past ``cap``, some count above it."""
        count = 0
        for c, ts_col in enumerate(self._ts):
            start = self._head if c == 0 else 0
            if self._maxes[c] <= bound_ts:
                count += len(ts_col) - start
                if cap is not None and count > cap:
                    return count
            else:
                return count + bisect_right(ts_col, bound_ts, start) - start
        return count

    def columns(self) -> tuple[array[int], array[int]]:
        """All entries as two new arrays (time, packed position), in time order."""
        ts_out: array[int] = array("q")
        pos_out: array[int] = array("Q")
        for c, (ts_col, pos_col) in enumerate(zip(self._ts, self._pos, strict=True)):
            start = self._head if c == 0 else 0
            ts_out.extend(ts_col[start:])
            pos_out.extend(pos_col[start:])
        return ts_out, pos_out

    def items(self) -> Iterator[tuple[int, int]]:
        """All ``(deliver_at_ms, packed)`` pairs in time order (do not mutate meanwhile)."""
        for c, (ts_col, pos_col) in enumerate(zip(self._ts, self._pos, strict=True)):
            start = self._head if c == 0 else 0
            yield from zip(ts_col[start:], pos_col[start:], strict=True)

    def last_ts(self) -> int | None:
        """Latest time, or None when empty."""
        return self._maxes[-1] if self._len else None

    def window(self, from_ts: int, count: int) -> tuple[array[int], array[int]]:
        """Copies of entries with time >= ``from_ts``, in time order: at least ``count`` of
        them (all when fewer), and every entry sharing the last copied time. Whole slices are
        copied (no per-entry Python work), so an admin listing can order them off the loop."""
        ts_out: array[int] = array("q")
        pos_out: array[int] = array("Q")
        for c in range(bisect_left(self._maxes, from_ts), len(self._ts)):
            ts_col, pos_col = self._ts[c], self._pos[c]
            lo = bisect_left(ts_col, from_ts, self._head if c == 0 else 0)
            if len(ts_out) >= count:    # complete the group of the last time copied
                hi = bisect_right(ts_col, ts_out[-1], lo)
                ts_out.extend(ts_col[lo:hi])
                pos_out.extend(pos_col[lo:hi])
                if hi < len(ts_col):
                    break
            else:
                ts_out.extend(ts_col[lo:])
                pos_out.extend(pos_col[lo:])
        return ts_out, pos_out

    def retain(self, keep: Callable[[int], bool]) -> int:
        """Keep only the entries whose packed position ``keep`` accepts, in the same order;
        returns how many were kept. ``keep`` is called once per entry through ``map`` (pass a
        C callable, e.g. a bitmap's ``__contains__``, and no Python runs per entry). Old
        chunks are released as they are read, so the extra memory is about one chunk."""
        old_ts, old_pos, head = self._ts, self._pos, self._head
        new_ts: list[array[int]] = []
        new_pos: list[array[int]] = []
        cur_ts: array[int] = array("q")
        cur_pos: array[int] = array("Q")
        for c in range(len(old_ts)):
            ts_col, pos_col = old_ts[c], old_pos[c]
            old_ts[c] = old_pos[c] = _EMPTY
            if c == 0 and head:
                ts_col, pos_col = ts_col[head:], pos_col[head:]
            mask = bytes(map(keep, pos_col))
            cur_ts.extend(compress(ts_col, mask))
            cur_pos.extend(compress(pos_col, mask))
            if len(cur_ts) > _SPLIT:
                new_ts.append(cur_ts[:CHUNK])
                new_pos.append(cur_pos[:CHUNK])
                del cur_ts[:CHUNK], cur_pos[:CHUNK]
            if len(cur_ts) >= CHUNK:
                new_ts.append(cur_ts)
                new_pos.append(cur_pos)
                cur_ts, cur_pos = array("q"), array("Q")
        if cur_ts:
            if new_ts and len(new_ts[-1]) + len(cur_ts) <= _SPLIT:
                new_ts[-1].extend(cur_ts)
                new_pos[-1].extend(cur_pos)
            else:
                new_ts.append(cur_ts)
                new_pos.append(cur_pos)
        self._ts, self._pos = new_ts, new_pos
        self._maxes = [col[-1] for col in new_ts]
        self._head = 0
        self._len = sum(len(col) for col in new_ts)
        return self._len

    def retain_from(self, after_ts: int | None, keep: Callable[[int], bool],
                    budget: int) -> int | None:
        """One step of an incremental :meth:`retain`: filter whole chunks, from the first whose
        last time is > ``after_ts`` (from the head when None), until ``budget`` entries were
        read; a chunk left small is merged into the previous one. Returns the last time of
        the last chunk filtered (pass it to the next step), or None when the tail was reached.
        Chunks whose last time equals the returned one are skipped by the next step."""
        ts_l, pos_l, maxes = self._ts, self._pos, self._maxes
        i = 0 if after_ts is None else bisect_right(maxes, after_ts)
        read = 0
        last = after_ts
        while i < len(maxes) and read < budget:
            ts_col, pos_col = ts_l[i], pos_l[i]
            if i == 0 and self._head:
                ts_col, pos_col = ts_col[self._head:], pos_col[self._head:]
                self._head = 0              # chunk 0 is replaced below, its prefix dropped
            read += len(ts_col)
            last = maxes[i]
            mask = bytes(map(keep, pos_col))
            kept_ts = array("q", compress(ts_col, mask))
            self._len -= len(ts_col) - len(kept_ts)
            if not kept_ts:
                del ts_l[i], pos_l[i], maxes[i]
            elif i and len(ts_l[i - 1]) + len(kept_ts) <= CHUNK:
                ts_l[i - 1].extend(kept_ts)
                pos_l[i - 1].extend(compress(pos_col, mask))
                maxes[i - 1] = kept_ts[-1]
                del ts_l[i], pos_l[i], maxes[i]
            else:
                ts_l[i], pos_l[i] = kept_ts, array("Q", compress(pos_col, mask))
                maxes[i] = kept_ts[-1]
                i += 1
        return last if i < len(maxes) else None

    def clear(self) -> None:
        self._ts.clear()
        self._pos.clear()
        self._maxes.clear()
        self._head = 0
        self._len = 0

    @property
    def memory_bytes(self) -> int:
        """Bytes held: arrays at their allocated capacity plus the chunk lists."""
        total = sys.getsizeof(self._ts) + sys.getsizeof(self._pos) + sys.getsizeof(self._maxes)
        for ts_col, pos_col in zip(self._ts, self._pos, strict=True):
            total += sys.getsizeof(ts_col) + sys.getsizeof(pos_col) + 32   # + the max int
        return total


class WideIndex:
    """Fallback for positions that do not pack into 32+32 bits: a heap of tuples. The
    trackers cancel by discarding from ``members``; the heap entry is dropped when it reaches
    the top or, once the heap holds more than twice the members plus a floor, by the next
    ``add``."""

    __slots__ = ("_heap", "members")

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, int]] = []
        self.members: set[tuple[int, int]] = set()

    def __len__(self) -> int:
        return len(self.members)

    def add(self, ts: int, ledger_id: int, entry_id: int) -> bool:
        if (ledger_id, entry_id) in self.members:
            return False
        self.members.add((ledger_id, entry_id))
        heap = self._heap
        if len(heap) > 2 * len(self.members) + _WIDE_STALE_FLOOR:
            # cancelled entries outnumber the live ones: drop them (amortised O(1) per cancel)
            members = self.members
            heap[:] = [t for t in heap if (t[1], t[2]) in members]
            heapq.heapify(heap)
        heapq.heappush(heap, (ts, ledger_id, entry_id))
        return True

    def peek_ts(self) -> int | None:
        while self._heap and (self._heap[0][1], self._heap[0][2]) not in self.members:
            heapq.heappop(self._heap)       # cancelled: drop lazily
        return self._heap[0][0] if self._heap else None

    def pop_due(self, cutoff: int, limit: int, out: list[Position]) -> int:
        moved = 0
        while moved < limit and self.peek_ts() is not None and self._heap[0][0] <= cutoff:
            _, ledger_id, entry_id = heapq.heappop(self._heap)
            self.members.discard((ledger_id, entry_id))
            out.append(Position(ledger_id, entry_id))
            moved += 1
        return moved

    def items(self) -> list[tuple[int, int, int]]:
        return sorted(t for t in self._heap if (t[1], t[2]) in self.members)

    def clear(self) -> None:
        self._heap.clear()
        self.members.clear()

    @property
    def memory_bytes(self) -> int:
        return sys.getsizeof(self._heap) + sys.getsizeof(self.members) + 150 * len(self._heap)
