"""The scheduled-message listing and histogram over the trackers' in-memory sources: exact
pages (by due time, then position) under stale slots, equal-time herds and loaded segments,
bounded page size, and the worker-thread sort for large windows."""

from __future__ import annotations

import asyncio
import random
from array import array

import pytest
from pyroaring import BitMap

from broker.delayed import schedule_view
from broker.delayed.bucket_records import ImmutableBucket, LoadedSegment
from broker.delayed.indexed import IndexedPositions
from broker.delayed.packed import POSITION_BITS
from broker.delayed.schedule_view import (
    MAX_PAGE_SIZE,
    ScheduledKey,
    ScheduledSources,
    pending_histogram,
    scheduled_page,
)
from broker.delayed.snapshot_format import DecodedSegment


def _list_all(src: ScheduledSources, limit: int) -> list[ScheduledKey]:
    async def walk() -> list[ScheduledKey]:
        out: list[ScheduledKey] = []
        after = None
        for _ in range(100_000):
            page = await scheduled_page(src, after, limit)
            assert len(page.entries) <= limit
            out.extend(page.entries)
            if page.next_after is None:
                return out
            assert after is None or page.next_after > after     # always moves on
            after = page.next_after
        raise AssertionError("the listing did not end")

    return asyncio.run(walk())


def _indexed(entries: list[ScheduledKey]) -> IndexedPositions:
    positions = IndexedPositions()
    for ts, ledger, entry in entries:
        positions.add(ts, ledger, entry)
    return positions


def test_pages_list_every_live_entry_once_in_due_order_past_stale_slots() -> None:
    rng = random.Random(7)
    entries = list({(rng.randrange(1_000, 1_200), rng.randrange(1, 4), e): None
                    for e in range(3_000)})
    positions = _indexed(entries)
    gone = rng.sample(entries, 1_200)              # cancelled / skipped: stale slots stay
    for _, ledger, entry in gone:
        assert positions.discard(ledger, entry)
    live = sorted(set(entries) - set(gone))
    for limit in (1, 7, 100, MAX_PAGE_SIZE):
        assert _list_all(ScheduledSources(indexes=(positions,)), limit) == live


def test_a_herd_due_in_one_millisecond_pages_by_position() -> None:
    entries = [(5_000, 9, e) for e in range(2_500, 0, -1)] + [(4_000, 1, 1), (6_000, 1, 2)]
    positions = _indexed(entries)
    assert _list_all(ScheduledSources(indexes=(positions,)), 100) == sorted(entries)


def test_large_windows_are_sorted_off_the_loop_with_the_same_result(
        monkeypatch: pytest.MonkeyPatch) -> None:
    entries = [(7_000 + i % 5, 2, i) for i in range(600)]
    positions = _indexed(entries)
    monkeypatch.setattr(schedule_view, "SORT_INLINE_MAX", 10)
    assert _list_all(ScheduledSources(indexes=(positions,)), 50) == sorted(entries)


def test_the_page_size_is_capped() -> None:
    entries = [(1_000 + i, 1, i) for i in range(MAX_PAGE_SIZE + 10)]
    src = ScheduledSources(indexes=(_indexed(entries),))
    page = asyncio.run(scheduled_page(src, None, 10 * MAX_PAGE_SIZE))
    assert len(page.entries) == MAX_PAGE_SIZE
    assert page.next_after == entries[MAX_PAGE_SIZE - 1]


def _segment(entries: list[ScheduledKey], taken: int) -> LoadedSegment:
    bucket = ImmutableBucket(5, 6)
    for _, ledger, entry in entries:
        bucket.pending.setdefault(ledger, BitMap()).add(entry)
        bucket.remaining += 1
    ts = array("q", (t for t, _, _ in entries))
    pos = array("Q", ((ledger << POSITION_BITS) | entry for _, ledger, entry in entries))
    seg = LoadedSegment(bucket, DecodedSegment(ts, pos, []), 0)
    for _, ledger, entry in entries[:taken]:       # handed out already
        bucket.take(ledger, entry)
    seg.i = taken
    return seg


def test_sources_merge_indexes_segments_and_wide_positions() -> None:
    mutable = _indexed([(2_000 + i, 7, i) for i in range(0, 300, 3)])
    late = _indexed([(2_000 + i, 1, i) for i in range(1, 300, 3)])
    seg_entries = [(2_000 + i, 5, i) for i in range(2, 300, 3)]
    seg = _segment(seg_entries, taken=10)
    wide = ((2_150, 1 << 40, 1),)
    src = ScheduledSources(indexes=(mutable, late), segments=(seg,), wide=wide, not_loaded=42)
    expected = sorted([(2_000 + i, 7, i) for i in range(0, 300, 3)]
                      + [(2_000 + i, 1, i) for i in range(1, 300, 3)]
                      + seg_entries[10:] + list(wide))
    assert _list_all(src, 33) == expected
    hist = pending_histogram(src, [2_099, 2_199])
    assert [b.count for b in hist.bins] == [
        sum(1 for k in expected if k[0] <= 2_099),
        sum(1 for k in expected if 2_099 < k[0] <= 2_199),
        sum(1 for k in expected if k[0] > 2_199)]
    assert (hist.bins[-1].upper_ms, hist.stale, hist.not_loaded) == (None, 0, 42)


def test_histogram_counts_index_slots_and_says_how_many_are_stale() -> None:
    positions = _indexed([(100, 1, 1), (200, 1, 2), (300, 1, 3)])
    positions.discard(1, 2)
    hist = pending_histogram(ScheduledSources(indexes=(positions,)), [150, 250])
    assert [(b.upper_ms, b.count) for b in hist.bins] == [(150, 1), (250, 1), (None, 1)]
    assert hist.stale == 1


def test_an_empty_tracker_lists_nothing() -> None:
    assert _list_all(ScheduledSources(), 10) == []
    assert [b.count for b in pending_histogram(ScheduledSources(), [1]).bins] == [0, 0]
