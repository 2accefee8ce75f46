"""CursorProperties: a cursor's properties with their encoded bytes kept per property, so a
change is O(1) Python (a bucketed delayed tracker changes one of tens of thousands per seal)."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest
from storage_testlib import ledger_dir

from storage import SegmentStore, StorageConfig
from storage.cursor import CursorState, decode_cursor, encode_cursor
from storage.cursor_properties import CursorProperties, encode_properties
from storage.positions import Position

TOPIC = "persistent://public/default/cursor-properties"


@pytest.mark.parametrize("start", ["empty", "values", "loaded"])
def test_every_change_encodes_as_the_whole_properties_would(start: str) -> None:
    """Random sets (new and existing keys), removes and encodes, from an empty cursor, from
    values, and from a loaded file's bytes: the bytes always equal encoding the whole dict in
    its order, and decode back to it."""
    rng = random.Random(7)
    model = {} if start == "empty" else {f"k{i}": f"v{i}" for i in range(40)}
    props = CursorProperties(model, encode_properties(model) if start == "loaded" else None)
    for step in range(2_000):
        op = rng.random()
        key = f"k{rng.randrange(80)}"
        if op < 0.45:
            value = f"v{step}-é" * rng.randrange(3)
            props.set(key, value)
            model[key] = value
        elif op < 0.7:
            assert props.remove(key) == (key in model)
            model.pop(key, None)
        else:
            blob = props.encoded()
            assert bytes(blob) == encode_properties(model), step
            state = CursorState("s", Position(1, 0), Position(1, 1), properties={"x": "y"})
            assert decode_cursor(encode_cursor(state, blob)).properties == model
        assert props.copy() == model and len(props) == len(model)
    assert bytes(props.encoded()) == encode_properties(model)


def test_a_kept_encoding_is_not_changed_by_a_later_change() -> None:
    """A cursor file encoded from the kept bytes stays what it was when a key is appended."""
    props = CursorProperties({"a": "1"}, encode_properties({"a": "1"}))
    props.set("b", "2")
    state = CursorState("s", Position(1, 0), Position(1, 1))
    data = encode_cursor(state, props.encoded())
    props.set("c", "3")
    assert decode_cursor(data).properties == {"a": "1", "b": "2"}
    assert decode_cursor(encode_cursor(state, props.encoded())).properties == {
        "a": "1", "b": "2", "c": "3"}


def test_a_string_utf8_cannot_hold_is_refused_and_nothing_changes() -> None:
    props = CursorProperties({"a": "1"})
    for key, value in (("\ud800", "x"), ("b", "\udfff"), ("a", "\ud800")):
        with pytest.raises(UnicodeEncodeError):
            props.set(key, value)
        assert props.copy() == {"a": "1"}
        assert bytes(props.encoded()) == encode_properties({"a": "1"})


async def test_changes_after_a_reload_are_in_the_file_the_next_flush_writes(
    tmp_path: Path,
) -> None:
    """A reloaded cursor starts from its file's bytes: new keys appended to them, a changed and
    a removed key are all in the file a flush writes (read before any close)."""
    store = await SegmentStore.open(tmp_path, StorageConfig())
    ledger = await store.open_ledger(TOPIC)
    await asyncio.gather(*(ledger.append(b"e") for _ in range(5)))
    cursor = await ledger.open_cursor("s", initial_position="earliest")
    expected = {f"#pulsar.internal.delayed.bucket_{i}_{i}": str(100 + i) for i in range(30)}
    for key, value in expected.items():
        cursor.set_property(key, value)
    await store.close()
    rounds = (
        lambda c, e: [c.set_property(f"new{i}", str(i)) or e.update({f"new{i}": str(i)})
                      for i in range(5)],
        lambda c, e: (c.set_property("new1", "changed"), e.update({"new1": "changed"})),
        lambda c, e: (c.remove_property("#pulsar.internal.delayed.bucket_3_3"),
                      e.pop("#pulsar.internal.delayed.bucket_3_3")),
        lambda c, e: (c.set_property("last", "x"), e.update({"last": "x"})),
    )
    for change in rounds:
        store = await SegmentStore.open(tmp_path, StorageConfig())
        cursor = (await store.open_ledger(TOPIC)).cursors["s"]
        assert cursor.properties == expected
        change(cursor, expected)
        await cursor.flush()
        # what a kill -9 now leaves: the file the flush wrote
        saved = decode_cursor((ledger_dir(tmp_path, TOPIC) / "cursors" / "s.cur").read_bytes())
        assert saved.properties == expected
        assert saved.properties_blob == encode_properties(expected)
        await store.close()
    store = await SegmentStore.open(tmp_path, StorageConfig())
    assert (await store.open_ledger(TOPIC)).cursors["s"].properties == expected
    await store.close()


def test_pieces_join_to_the_encoding_however_many_keys_were_added_since() -> None:
    """A save takes the properties as pieces (the kept bytes and the keys added since, or
    the bytes joined again past a few dozen keys): they always join to the encoding, and
    the pieces a save took stay what they were whatever changes after."""
    loaded = {"a": "1", "b": "2"}
    props = CursorProperties(loaded, encode_properties(loaded))
    model = dict(loaded)
    taken: list[tuple[list[bytes | memoryview], bytes]] = []
    for k in range(200):
        props.set(f"k{k}", str(k))
        model[f"k{k}"] = str(k)
        if k % 7 == 0 and k < 100:  # then 100 keys added without a change
            props.set("a", str(k))      # a changed key: the pieces are joined again
            model["a"] = str(k)
        pieces = props.pieces()
        assert b"".join(pieces) == encode_properties(model)
        taken.append((pieces, encode_properties(model)))
    for pieces, expected in taken:
        assert b"".join(pieces) == expected
