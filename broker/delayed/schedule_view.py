"""What a subscription has scheduled: a bounded, paged listing by due time, and a histogram.

Theory of operation
-------------------
A tracker exposes what it holds in memory as :class:`ScheduledSources`
(:meth:`~broker.delayed.tracker.DelayedDeliveryTracker.scheduled_sources`): its indexed
positions (in-memory tracker: all of them; bucket tracker: the mutable bucket and the
late-entry index), the segments of sealed buckets that are loaded, the rare wide positions, and
how many pending positions sit in sealed segments that are only on disk (``not_loaded``; the
bucket tracker loads a segment as its time approaches, and they are listed from then on).

Listing (:func:`scheduled_page`) orders entries by ``(deliver_at, ledger_id, entry_id)`` and
pages with an exclusive cursor of that triple, so a page is exact under concurrent hand-outs
and cancels: nothing live after the cursor is skipped, nothing is listed twice. Work per page
is bounded and the loop is never held on a large index:

1. each source copies a *window* of its time-ordered columns from the cursor's time on (slice
   copies, C speed; at least ``limit`` entries plus the rest of the last time's group);
2. the windows are filtered past the cursor and sorted in a worker thread when they are large
   (:data:`SORT_INLINE_MAX`); the copies are private, so the loop goes on meanwhile;
3. back on the loop, each source's candidates are checked live (handed out and cancelled ones
   stay in a time index until they reach its head or it is compacted) until ``limit`` are
   found. A source cut short (its window held only stale entries) bounds the page at the last
   key it examined, so the next page resumes there: at most :data:`MAX_ROUNDS` windows per source per page.

The histogram (:func:`pending_histogram`) counts index entries per due-time bin with the
indexes' own counting (bisection per chunk, no per-entry work). Handed-out or cancelled
positions whose index slot has not reached the head yet are still counted: ``stale`` says how
many such slots exist (the error bound). Positions in sealed segments not loaded are reported
as ``not_loaded``, not binned.

Everything but the sort runs on the event loop thread.
"""

from __future__ import annotations

import asyncio
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final

from broker.delayed.bucket_records import LoadedSegment
from broker.delayed.indexed import IndexedPositions
from broker.delayed.packed import POSITION_BITS, POSITION_MASK

__all__ = ["DEFAULT_PAGE_SIZE", "MAX_PAGE_SIZE", "HistogramBin", "PendingHistogram",
           "ScheduledKey", "ScheduledPage", "ScheduledSources", "pending_histogram",
           "scheduled_page"]

#: Page size when none is asked for, and the cap on what is asked (entries).
DEFAULT_PAGE_SIZE: Final = 100
MAX_PAGE_SIZE: Final = 1000
#: Windows one source may copy for one page before the page is cut at what it examined.
MAX_ROUNDS: Final = 8
#: Candidates filtered and sorted on the loop itself; larger windows go to a worker thread.
SORT_INLINE_MAX: Final = 20_000

#: (deliver_at_ms, ledger_id, entry_id): the listing's order and its page cursor.
ScheduledKey = tuple[int, int, int]
#: The ledger and entry id of a cursor that stands past every position due at its time.
LAST: Final = (1 << 63) - 1


@dataclass(frozen=True, slots=True)
class ScheduledSources:
    """What a tracker holds in memory, for listing (module docstring)."""

    indexes: tuple[IndexedPositions, ...] = ()
    segments: tuple[LoadedSegment, ...] = ()
    wide: tuple[ScheduledKey, ...] = ()
    not_loaded: int = 0
    """Pending positions in sealed segments that are only on disk (not listed, not binned)."""
    not_read: int = 0
    """Backlog entries past the read position not scanned yet (:mod:`broker.delayed.unread`):
    not listed, not binned."""


@dataclass(frozen=True, slots=True)
class ScheduledPage:
    entries: list[ScheduledKey]
    next_after: ScheduledKey | None
    """The cursor of the next page; None when the listing is complete."""


@dataclass(frozen=True, slots=True)
class HistogramBin:
    upper_ms: int | None
    """Inclusive upper bound (epoch ms); None for the last, open bin."""
    count: int


@dataclass(frozen=True, slots=True)
class PendingHistogram:
    bins: list[HistogramBin] = field(default_factory=list)
    stale: int = 0
    not_loaded: int = 0
    not_read: int = 0


class _Source:
    """One time-ordered source: its window copy and its liveness check."""

    __slots__ = ("live", "window")

    def __init__(self, window: Callable[[int, int], tuple[array[int], array[int]]],
                 live: Callable[[int, int], bool]) -> None:
        self.window = window
        self.live = live


def _segment_window(seg: LoadedSegment) -> Callable[[int, int], tuple[array[int], array[int]]]:
    def window(from_ts: int, count: int) -> tuple[array[int], array[int]]:
        ts, pos = seg.ts, seg.pos
        lo = bisect_left(ts, from_ts, seg.i)
        hi = min(lo + count, len(ts))
        if hi > lo:
            hi = bisect_right(ts, ts[hi - 1], hi)
        return array("q", ts[lo:hi]), array("Q", pos[lo:hi])
    return window


def _candidates(ts: Sequence[int], pos: Sequence[int], after: ScheduledKey | None
                ) -> list[ScheduledKey]:
    keys = [(t, p >> POSITION_BITS, p & POSITION_MASK) for t, p in zip(ts, pos, strict=True)]
    if after is not None:
        keys = [k for k in keys if k > after]
    keys.sort()
    return keys


def _sources(src: ScheduledSources) -> list[_Source]:
    out = [_Source(p.index.window, p.contains) for p in src.indexes]
    for seg in src.segments:
        if seg.live:
            out.append(_Source(_segment_window(seg), seg.bucket.is_pending))
    return out


async def _source_page(source: _Source, after: ScheduledKey | None, limit: int
                       ) -> tuple[list[ScheduledKey], ScheduledKey | None, bool]:
    """(live entries past *after*, at most *limit*; the last key examined; exhausted).

    A window holds every entry of its last time, so once a window is examined everything
    due up to that time is: the examined bound is then ``(time, LAST, LAST)``."""
    found: list[ScheduledKey] = []
    examined = after
    from_ts = after[0] if after is not None else -(1 << 63)
    for _ in range(MAX_ROUNDS):
        ts, pos = source.window(from_ts, limit)
        if not ts:
            return found, examined, True
        if len(ts) > SORT_INLINE_MAX:
            keys = await asyncio.to_thread(_candidates, ts, pos, after)
        else:
            keys = _candidates(ts, pos, after)
        live = source.live     # checked now, on the loop: the state the page reports
        for key in keys:
            if live(key[1], key[2]) and (not found or key != found[-1]):
                found.append(key)
                if len(found) == limit:
                    return found, key, False
        if len(ts) < limit:     # the window held everything from from_ts on
            return found, examined, True
        examined = (ts[-1], LAST, LAST)
        from_ts = ts[-1] + 1
    return found, examined, False


async def scheduled_page(src: ScheduledSources, after: ScheduledKey | None,
                         limit: int) -> ScheduledPage:
    """Up to *limit* scheduled entries after *after*, by due time (module docstring)."""
    limit = max(1, min(limit, MAX_PAGE_SIZE))
    merged: list[ScheduledKey] = []
    bound: ScheduledKey | None = None     # nothing past it may be listed on this page
    for source in _sources(src):
        found, examined, exhausted = await _source_page(source, after, limit)
        merged.extend(found)
        if not exhausted and examined is not None and (bound is None or examined < bound):
            bound = examined
    merged.extend(k for k in src.wide if after is None or k > after)
    merged = sorted(set(merged))
    if bound is not None:
        merged = [k for k in merged if k <= bound]
    if len(merged) > limit:
        return ScheduledPage(merged[:limit], merged[limit - 1])
    # Everything live up to the bound is in *merged*: the next page resumes at the bound (a page
    # may come out short, even empty, while stale slots are passed over).
    return ScheduledPage(merged, bound)


def pending_histogram(src: ScheduledSources, upper_bounds_ms: Sequence[int]) -> PendingHistogram:
    """Index entries per due-time bin: ``(-inf, b0], (b0, b1], ..., (b_last, +inf)`` for the
    ascending epoch-ms *upper_bounds_ms* (module docstring)."""
    bounds = sorted(set(upper_bounds_ms))

    def count_upto(bound: int) -> int:
        total = sum(p.count_upto(bound) for p in src.indexes)
        for seg in src.segments:
            if seg.live:
                total += bisect_right(seg.ts, bound, seg.i) - seg.i
        return total + sum(1 for k in src.wide if k[0] <= bound)

    total = (sum(p.indexed for p in src.indexes) + len(src.wide)
             + sum(len(seg.ts) - seg.i for seg in src.segments if seg.live))
    bins: list[HistogramBin] = []
    below = 0
    for bound in bounds:
        upto = count_upto(bound)
        bins.append(HistogramBin(bound, upto - below))
        below = upto
    bins.append(HistogramBin(None, total - below))
    stale = sum(p.indexed - p.count for p in src.indexes)
    return PendingHistogram(bins, stale, src.not_loaded, src.not_read)
