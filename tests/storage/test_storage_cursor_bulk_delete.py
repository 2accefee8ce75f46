"""An ACK's list of ids goes into the cursor in one bitmap call when they are all entries of one
ledger beyond the mark-delete position; any other list is taken id by id. Both ways leave the
same cursor: the same mark-delete position and the same acknowledged ids, whatever the list
holds (ids of several ledgers, before mark-delete, beyond the last entry or a ledger's end,
negative, repeated)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from pyroaring import BitMap
from storage_testlib import ExtentLedgers

from storage.cursor import CursorState, EncodedCursor, ManagedCursor
from storage.positions import Position

#: ledger id -> entries; 8 is the current ledger, 6 no longer exists
EXTENTS = {3: 20, 5: 15, 8: 10}


async def _no_save(name: str, data: EncodedCursor, ledger: int) -> None:
    return None


def _cursor(mark_delete: Position, acked: list[Position]) -> ManagedCursor:
    ledgers = ExtentLedgers(EXTENTS)
    cursor = ManagedCursor(ledgers, _no_save,
                           CursorState("s", mark_delete, ledgers.next_position(mark_delete)))
    cursor.delete(tuple(acked))
    return cursor


positions = st.builds(Position, st.sampled_from([2, 3, 5, 6, 8, 9]),
                      st.one_of(st.integers(-2, 22), st.sampled_from([2**32, 2**40])))
one_ledger = st.sampled_from([3, 5, 8]).flatmap(
    lambda lid: st.lists(st.builds(Position, st.just(lid), st.integers(-1, 21)), min_size=1,
                         max_size=30))


@settings(max_examples=1500, deadline=None)
@given(mark_delete=st.sampled_from([Position(3, -1), Position(3, 4), Position(5, 14),
                                    Position(8, 3)]),
       earlier=st.lists(positions, max_size=10),
       ids=st.one_of(one_ledger, st.lists(positions, max_size=30)))
def test_a_list_of_ids_leaves_the_cursor_as_taking_them_one_by_one(
        mark_delete: Position, earlier: list[Position], ids: list[Position]) -> None:
    bulk, by_id = _cursor(mark_delete, earlier), _cursor(mark_delete, earlier)
    bulk.delete(list(ids))
    for pos in ids:
        by_id.delete(iter([pos]))
    assert bulk.mark_delete_position == by_id.mark_delete_position
    assert bulk.individually_deleted.copies() == by_id.individually_deleted.copies()
    assert bulk.read_position == by_id.read_position


def test_an_ack_of_one_ledgers_new_ids_is_recorded_and_mark_delete_moves_over_them() -> None:
    cursor = _cursor(Position(3, 4), [])
    cursor.delete([Position(3, 7), Position(3, 6), Position(3, 9)])
    assert cursor.individually_deleted.copies() == {3: BitMap([6, 7, 9])}
    cursor.delete([Position(3, 5), Position(3, 8)])
    assert cursor.mark_delete_position == Position(3, 9)
    assert len(cursor.individually_deleted) == 0
    cursor.delete([Position(3, 12), Position(3, 20)])   # 20 is past ledger 3's end: by id
    assert cursor.individually_deleted.copies() == {3: BitMap([12])}


@settings(max_examples=500, deadline=None)
@given(mark_delete=st.sampled_from([Position(3, -1), Position(3, 4), Position(5, 14),
                                    Position(8, 3)]),
       acked=st.lists(positions, max_size=30))
def test_the_deleted_ids_of_a_ledger_say_what_is_deleted_says(
        mark_delete: Position, acked: list[Position]) -> None:
    """deleted_in (what a dispatcher reads once for a run of one ledger's entries) agrees with
    is_deleted on every entry of every ledger, for the durable cursor and a reader's."""
    from broker.subscriptions.dispatchers.cursors import MemoryCursor

    durable = _cursor(mark_delete, acked)
    reader = MemoryCursor(ExtentLedgers(EXTENTS), "r", mark_delete)  # type: ignore[arg-type]
    reader.delete(acked)
    for cursor in (durable, reader):
        for ledger_id in (2, 3, 5, 6, 8, 9):
            through, ids = cursor.deleted_in(ledger_id)
            for entry_id in range(25):
                got = entry_id <= through or (ids is not None and entry_id in ids)
                assert got is cursor.is_deleted(Position(ledger_id, entry_id)), (
                    type(cursor).__name__, ledger_id, entry_id)
