"""File names of cursors and managed ledgers: no two names share a file, and stems older
versions wrote keep opening (renamed to the name's stem when found)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from urllib.parse import quote

import pytest
from storage_testlib import flip_bit, ledger_dir

from storage import Position, SegmentStore, StorageConfig
from storage.names import decode_name, encode_name

TOPIC = "persistent://public/default/names"
CONFIG = StorageConfig(max_entries_per_ledger=10, mark_delete_rate_limit_per_sec=0)
LONG = "subscription-" + "x" * 300  # too long for a plain stem: hashed
LOOKALIKE = "h-" + hashlib.sha256(LONG.encode()).hexdigest()[:48]  # a short name, same shape


def _cursors(root: Path) -> Path:
    return ledger_dir(root, TOPIC) / "cursors"


@pytest.mark.parametrize("names", [
    [LONG, LOOKALIKE],
    ["h-sub", "%68-sub", "h%2Dsub", "h-", "h", "", "."],
    ["a.b", "a%2Eb", "a%2eb", "A.b"],
])
def test_no_two_names_share_a_stem(names: list[str]) -> None:
    stems = [encode_name(n) for n in names]
    assert len(set(stems)) == len(names)
    for name, stem in zip(names, stems, strict=True):
        assert "/" not in stem and "." not in stem
        assert decode_name(stem) in (name, None)   # None: a hashed stem


def test_only_long_or_empty_names_are_hashed() -> None:
    assert decode_name(encode_name(LONG)) is None
    assert decode_name(encode_name("")) is None
    assert decode_name(encode_name(LOOKALIKE)) == LOOKALIKE
    assert decode_name(encode_name("h-sub")) == "h-sub"


async def test_deleting_a_cursor_leaves_the_one_whose_hash_its_name_spells(
    tmp_path: Path,
) -> None:
    store = await SegmentStore.open(tmp_path, CONFIG)
    ml = await store.open_ledger(TOPIC)
    long_cursor = await ml.open_cursor(LONG, initial_position="earliest")
    await ml.open_cursor(LOOKALIKE, initial_position="earliest")
    positions = [await ml.append(b"m%d" % i) for i in range(6)]
    long_cursor.mark_delete(positions[2])
    await ml.flush_cursors()
    await ml.delete_cursor(LOOKALIKE)
    await store.close()
    store = await SegmentStore.open(tmp_path, CONFIG)
    ml = await store.open_ledger(TOPIC)
    assert set(ml.cursors) == {LONG}
    assert ml.cursors[LONG].mark_delete_position == positions[2]
    await store.close()


async def _cursor_at(root: Path, name: str, acked: int) -> Position:
    """A cursor *name* with entries 0..acked acknowledged, of 5 entries; returns its position."""
    store = await SegmentStore.open(root, CONFIG)
    ml = await store.open_ledger(TOPIC)
    cursor = await ml.open_cursor(name, initial_position="earliest")
    positions = [await ml.append(b"e%d" % i) for i in range(5)]
    cursor.mark_delete(positions[acked])
    await cursor.flush()
    cursor.mark_delete(positions[acked + 1])
    await cursor.flush()   # two generations
    await store.close()
    return positions[acked + 1]


def _as_older_versions_stored_it(directory: Path, name: str) -> None:
    """Rename a cursor's files to the stem older versions used (the name unescaped)."""
    old = quote(name, safe="").replace(".", "%2E")
    for suffix in (".cur", ".cur.prev"):
        (directory / (encode_name(name) + suffix)).replace(directory / (old + suffix))


async def test_cursor_stored_under_an_older_stem_keeps_its_position(tmp_path: Path) -> None:
    position = await _cursor_at(tmp_path, "h-orders", 1)
    _as_older_versions_stored_it(_cursors(tmp_path), "h-orders")
    store = await SegmentStore.open(tmp_path, CONFIG)
    ml = await store.open_ledger(TOPIC)
    assert ml.cursors["h-orders"].mark_delete_position == position
    assert not ml.trim_blockers
    assert sorted(p.name for p in _cursors(tmp_path).iterdir()) == [
        "%68-orders.cur", "%68-orders.cur.prev"]
    await store.close()


async def test_damaged_cursor_under_an_older_stem_is_named_by_its_stem(tmp_path: Path) -> None:
    await _cursor_at(tmp_path, "h-orders", 1)
    _as_older_versions_stored_it(_cursors(tmp_path), "h-orders")
    for suffix in (".cur", ".cur.prev"):  # both generations, header (and name) included
        path = _cursors(tmp_path) / ("h-orders" + suffix)
        path.write_bytes(b"\xff" * path.stat().st_size)
    store = await SegmentStore.open(tmp_path, CONFIG)
    ml = await store.open_ledger(TOPIC)
    assert ml.cursors["h-orders"].backlog == 5   # recreated at the earliest: nothing lost
    await store.close()


async def test_cursor_moved_half_way_by_a_crash_keeps_its_newest_generation(
    tmp_path: Path,
) -> None:
    position = await _cursor_at(tmp_path, LOOKALIKE, 2)
    _as_older_versions_stored_it(_cursors(tmp_path), LOOKALIKE)
    # A crash after the first rename of the move: .cur under the new stem, .cur.prev not.
    (_cursors(tmp_path) / (LOOKALIKE + ".cur")).replace(
        _cursors(tmp_path) / (encode_name(LOOKALIKE) + ".cur"))
    left = _cursors(tmp_path) / (LOOKALIKE + ".cur.prev")
    flip_bit(left, left.stat().st_size - 6, 0)  # damaged, but its header still names it
    store = await SegmentStore.open(tmp_path, CONFIG)
    ml = await store.open_ledger(TOPIC)
    assert ml.cursors[LOOKALIKE].mark_delete_position == position
    assert sorted(p.name for p in _cursors(tmp_path).iterdir()) == [
        encode_name(LOOKALIKE) + ".cur", encode_name(LOOKALIKE) + ".cur.prev"]
    await store.close()


async def test_managed_ledger_stored_under_an_older_stem_keeps_opening(tmp_path: Path) -> None:
    store = await SegmentStore.open(tmp_path, CONFIG)
    ml = await store.open_ledger("h-ledger")
    await ml.open_cursor("c", initial_position="earliest")
    first = await ml.append(b"kept")
    await store.close()
    (tmp_path / "ledgers" / "%68-ledger").replace(tmp_path / "ledgers" / "h-ledger")
    store = await SegmentStore.open(tmp_path, CONFIG)
    assert store.ledger_names() == ["h-ledger"]
    ml = await store.open_ledger("h-ledger")
    assert [e.data for e in await ml.read_entries(first, 10)] == [b"kept"]
    assert ml.cursors["c"].backlog == 1
    assert sorted(p.name for p in (tmp_path / "ledgers").iterdir()) == ["%68-ledger"]
    await store.close()
