"""A cursor's individually acknowledged entries answer "any acknowledged from here to there?"
exactly as asking position by position would, within one ledger or across several; a reader's
set answers the same way."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from pyroaring import BitMap

from broker.subscriptions.dispatchers.cursors import ReaderDeletes
from storage.individually_deleted import MAX_ENTRY_ID, IndividuallyDeleted
from storage.positions import Position

LEDGERS = [3, 4, 7]
entry_ids = st.one_of(st.integers(0, 40), st.sampled_from([MAX_ENTRY_ID - 1]))
positions = st.builds(Position, st.sampled_from([2, *LEDGERS, 9]),
                      st.one_of(st.integers(-1, 41), st.sampled_from([MAX_ENTRY_ID - 1])))


def by_position(acked: set[Position], first: Position, last: Position) -> bool:
    return any(first <= p <= last for p in acked)


@settings(max_examples=1500, deadline=None)
@given(acked=st.sets(st.builds(Position, st.sampled_from(LEDGERS), entry_ids), max_size=30),
       first=positions, last=positions, empty_bitmap=st.booleans())
def test_any_between_agrees_with_asking_each_position(
        acked: set[Position], first: Position, last: Position, empty_bitmap: bool) -> None:
    bitmaps: dict[int, BitMap] = {}
    for lid, eid in acked:
        bitmaps.setdefault(lid, BitMap()).add(eid)
    if empty_bitmap:
        bitmaps.setdefault(9, BitMap())   # a ledger whose acks the mark-delete passed
    deleted = IndividuallyDeleted(bitmaps)
    reader = ReaderDeletes()
    reader.positions |= acked
    expected = by_position(acked, first, last)
    assert deleted.any_between(first, last) is expected
    assert reader.any_between(first, last) is expected
    assert len(deleted) == len(acked) == len(reader)


def test_any_between_within_one_ledger_and_across_ledgers() -> None:
    deleted = IndividuallyDeleted({5: BitMap([10, 20]), 6: BitMap([0]), 8: BitMap()})
    assert deleted.any_between(Position(5, 10), Position(5, 10))
    assert not deleted.any_between(Position(5, 11), Position(5, 19))
    assert deleted.any_between(Position(5, 11), Position(5, 20))
    assert not deleted.any_between(Position(5, 21), Position(6, -1))
    assert deleted.any_between(Position(5, 21), Position(6, 0))
    assert not deleted.any_between(Position(7, 0), Position(8, 100))
    assert not deleted.any_between(Position(5, 20), Position(5, 10))   # an empty range
    assert not IndividuallyDeleted({}).any_between(Position(0, 0), Position(9, 9))
    copies = deleted.copies()
    assert copies == {5: BitMap([10, 20]), 6: BitMap([0])}
    copies[5].add(11)
    assert 11 not in deleted.bitmaps[5]
