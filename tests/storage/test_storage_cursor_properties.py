"""SegmentStore.cursor_properties: every cursor's properties without opening a ledger (issue 10,
orphan snapshots collected at load; the broker's start-up sweep reads them)."""

from __future__ import annotations

from pathlib import Path

from storage_testlib import flip_bit, ledger_dir

from storage import SegmentStore, StorageConfig
from storage.names import encode_name

TA = "persistent://public/default/props-a"
TB = "persistent://public/default/props-b"
CFG = StorageConfig(mark_delete_rate_limit_per_sec=0)
KEY = "#pulsar.internal.delayed.bucket_1_2"


async def _two_topics(root: Path) -> None:
    store = await SegmentStore.open(root, CFG)
    ma = await store.open_ledger(TA)
    mb = await store.open_ledger(TB)
    sub = await ma.open_cursor("sub")
    sub.set_property(KEY, "7")
    await sub.flush()
    sub.set_property(KEY, "8")  # second save: "7" stays in .cur.prev
    await sub.flush()
    other = await mb.open_cursor("other")
    other.set_property("producer-1", "41")
    await other.flush()
    await store.close()


def _segments(root: Path, topic: str) -> list[str]:
    return sorted(p.name for p in ledger_dir(root, topic).glob("*.seg"))


async def test_cursor_properties_reads_both_generations_without_opening_a_ledger(
        tmp_path: Path) -> None:
    await _two_topics(tmp_path)
    before = _segments(tmp_path, TA), _segments(tmp_path, TB)
    store = await SegmentStore.open(tmp_path, CFG)
    scan = await store.cursor_properties()
    assert store.open_ledgers == {}
    await store.close()
    assert (_segments(tmp_path, TA), _segments(tmp_path, TB)) == before  # no new ledger
    got = sorted((c.ledger, c.cursor, c.generation, c.properties) for c in scan.cursors)
    assert got == [
        (TA, "sub", "current", {KEY: "8"}),
        (TA, "sub", "previous", {KEY: "7"}),
        (TB, "other", "current", {"producer-1": "41"}),
        (TB, "other", "previous", {}),  # the save of open_cursor
    ]
    assert scan.unreadable == ()


async def test_an_open_ledger_reports_its_cursors_in_memory_state(tmp_path: Path) -> None:
    await _two_topics(tmp_path)
    store = await SegmentStore.open(tmp_path, CFG)
    ma = await store.open_ledger(TA)
    ma.cursors["sub"].set_property(KEY, "9")  # not saved yet: memory is the newest state
    scan = await store.cursor_properties()
    await store.close()
    mine = [(c.generation, c.properties) for c in scan.cursors if c.ledger == TA]
    assert mine == [("open", {KEY: "9"})]
    assert [c.ledger for c in scan.cursors if c.ledger != TA] == [TB, TB]


async def test_an_unreadable_cursor_file_is_listed(tmp_path: Path) -> None:
    await _two_topics(tmp_path)
    damaged = ledger_dir(tmp_path, TB) / "cursors" / (encode_name("other") + ".cur")
    flip_bit(damaged, 12, 0)
    store = await SegmentStore.open(tmp_path, CFG)
    scan = await store.cursor_properties()
    await store.close()
    assert scan.unreadable == (damaged,)
    assert [(c.cursor, c.generation) for c in scan.cursors if c.ledger == TB] == [
        ("other", "previous")]
