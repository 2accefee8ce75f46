"""SegmentStore.open's sweep of orphan snapshots reads every cursor file (both generations)
without opening a ledger, counts only the properties its caller names as snapshot keys, and
reports what it read (orphan snapshots collected at load; the broker opens its
store with its bucket keys)."""

from __future__ import annotations

from pathlib import Path

from storage_testlib import flip_bit, ledger_dir

from storage import SegmentStore, StorageConfig
from storage.names import encode_name

TA = "persistent://public/default/props-a"
TB = "persistent://public/default/props-b"
CFG = StorageConfig(mark_delete_rate_limit_per_sec=0)
KEY = "#pulsar.internal.delayed.bucket_1_2"


def _bucket_key(key: str) -> bool:
    return key.startswith("#pulsar.internal.delayed.bucket_")


async def _two_topics(root: Path) -> tuple[int, int, int]:
    """Snapshots named by the newest and the previous generation of a cursor, and one whose
    id only a non-snapshot property (a dedup sequence id) mentions."""
    store = await SegmentStore.open(root, CFG)
    previous = await store.snapshots.create(b"previous", [])
    newest = await store.snapshots.create(b"newest", [])
    sequence = await store.snapshots.create(b"sequence", [])
    ma = await store.open_ledger(TA)
    mb = await store.open_ledger(TB)
    sub = await ma.open_cursor("sub")
    sub.set_property(KEY, str(previous))
    await sub.flush()
    sub.set_property(KEY, str(newest))  # second save: the first id stays in .cur.prev
    await sub.flush()
    other = await mb.open_cursor("other")
    other.set_property("producer-1", str(sequence))
    await other.flush()
    await store.close()
    return previous, newest, sequence


def _segments(root: Path, topic: str) -> list[str]:
    return sorted(p.name for p in ledger_dir(root, topic).glob("*.seg"))


async def test_the_sweep_reads_both_generations_without_opening_a_ledger(
        tmp_path: Path) -> None:
    previous, newest, sequence = await _two_topics(tmp_path)
    before = _segments(tmp_path, TA), _segments(tmp_path, TB)
    store = await SegmentStore.open(tmp_path, CFG, is_snapshot_key=_bucket_key)
    sweep = store.orphan_sweep
    ids = store.snapshots.ids()
    assert store.open_ledgers == {}
    await store.close()
    assert (_segments(tmp_path, TA), _segments(tmp_path, TB)) == before  # no new ledger
    assert sweep is not None
    assert sweep.referenced == {previous, newest}
    assert sweep.removed == (sequence,)  # a sequence id under another key keeps nothing
    assert (sweep.kept, sweep.unreadable) == ((), ())
    assert ids == sorted([previous, newest])


async def test_an_unreadable_cursor_file_is_listed_and_keeps_every_snapshot(
        tmp_path: Path) -> None:
    previous, newest, sequence = await _two_topics(tmp_path)
    damaged = ledger_dir(tmp_path, TB) / "cursors" / (encode_name("other") + ".cur")
    flip_bit(damaged, 12, 0)
    store = await SegmentStore.open(tmp_path, CFG, is_snapshot_key=_bucket_key)
    sweep = store.orphan_sweep
    ids = store.snapshots.ids()
    await store.close()
    assert sweep is not None
    assert sweep.unreadable == (damaged,)
    assert (sweep.removed, sweep.kept) == ((), (sequence,))
    assert ids == sorted([previous, newest, sequence])


async def test_without_snapshot_keys_there_is_no_sweep(tmp_path: Path) -> None:
    ids = sorted(await _two_topics(tmp_path))
    store = await SegmentStore.open(tmp_path, CFG)
    assert store.orphan_sweep is None
    assert store.snapshots.ids() == ids
    await store.close()
