"""SnapshotStore: bucket snapshots are durable, crash-safe, CRC-checked, never reuse ids."""

from __future__ import annotations

from pathlib import Path

import pytest
from storage_testlib import flip_bit

import storage.snapshots as snapshot_files
from storage import CorruptRecordError, SegmentStore, SnapshotNotFoundError


async def test_snapshot_round_trip_with_pulsar_numbering(tmp_path: Path) -> None:
    store = await SegmentStore.open(tmp_path)
    segments = [b"seg-one", b"", b"x" * 100_000]
    sid = await store.snapshots.create(b"metadata", segments)
    assert await store.snapshots.load_metadata(sid) == b"metadata"
    for i, seg in enumerate(segments, start=1):
        assert await store.snapshots.load_segment(sid, i) == seg
    with pytest.raises(SnapshotNotFoundError):
        await store.snapshots.load_segment(sid, 4)
    with pytest.raises(SnapshotNotFoundError):
        await store.snapshots.load_segment(sid, 0)
    assert store.snapshots.size_bytes(sid) == (tmp_path / "snapshots" / f"{sid:020d}.snap").stat().st_size
    await store.close()
    store = await SegmentStore.open(tmp_path)
    assert await store.snapshots.load_segment(sid, 3) == segments[2]
    await store.snapshots.delete(sid)
    with pytest.raises(SnapshotNotFoundError):
        await store.snapshots.load_metadata(sid)
    with pytest.raises(SnapshotNotFoundError):
        store.snapshots.size_bytes(sid)
    await store.close()


async def test_snapshot_ids_are_not_reused_and_are_distinct_from_ledger_ids(tmp_path: Path) -> None:
    seen: set[int] = set()
    for _ in range(3):
        store = await SegmentStore.open(tmp_path)
        sid = await store.snapshots.create(b"m", [b"s"])
        await store.snapshots.delete(sid)
        ml = await store.open_ledger("t")
        lid = (await ml.append(b"x")).ledger_id
        assert sid not in seen and lid not in seen
        seen |= {sid, lid}
        await store.close()


async def test_corrupt_snapshot_part_is_never_returned(tmp_path: Path) -> None:
    store = await SegmentStore.open(tmp_path)
    sid = await store.snapshots.create(b"meta", [b"a" * 1000, b"b" * 1000])
    path = tmp_path / "snapshots" / f"{sid:020d}.snap"
    flip_bit(path, path.stat().st_size - 10, 4)  # inside segment 2
    assert await store.snapshots.load_segment(sid, 1) == b"a" * 1000
    with pytest.raises(CorruptRecordError):
        await store.snapshots.load_segment(sid, 2)
    flip_bit(path, 6, 0)  # header
    with pytest.raises(CorruptRecordError):
        await store.snapshots.load_metadata(sid)
    await store.close()


@pytest.mark.parametrize("whole", [True, False])
async def test_a_torn_snapshot_is_corrupt_read_whole_or_by_parts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, whole: bool) -> None:
    """Small snapshot files are read in one read (header, table and parts), large ones part by
    part: either way a file shorter than its table says never returns a part it cuts."""
    monkeypatch.setattr(snapshot_files, "WHOLE_READ_BYTES", 1 << 20 if whole else 0)
    store = await SegmentStore.open(tmp_path)
    sid = await store.snapshots.create(b"meta", [b"a" * 1000, b"b" * 1000])
    path = tmp_path / "snapshots" / f"{sid:020d}.snap"
    assert await store.snapshots.load_segment(sid, 2) == b"b" * 1000
    path.write_bytes(path.read_bytes()[:-1])        # torn after its size was recorded
    for reopen in (False, True):                    # then with the size listed again
        if reopen:
            await store.close()
            store = await SegmentStore.open(tmp_path)
        assert await store.snapshots.load_metadata(sid) == b"meta"
        assert await store.snapshots.load_segment(sid, 1) == b"a" * 1000
        with pytest.raises(CorruptRecordError):
            await store.snapshots.load_segment(sid, 2)
    path.write_bytes(path.read_bytes()[:10])        # inside the header
    with pytest.raises(CorruptRecordError):
        await store.snapshots.load_metadata(sid)
    await store.close()


async def test_interrupted_snapshot_write_leaves_no_snapshot(tmp_path: Path) -> None:
    store = await SegmentStore.open(tmp_path)
    await store.close()
    (tmp_path / "snapshots" / "00000000000000099999.snap.tmp").write_bytes(b"partial")
    store = await SegmentStore.open(tmp_path)
    assert store.snapshots.ids() == []
    assert not (tmp_path / "snapshots" / "00000000000000099999.snap.tmp").exists()
    await store.close()


async def test_load_parts_reads_several_snapshots_in_one_job_each_with_its_own_error(
        tmp_path: Path) -> None:
    store = await SegmentStore.open(tmp_path)
    a = await store.snapshots.create(b"meta-a", [b"a1", b"a2"])
    b = await store.snapshots.create(b"meta-b", [b"b1" * 500])
    c = await store.snapshots.create(b"meta-c", [b"c1" * 500])
    gone = await store.snapshots.create(b"meta-gone", [b"g"])
    await store.snapshots.delete(gone)
    path = tmp_path / "snapshots" / f"{c:020d}.snap"
    flip_bit(path, path.stat().st_size - 10, 2)      # inside c's segment 1
    got = await store.snapshots.load_parts(
        [(a, 0), (b, 1), (gone, 0), (a, 2), (a, 3), (c, 0), (c, 1)])
    assert got[0] == b"meta-a" and got[1] == b"b1" * 500 and got[3] == b"a2"
    assert isinstance(got[2], SnapshotNotFoundError)     # deleted
    assert isinstance(got[4], SnapshotNotFoundError)     # no such part
    assert got[5] == b"meta-c"                           # the intact part of a damaged file
    assert isinstance(got[6], CorruptRecordError)
    assert await store.snapshots.load_parts([]) == []
    await store.close()


async def test_sizes_after_reopen_come_from_the_first_read_or_a_stat(tmp_path: Path) -> None:
    store = await SegmentStore.open(tmp_path)
    small = await store.snapshots.create(b"m", [b"s" * 100])
    big = await store.snapshots.create(b"m", [b"b" * (snapshot_files.WHOLE_READ_BYTES + 10)])
    other = await store.snapshots.create(b"m", [b"o"])
    sizes = {sid: (tmp_path / "snapshots" / f"{sid:020d}.snap").stat().st_size
             for sid in (small, big, other)}
    await store.close()
    store = await SegmentStore.open(tmp_path)       # listed, not stat'ed
    got = await store.snapshots.load_parts([(small, 0), (small, 1), (big, 1)])
    assert got == [b"m", b"s" * 100, b"b" * (snapshot_files.WHOLE_READ_BYTES + 10)]
    assert store.snapshots.size_bytes(small) == sizes[small]
    assert store.snapshots.size_bytes(big) == sizes[big]
    assert store.snapshots.size_bytes(other) == sizes[other]     # never read: a stat
    assert store.snapshots.total_size_bytes == sum(sizes.values())
    await store.close()


async def test_summaries_are_kept_beside_the_snapshots_and_dropped_with_them(
        tmp_path: Path) -> None:
    store = await SegmentStore.open(tmp_path)
    a = await store.snapshots.create(b"m", [b"s"], b"summary-a")
    b = await store.snapshots.create(b"m", [b"s"])
    await store.snapshots.add_summaries([(b, b"summary-b")])
    assert await store.snapshots.summaries() == {a: b"summary-a", b: b"summary-b"}
    await store.snapshots.delete(a)
    await store.close()
    store = await SegmentStore.open(tmp_path)
    assert await store.snapshots.summaries() == {b: b"summary-b"}
    await store.close()
