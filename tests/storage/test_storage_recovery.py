"""Recovery from damaged segments: truncation at random offsets and random bit flips.

A base store is written once (3 topics' worth of entries in one topic, several sealed
ledgers); each trial works on a fresh copy, damages it, reopens it and checks that opening
never fails, no corrupt payload is ever served, and what was dropped is reported.
Two bases: "closed" (closed cleanly: every segment ends at its logical end) and "crashed"
(copied while open, as a SIGKILL leaves it: the open segment has its pre-zeroed tail, so
the random cuts and flips often land in the zeros).
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest
from storage_testlib import copy_store, flip_bit, segment_paths

from storage import Position, SegmentStore, StorageConfig

TOPIC = "persistent://public/default/r"
TRIALS = 12


@pytest.fixture(params=["closed", "crashed"])
async def base(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Path, dict[Position, bytes]]:
    root = tmp_path / "base"
    store = await SegmentStore.open(root, StorageConfig(max_entries_per_ledger=40))
    ml = await store.open_ledger(TOPIC)
    rng = random.Random(5)
    payloads = [rng.randbytes(rng.randrange(1, 600)) for _ in range(150)]
    positions = await asyncio.gather(*(ml.append(p) for p in payloads))
    if request.param == "crashed":
        await store.writer.barrier()
        # ... and the I/O thread (one thread, FIFO) has written the sealed segments' indexes.
        await asyncio.get_running_loop().run_in_executor(store._io_pool, lambda: None)
        root = copy_store(root, tmp_path / "crashed")
        last = segment_paths(root, TOPIC)[-1]
        assert last.read_bytes().endswith(bytes(4096))  # the zero tail is there
    await store.close()
    return root, dict(zip(positions, payloads, strict=True))


async def _reopen_and_read(root: Path) -> tuple[SegmentStore, dict[Position, bytes]]:
    store = await SegmentStore.open(root, StorageConfig(entry_cache_bytes=0))
    ml = await store.open_ledger(TOPIC)
    got = await ml.read_entries(Position(0, 0), 10_000, 1 << 30)
    positions = [e.position for e in got]
    assert positions == sorted(positions)
    return store, {e.position: e.data for e in got}


async def test_truncating_last_segment_at_random_offsets(
    base: tuple[Path, dict[Position, bytes]], tmp_path: Path
) -> None:
    root, original = base
    rng = random.Random(11)
    for trial in range(TRIALS):
        copy = copy_store(root, tmp_path / f"t{trial}")
        last = segment_paths(copy, TOPIC)[-1]
        cut = rng.randrange(0, last.stat().st_size)
        last.write_bytes(last.read_bytes()[:cut])
        store, got = await _reopen_and_read(copy)
        try:
            last_ledger = int(last.stem)
            for pos, data in got.items():
                assert original[pos] == data  # never a corrupt or wrong payload
            kept = sorted(p for p in got if p.ledger_id == last_ledger)
            assert kept == [Position(last_ledger, i) for i in range(len(kept))]  # a prefix
            assert all(p in got for p in original if p.ledger_id != last_ledger)
            lost = [p for p in original if p.ledger_id == last_ledger and p not in got]
            if lost:
                kinds = {e.kind for e in store.recovery_report.events}
                assert kinds & {"truncated_tail", "torn_header"}
        finally:
            await store.close()
        # Reopening the repaired store again reports nothing new and changes nothing.
        store, again = await _reopen_and_read(copy)
        try:
            assert again == got
            assert store.recovery_report.events == ()
        finally:
            await store.close()


async def test_random_bit_flips_in_sealed_segments_are_dropped_and_reported(
    base: tuple[Path, dict[Position, bytes]], tmp_path: Path
) -> None:
    root, original = base
    rng = random.Random(12)
    for trial in range(TRIALS):
        copy = copy_store(root, tmp_path / f"b{trial}")
        paths = segment_paths(copy, TOPIC)
        flips = rng.randint(1, 6)
        for _ in range(flips):
            path = rng.choice(paths)
            flip_bit(path, rng.randrange(path.stat().st_size), rng.randrange(8))
        store, got = await _reopen_and_read(copy)
        try:
            for pos, data in got.items():
                assert original[pos] == data
            missing = [p for p in original if p not in got]
            report = store.recovery_report
            # Each flip destroys at most one record; every loss is in the report.
            assert len(missing) <= flips
            reported = {Position(e.ledger_id, i) for e in report.events for i in e.entry_ids}
            torn = {e.ledger_id for e in report.events if e.kind == "truncated_tail"}
            for pos in missing:
                assert pos in reported or pos.ledger_id in torn
            # Sealed segments with a valid index are not scanned on open: their damage is
            # found by the per-record CRC when read ("corrupt_read"), the rest by the scan.
            assert report.corrupt_records == len([e for e in report.events
                                                  if e.kind in ("corrupt_record", "corrupt_read")])
            ml = store.open_ledgers[TOPIC]
            for pos in missing:
                assert await ml.read_entry(pos) is None
        finally:
            await store.close()


async def test_bit_rot_after_recovery_is_caught_on_read(
    base: tuple[Path, dict[Position, bytes]], tmp_path: Path
) -> None:
    root, original = base
    copy = copy_store(root, tmp_path / "rot")
    store = await SegmentStore.open(copy, StorageConfig(entry_cache_bytes=0))
    ml = await store.open_ledger(TOPIC)
    first = segment_paths(copy, TOPIC)[0]
    flip_bit(first, first.stat().st_size - 3, 1)  # inside the last record of ledger 0
    got = await ml.read_entries(Position(0, 0), 10_000, 1 << 30)
    assert all(original[e.position] == e.data for e in got)
    assert len(got) == len(original) - 1
    assert store.recovery_report.corrupt_records == 1
    assert [e.kind for e in store.recovery_report.events] == ["corrupt_read"]
    await store.close()


@pytest.mark.parametrize("index", ["indexed", "scanned"])
async def test_cursor_moves_past_entries_recovery_dropped(
    base: tuple[Path, dict[Position, bytes]], tmp_path: Path, index: str
) -> None:
    root, original = base
    copy = copy_store(root, tmp_path / "cur")
    store = await SegmentStore.open(copy)
    ml = await store.open_ledger(TOPIC)
    cursor = await ml.open_cursor("s", initial_position="earliest")
    await store.close()
    first = segment_paths(copy, TOPIC)[0]
    assert first.with_suffix(".idx").exists()  # sealed segments carry their index
    if index == "scanned":
        first.with_suffix(".idx").unlink()
    flip_bit(first, 32 + 16 + 2, 0)  # payload of entry (0, 0)
    store = await SegmentStore.open(copy, StorageConfig(entry_cache_bytes=0))
    ml = await store.open_ledger(TOPIC)
    cursor = ml.cursors["s"]
    if index == "indexed":
        # Not scanned on open: the damage is found by the record's CRC on the first read,
        # never served, reported, and the cursor then moves past the hole.
        assert cursor.mark_delete_position == Position(0, -1)
        got = await ml.read_entries(Position(0, 0), 5)
        assert [e.position for e in got] == [Position(0, i) for i in range(1, 6)]
        assert [e.kind for e in store.recovery_report.events] == ["corrupt_read"]
        assert store.recovery_report.corrupt_records == 1
        assert await ml.read_entry(Position(0, 0)) is None
    else:
        assert [e.kind for e in store.recovery_report.events] == ["corrupt_record"]
    assert cursor.mark_delete_position == Position(0, 0)  # the hole is not a stuck backlog
    assert cursor.backlog == len(original) - 1
    await store.close()


async def test_damaged_index_falls_back_to_the_scan_and_is_rewritten(
    base: tuple[Path, dict[Position, bytes]], tmp_path: Path
) -> None:
    root, original = base
    rng = random.Random(13)
    for trial in range(TRIALS):
        copy = copy_store(root, tmp_path / f"i{trial}")
        first = segment_paths(copy, TOPIC)[0]
        index = first.with_suffix(".idx")
        good = index.read_bytes()
        flip_bit(index, rng.randrange(len(good)), rng.randrange(8))
        store, got = await _reopen_and_read(copy)
        try:
            assert got == original  # nothing lost: the segment was scanned
            assert store.recovery_report.events == ()
        finally:
            await store.close()
        assert index.read_bytes() == good  # the scan rewrote the same index


async def test_index_of_a_segment_that_changed_is_not_used(
    base: tuple[Path, dict[Position, bytes]], tmp_path: Path
) -> None:
    root, original = base
    copy = copy_store(root, tmp_path / "changed")
    first = segment_paths(copy, TOPIC)[0]
    first.write_bytes(first.read_bytes()[:-5])  # the last record of ledger 0 is torn
    store, got = await _reopen_and_read(copy)
    try:
        lost = [p for p in original if p not in got]
        assert lost == [Position(0, 39)]
        assert [e.kind for e in store.recovery_report.events] == ["truncated_tail"]
    finally:
        await store.close()
    store, again = await _reopen_and_read(copy)  # the rewritten index matches the repair
    try:
        assert again == got and store.recovery_report.events == ()
    finally:
        await store.close()


async def test_leftover_index_files_are_removed_on_open(tmp_path: Path) -> None:
    store = await SegmentStore.open(tmp_path)
    ml = await store.open_ledger(TOPIC)
    await ml.append(b"x")
    await store.close()
    directory = segment_paths(tmp_path, TOPIC)[0].parent
    (directory / "00000000000000099999.idx").write_bytes(b"orphan")  # its segment is gone
    (directory / "00000000000000000000.idx.tmp").write_bytes(b"torn")
    store = await SegmentStore.open(tmp_path)
    await store.open_ledger(TOPIC)
    await store.close()
    # Ledger 1 (the previous open's empty ledger) never had a file, hence no index.
    assert sorted(p.name for p in directory.glob("*.idx*")) == ["00000000000000000000.idx"]


async def test_sealed_segments_load_their_index_instead_of_a_scan(
    base: tuple[Path, dict[Position, bytes]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import storage.recovery

    root, original = base
    copy = copy_store(root, tmp_path / "idx")
    scanned: list[int] = []
    real_scan = storage.recovery.scan_segment

    def counting_scan(*args: object, **kwargs: object) -> object:
        scanned.append(int(args[2]))  # type: ignore[call-overload]
        return real_scan(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(storage.recovery, "scan_segment", counting_scan)
    store, got = await _reopen_and_read(copy)
    await store.close()
    assert got == original
    paths = segment_paths(copy, TOPIC)
    # "closed": every segment was indexed when sealed; "crashed": all but the open one.
    unindexed = [int(p.stem) for p in paths if not (root / p.relative_to(copy)).with_suffix(
        ".idx").exists()]
    assert scanned == unindexed
    assert all(p.with_suffix(".idx").exists() for p in paths)  # the scan wrote the missing one
    scanned.clear()
    store, again = await _reopen_and_read(copy)
    await store.close()
    assert again == original and scanned == []
