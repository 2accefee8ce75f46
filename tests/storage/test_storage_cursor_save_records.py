"""A cursor save makes again only the records of the ledgers whose bitmap changed since the
last save, and the file it writes is byte for byte what encoding the whole state at that
moment gives, and what the encoder before kept records gives (the same format both ways:
files written before are read, files written now are read by the code before)."""

from __future__ import annotations

import asyncio
import struct

import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st
from pyroaring import BitMap
from storage_testlib import ExtentLedgers

import storage.individually_deleted as individually_deleted
from storage.cursor import CursorState, EncodedCursor, ManagedCursor, decode_cursor, encode_cursor
from storage.cursor_properties import encode_properties
from storage.positions import Position

#: ledger id -> entries; 9 is the current ledger, 6 no longer exists
EXTENTS = {1: 300, 2: 70_000, 4: 5_000, 5: 40, 7: 300, 9: 200}
ORDER = sorted(EXTENTS)


def encode_before(state: CursorState) -> bytes:
    """The encoder as it was before records were kept (the file format's reference)."""
    name = state.name.encode()
    md, rd = state.mark_delete, state.read_position
    head = b"".join((struct.pack("<4sBH", b"HCUR", 1, len(name)), name,
                     struct.pack("<qqqqQ", md.ledger_id, md.entry_id, rd.ledger_id,
                                 rd.entry_id, state.revision)))
    props = encode_properties(state.properties)
    bitmaps = [(lid, bm) for lid, bm in sorted(state.bitmaps.items()) if bm]
    parts: list[bytes] = [struct.pack("<I", len(bitmaps))]
    for ledger_id, bitmap in bitmaps:
        bitmap.run_optimize()
        blob = bitmap.serialize()
        parts += [struct.pack("<qI", ledger_id, len(blob)), blob]
    tail = b"".join(parts)
    crc = crc32c(tail, crc32c(props, crc32c(head)))
    return b"".join((head, props, tail, struct.pack("<I", crc)))


class Saved:
    def __init__(self) -> None:
        self.files: list[EncodedCursor] = []

    async def __call__(self, name: str, data: EncodedCursor, ledger: int) -> None:
        self.files.append(data)


def _snapshot(cursor: ManagedCursor) -> CursorState:
    state = cursor.state()
    state.bitmaps = {lid: bm.copy() for lid, bm in state.bitmaps.items()}
    return state


def _cursor(saved: Saved) -> ManagedCursor:
    md = Position(1, -1)
    ledgers = ExtentLedgers(EXTENTS)
    return ManagedCursor(ledgers, saved, CursorState("s", md, ledgers.next_position(md)))


def _position(data: st.DataObject) -> Position:
    ledger_id = data.draw(st.sampled_from([*ORDER, 6]))
    return Position(ledger_id, data.draw(st.integers(-1, EXTENTS.get(ledger_id, 10) + 1)))


def _step(cursor: ManagedCursor, data: st.DataObject) -> None:
    kind = data.draw(st.sampled_from(
        ["ack", "ack", "ack", "ack_run", "bulk", "mark_delete", "reset", "property", "read"]))
    if kind == "ack":
        cursor.delete([_position(data) for _ in range(data.draw(st.integers(1, 8)))])
    elif kind == "ack_run":       # an ACK of one ledger's ids (the one-call path)
        start = _position(data)
        cursor.delete([Position(start.ledger_id, e)
                       for e in range(start.entry_id, start.entry_id + data.draw(
                           st.integers(1, 300)))])
    elif kind == "bulk":
        ledger_id = data.draw(st.sampled_from(ORDER))
        low = data.draw(st.integers(0, EXTENTS[ledger_id]))
        cursor.delete_entry_ids(ledger_id, range(low, low + data.draw(st.integers(1, 5_000)),
                                                 data.draw(st.integers(1, 3))))
    elif kind == "mark_delete":
        cursor.mark_delete(_position(data))
    elif kind == "reset":
        cursor.reset(_position(data))
    elif kind == "property":
        cursor.set_property(data.draw(st.sampled_from("abc")), str(data.draw(st.integers())))
    else:
        cursor.read_position = _position(data)


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_every_save_is_the_whole_state_encoded_byte_for_byte(data: st.DataObject) -> None:
    """Random acks (both delete paths, bulk ids, mark-delete moves that drop or cut bitmaps,
    resets) between saves: each saved file equals a full encode of the cursor's state at the
    save, and the encoder of before's output for it; it decodes to that state."""
    async def run() -> None:
        saved = Saved()
        cursor = _cursor(saved)
        for _ in range(data.draw(st.integers(1, 6))):
            for _ in range(data.draw(st.integers(0, 6))):
                _step(cursor, data)
            expected = _snapshot(cursor)
            cursor._touch()
            await cursor.flush()
            written = saved.files[-1].data()
            assert saved.files[-1].size == len(written)
            assert written == encode_cursor(expected)
            assert written == encode_before(_snapshot(cursor))
            back = decode_cursor(written)
            assert (back.mark_delete, back.read_position) == (cursor.mark_delete_position,
                                                              cursor.read_position)
            assert back.bitmaps == {lid: bm for lid, bm in expected.bitmaps.items() if bm}
            assert back.properties == cursor.properties
    asyncio.run(run())


def test_a_save_after_an_ack_of_one_ledger_makes_that_ledgers_record_only(
        monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[int] = []
    record = individually_deleted.bitmap_record

    def counting(ledger_id: int, bitmap: BitMap) -> bytes:
        made.append(ledger_id)
        return record(ledger_id, bitmap)

    async def run() -> None:
        saved = Saved()
        cursor = _cursor(saved)
        for ledger_id in (2, 4, 7):
            cursor.delete_entry_ids(ledger_id, range(3, 200, 2))
        cursor.delete([Position(1, 5)])
        await cursor.flush()
        assert sorted(made) == [1, 2, 4, 7]   # the first save makes every record
        made.clear()
        cursor.delete([Position(4, 10), Position(4, 12)])
        await cursor.flush()
        assert made == [4]
        made.clear()
        cursor.read_position = Position(2, 0)  # no bitmap changed: no record made
        await cursor.flush()
        assert made == []
        cursor.mark_delete(Position(2, 50))   # ledger 1 dropped, ledger 2 cut
        await cursor.flush()
        assert made == [2]
        assert saved.files[-1].data() == encode_before(_snapshot(cursor))
        assert 1 not in decode_cursor(saved.files[-1].data()).bitmaps

    monkeypatch.setattr(individually_deleted, "bitmap_record", counting)
    asyncio.run(run())


def test_files_of_the_encoder_before_are_read_and_saved_again_the_same() -> None:
    bitmaps = {2: BitMap(range(5, 60_000, 3)), 4: BitMap([7, 9, *range(100, 4_000)]),
               7: BitMap(range(1, 300))}
    state = CursorState("s", Position(1, 299), Position(2, 0), 3, {"k": "v", "é": "x"},
                        {lid: bm.copy() for lid, bm in bitmaps.items()})
    old = encode_before(state)
    loaded = decode_cursor(old)
    assert loaded.bitmaps == bitmaps

    async def run() -> bytes:
        saved = Saved()
        cursor = ManagedCursor(ExtentLedgers(EXTENTS), saved, loaded)
        cursor._touch()
        await cursor.flush()
        return saved.files[-1].data()
    assert asyncio.run(run()) == old
