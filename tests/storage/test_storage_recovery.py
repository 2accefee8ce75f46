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
            assert report.corrupt_records == len([e for e in report.events
                                                  if e.kind == "corrupt_record"])
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


async def test_cursor_moves_past_entries_recovery_dropped(
    base: tuple[Path, dict[Position, bytes]], tmp_path: Path
) -> None:
    root, original = base
    copy = copy_store(root, tmp_path / "cur")
    store = await SegmentStore.open(copy)
    ml = await store.open_ledger(TOPIC)
    cursor = await ml.open_cursor("s", initial_position="earliest")
    await store.close()
    first = segment_paths(copy, TOPIC)[0]
    flip_bit(first, 32 + 16 + 2, 0)  # payload of entry (0, 0)
    store = await SegmentStore.open(copy)
    ml = await store.open_ledger(TOPIC)
    cursor = ml.cursors["s"]
    assert cursor.mark_delete_position == Position(0, 0)  # the hole is not a stuck backlog
    assert cursor.backlog == len(original) - 1
    await store.close()
