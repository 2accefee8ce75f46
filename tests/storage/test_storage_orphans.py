"""Orphan files are collected at load: temporary files of interrupted writes, and (given
is_snapshot_key) snapshots no cursor refers to any more."""

from __future__ import annotations

from pathlib import Path

from storage_testlib import flip_bit, ledger_dir

from storage import SegmentStore, StorageConfig
from storage.names import encode_name

TOPIC = "persistent://public/default/orphans"
CFG = StorageConfig(mark_delete_rate_limit_per_sec=0)


def _bucket_key(key: str) -> bool:
    return key.startswith("#pulsar.internal.delayed.bucket_")


async def _snapshots_with_one_referenced(root: Path) -> tuple[int, int, int]:
    store = await SegmentStore.open(root, CFG)
    ml = await store.open_ledger(TOPIC)
    cursor = await ml.open_cursor("sub")
    live = await store.snapshots.create(b"meta", [b"seg"])
    orphan = await store.snapshots.create(b"meta", [b"seg"])  # crash before the cursor update
    gone = await store.snapshots.create(b"meta", [b"seg"])
    cursor.set_property("#pulsar.internal.delayed.bucket_1_2", str(live))
    await cursor.flush()
    other = await ml.open_cursor("deleted-sub")
    other.set_property("#pulsar.internal.delayed.bucket_1_2", str(gone))
    await other.flush()
    await ml.delete_cursor("deleted-sub")
    await store.close()
    return live, orphan, gone


async def test_snapshots_no_cursor_names_are_collected_at_open(tmp_path: Path) -> None:
    live = (await _snapshots_with_one_referenced(tmp_path))[0]
    (tmp_path / "snapshots" / "00000000000000000999.snap.tmp").write_bytes(b"half")
    store = await SegmentStore.open(tmp_path, CFG, is_snapshot_key=_bucket_key)
    assert store.snapshots.ids() == [live]
    assert sorted(p.name for p in (tmp_path / "snapshots").iterdir()) == [f"{live:020d}.snap"]
    assert await store.snapshots.load_metadata(live) == b"meta"
    await store.close()


async def test_no_snapshot_is_collected_while_a_cursor_file_is_unreadable(tmp_path: Path) -> None:
    live, orphan, gone = await _snapshots_with_one_referenced(tmp_path)
    flip_bit(ledger_dir(tmp_path, TOPIC) / "cursors" / (encode_name("sub") + ".cur"), 12, 0)
    store = await SegmentStore.open(tmp_path, CFG, is_snapshot_key=_bucket_key)
    assert store.snapshots.ids() == sorted([live, orphan, gone])
    await store.close()


async def test_snapshots_are_kept_unless_collection_is_enabled(tmp_path: Path) -> None:
    live, orphan, gone = await _snapshots_with_one_referenced(tmp_path)
    store = await SegmentStore.open(tmp_path)
    assert store.snapshots.ids() == sorted([live, orphan, gone])
    await store.close()
