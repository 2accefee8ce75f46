"""ManagedCursor: acks, mark-delete advancement, reset, persistence, rate limit, format."""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path

import pytest
from pyroaring import BitMap
from storage_testlib import flip_bit, ledger_dir, open_store, write_segment
from waiting import wait_until_async

from storage import Position, SegmentStore
from storage.cursor import CursorState, decode_cursor, encode_cursor, encode_properties
from storage.errors import CorruptRecordError

TOPIC = "persistent://public/default/c"


async def _filled(root: Path, n: int, **kw: object) -> tuple[SegmentStore, list[Position]]:
    store = await open_store(root, **kw)
    ml = await store.open_ledger(TOPIC)
    positions = await asyncio.gather(*(ml.append(b"e%d" % i) for i in range(n)))
    return store, list(positions)


def test_cursor_format_round_trips_and_rejects_corruption() -> None:
    state = CursorState("sub", Position(3, 7), Position(3, 8), 5, {"k": "v", "é": "ü"},
                        {3: BitMap([9, 10, 12]), 4: BitMap(range(0, 1000, 3))})
    blob = encode_cursor(state)
    back = decode_cursor(blob)
    assert (back.name, back.mark_delete, back.read_position, back.revision, back.properties) == (
        "sub", Position(3, 7), Position(3, 8), 5, {"k": "v", "é": "ü"})
    assert back.bitmaps == state.bitmaps
    for i in range(0, len(blob), 7):
        broken = bytearray(blob)
        broken[i] ^= 0x10
        with pytest.raises(CorruptRecordError):
            decode_cursor(bytes(broken))
    with pytest.raises(CorruptRecordError):
        decode_cursor(blob[:-1])


async def test_individual_acks_advance_mark_delete_over_contiguous_runs(tmp_path: Path) -> None:
    store, ps = await _filled(tmp_path, 20, max_entries_per_ledger=6)
    ml = store.open_ledgers[TOPIC]
    cursor = await ml.open_cursor("s", initial_position="earliest")
    assert cursor.mark_delete_position == Position(ps[0].ledger_id, -1)
    assert cursor.read_position == ps[0]
    assert cursor.backlog == 20
    cursor.delete([ps[1], ps[2], ps[4]])
    assert cursor.mark_delete_position == Position(ps[0].ledger_id, -1)
    assert len(cursor.individually_deleted) == 3
    assert cursor.is_deleted(ps[2])
    assert not cursor.is_deleted(ps[3])
    assert cursor.backlog == 17
    cursor.delete([ps[0]])
    assert cursor.mark_delete_position == ps[2]
    cursor.delete([ps[3], ps[5], ps[6], ps[7]])  # crosses into the second ledger
    assert cursor.mark_delete_position == ps[7]
    assert len(cursor.individually_deleted) == 0
    assert cursor.read_position == ps[8]
    cursor.delete([ps[2], ps[0]])  # already covered: ignored
    assert cursor.mark_delete_position == ps[7]
    cursor.mark_delete(ps[15])
    assert cursor.mark_delete_position == ps[15]
    assert cursor.backlog == 4
    cursor.delete(ps[16:])
    assert cursor.mark_delete_position == ps[-1]
    assert cursor.backlog == 0
    await store.close()


async def test_latest_cursor_starts_after_last_confirmed(tmp_path: Path) -> None:
    store, ps = await _filled(tmp_path, 5)
    ml = store.open_ledgers[TOPIC]
    cursor = await ml.open_cursor("late")
    assert cursor.mark_delete_position == ps[-1]
    assert cursor.backlog == 0
    new = await ml.append(b"new")
    assert cursor.read_position == new
    assert cursor.backlog == 1
    await store.close()


async def test_reset_moves_read_position_and_clears_later_acks(tmp_path: Path) -> None:
    store, ps = await _filled(tmp_path, 10)
    ml = store.open_ledgers[TOPIC]
    cursor = await ml.open_cursor("s", initial_position="earliest")
    cursor.delete([ps[0], ps[1], ps[5], ps[7]])
    cursor.reset(ps[4])
    assert cursor.read_position == ps[4]
    assert cursor.mark_delete_position == ps[3]
    assert not cursor.is_deleted(ps[5])
    assert cursor.is_deleted(ps[2])
    assert cursor.backlog == 6
    cursor.reset(ps[0])
    assert cursor.mark_delete_position == Position(ps[0].ledger_id, -1)
    assert cursor.backlog == 10
    await store.close()


async def test_cursor_state_survives_reopen_exactly(tmp_path: Path) -> None:
    store, ps = await _filled(tmp_path, 100, max_entries_per_ledger=30)
    ml = store.open_ledgers[TOPIC]
    cursor = await ml.open_cursor("s", initial_position="earliest")
    cursor.delete([ps[i] for i in range(0, 100, 3)] + [ps[1]])
    cursor.read_position = ps[50]
    cursor.revision = 7
    cursor.set_property("#pulsar.internal.delayed.bucket_1_2", "123")
    cursor.set_property("gone", "x")
    cursor.remove_property("gone")
    expected = (cursor.mark_delete_position, cursor.read_position, cursor.individually_deleted.copies(),
                cursor.properties, cursor.revision)
    await store.close()
    store = await open_store(tmp_path)
    ml = await store.open_ledger(TOPIC)
    cursor = ml.cursors["s"]
    got = (cursor.mark_delete_position, cursor.read_position, cursor.individually_deleted.copies(),
           cursor.properties, cursor.revision)
    assert got == expected
    assert cursor.persisted_size_bytes > 0
    assert not list((ledger_dir(tmp_path, TOPIC) / "cursors").glob("*.tmp"))
    await store.close()


async def test_saves_between_property_changes_keep_every_property_change(tmp_path: Path) -> None:
    """The properties' encoding is kept from one save to the next until a property changes:
    each save in between writes the latest acks with the same properties, and a remove or a
    set after a save is in the next one."""
    store, ps = await _filled(tmp_path, 20)
    cursor = await store.open_ledgers[TOPIC].open_cursor("s", initial_position="earliest")
    cursor.set_property("a", "1")
    cursor.set_property("b", "2")
    for change, props, acked in (
        (lambda c: c.remove_property("a"), {"b": "2"}, ps[3]),
        (lambda c: c.set_property("b", "3"), {"b": "3"}, ps[5]),
    ):
        await cursor.flush()
        cursor.delete([ps[1]])
        await cursor.flush()            # no property changed: the kept encoding is written
        change(cursor)
        await cursor.flush()
        cursor.delete([acked])
        await cursor.flush()
        expected = cursor.individually_deleted.copies()
        await store.close()
        store = await open_store(tmp_path)
        cursor = (await store.open_ledger(TOPIC)).cursors["s"]
        assert (cursor.individually_deleted.copies(), cursor.properties) == (expected, props)
    await store.close()


async def test_a_reloaded_cursor_saves_its_properties_as_loaded_until_one_changes(
    tmp_path: Path,
) -> None:
    """The properties' bytes come from the file a cursor was loaded from (a restart does not
    encode tens of thousands of bucket properties again for its first save)."""
    store, ps = await _filled(tmp_path, 20)
    cursor = await store.open_ledgers[TOPIC].open_cursor("s", initial_position="earliest")
    props = {f"#pulsar.internal.delayed.bucket_{i}_{i}": str(1000 + i) for i in range(50)}
    for key, value in props.items():
        cursor.set_property(key, value)
    await store.close()
    path = ledger_dir(tmp_path, TOPIC) / "cursors" / "s.cur"
    loaded = decode_cursor(path.read_bytes())
    assert loaded.properties_blob == encode_properties(props)
    for acked, change in ((ps[2], None), (ps[4], ("k", "v"))):
        store = await open_store(tmp_path)
        cursor = (await store.open_ledger(TOPIC)).cursors["s"]
        cursor.delete([acked])
        if change is not None:
            cursor.set_property(*change)
            props[change[0]] = change[1]
        await store.close()
        saved = decode_cursor(path.read_bytes())
        assert saved.properties == props
        assert saved.properties_blob == encode_properties(props)
        assert Position(acked.ledger_id, acked.entry_id) in [
            Position(lid, e) for lid, bm in saved.bitmaps.items() for e in bm]


async def test_background_flush_persists_at_bounded_rate(tmp_path: Path) -> None:
    store, ps = await _filled(tmp_path, 50, mark_delete_rate_limit_per_sec=20.0)
    ml = store.open_ledgers[TOPIC]
    cursor = await ml.open_cursor("s", initial_position="earliest")
    base = cursor.persist_count
    started = time.monotonic()
    for p in ps:  # 50 acks over ~0.25 s -> far fewer than 50 persists
        cursor.delete([p])
        await asyncio.sleep(0.005)
    await wait_until_async(lambda: not cursor.dirty, timeout_s=5, interval_s=0.01,
                           message="the background flush persists the cursor")
    elapsed = time.monotonic() - started
    persists = cursor.persist_count - base
    assert not cursor.dirty
    assert 1 <= persists <= elapsed * 20 + 2
    on_disk = decode_cursor((ledger_dir(tmp_path, TOPIC) / "cursors" / "s.cur").read_bytes())
    assert on_disk.mark_delete == ps[-1]
    await store.close()


async def test_background_flush_visits_only_ledgers_whose_cursors_changed(
        tmp_path: Path) -> None:
    store, ps = await _filled(tmp_path, 5, mark_delete_rate_limit_per_sec=20.0)
    ml = store.open_ledgers[TOPIC]
    idle = await store.open_ledger("idle")
    quiet = await idle.open_cursor("q", initial_position="earliest")
    cursor = await ml.open_cursor("s", initial_position="earliest")
    await wait_until_async(lambda: not cursor.dirty and not quiet.dirty, timeout_s=5,
                           interval_s=0.01, message="new cursors are persisted by the flush")
    quiet_saves = quiet.persist_count
    # An ack, then a property: each change is reported and persisted in the background.
    cursor.delete([ps[0]])
    await wait_until_async(lambda: not cursor.dirty, timeout_s=5, interval_s=0.01,
                           message="the ack is persisted")
    cursor.set_property("k", "v")
    await wait_until_async(lambda: not cursor.dirty, timeout_s=5, interval_s=0.01,
                           message="the property is persisted")
    on_disk = decode_cursor((ledger_dir(tmp_path, TOPIC) / "cursors" / "s.cur").read_bytes())
    assert on_disk.mark_delete == ps[0] and on_disk.properties == {"k": "v"}
    assert quiet.persist_count == quiet_saves   # the unchanged cursor was never rewritten
    assert not store._dirty_cursors   # nothing left to visit
    await store.close()


async def test_flush_persists_now_and_skips_when_clean(tmp_path: Path) -> None:
    store, ps = await _filled(tmp_path, 5, mark_delete_rate_limit_per_sec=0)
    ml = store.open_ledgers[TOPIC]
    cursor = await ml.open_cursor("s", initial_position="earliest")
    count = cursor.persist_count
    cursor.delete([ps[0]])
    await cursor.flush()
    assert cursor.persist_count == count + 1
    await cursor.flush()
    assert cursor.persist_count == count + 1
    path = ledger_dir(tmp_path, TOPIC) / "cursors" / "s.cur"
    assert decode_cursor(path.read_bytes()).mark_delete == ps[0]
    assert cursor.persisted_size_bytes == path.stat().st_size
    await store.close()


async def test_delete_cursor_removes_its_file(tmp_path: Path) -> None:
    store, _ = await _filled(tmp_path, 1)
    ml = store.open_ledgers[TOPIC]
    await ml.open_cursor("a/b c")
    assert len(list((ledger_dir(tmp_path, TOPIC) / "cursors").glob("*.cur"))) == 1
    await ml.delete_cursor("a/b c")
    assert dict(ml.cursors) == {}
    assert list((ledger_dir(tmp_path, TOPIC) / "cursors").glob("*.cur")) == []
    await store.close()


async def test_corrupt_only_cursor_file_restarts_it_at_earliest(tmp_path: Path) -> None:
    store, _ = await _filled(tmp_path, 3)
    await store.open_ledgers[TOPIC].open_cursor("s")
    await store.close()
    flip_bit(ledger_dir(tmp_path, TOPIC) / "cursors" / "s.cur", 10, 2)
    store = await open_store(tmp_path)
    ml = await store.open_ledger(TOPIC)
    # Not dropped (its backlog would be trimmed away): back at the earliest position.
    assert ml.cursors["s"].backlog == 3
    assert store.recovery_report.corrupt_cursors == 1
    await store.close()


async def test_million_random_acks_over_20_ledgers_survive_reopen_exactly(tmp_path: Path) -> None:
    per_ledger, ledgers = 75_000, 20
    directory = ledger_dir(tmp_path, TOPIC)
    # Bulk setup: write 20 sealed segments of empty entries directly (1.5M entries).
    for ledger_id in range(ledgers):
        write_segment(directory, ledger_id, [b""] * per_ledger)
    (directory / "NAME").write_text(TOPIC)
    store = await open_store(tmp_path)
    ml = await store.open_ledger(TOPIC)
    assert ml.number_of_entries == per_ledger * ledgers
    cursor = await ml.open_cursor("s", initial_position="earliest")
    rng = random.Random(1)
    population = per_ledger * ledgers
    chosen = rng.sample(range(1, population), 1_000_000)  # entry 0 stays unacked
    by_ledger: dict[int, list[int]] = {}
    for flat in chosen:
        by_ledger.setdefault(flat // per_ledger, []).append(flat % per_ledger)
    for ledger_id, ids in by_ledger.items():
        cursor.delete_entry_ids(ledger_id, ids)
    assert len(cursor.individually_deleted) == 1_000_000
    assert cursor.mark_delete_position == Position(0, -1)
    expected = cursor.individually_deleted.copies()
    await store.close()
    store = await open_store(tmp_path)
    ml = await store.open_ledger(TOPIC)
    cursor = ml.cursors["s"]
    assert len(cursor.individually_deleted) == 1_000_000
    assert cursor.individually_deleted.copies() == expected
    assert cursor.persisted_size_bytes <= 1_000_000  # <= 1 byte per acked entry
    cursor.delete([Position(0, 0)])  # the hole closes: mark-delete runs over the acked prefix
    first_gap = min(set(range(1, per_ledger)) - set(by_ledger[0]))
    assert cursor.mark_delete_position == Position(0, first_gap - 1)
    await store.close()
