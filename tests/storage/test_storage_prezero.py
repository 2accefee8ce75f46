"""Pre-zeroed segments: zeros are kept ahead of the write head by the writer thread, sealing
cuts them off, sizes are logical, and recovery treats the zero tail as the end (not data)."""

from __future__ import annotations

import asyncio
import os
import random
import threading
from pathlib import Path

import pytest
from storage_testlib import FaultyFileOps, copy_store, flip_bit, segment_paths

from storage import PersistenceError, Position, SegmentStore, StorageConfig
from storage.fileops import FileOps
from storage.segments import FILE_HEADER_SIZE, RECORD_HEADER_SIZE, scan_segment

TOPIC = "persistent://public/default/z"
SMALL = {"segment_prezero_bytes": 32 * 1024, "segment_prezero_min_bytes": 4096,
         # these tests pin the zeroing itself, whatever the size of a group commit
         "segment_prezero_max_batch_bytes": 1 << 30}


def _config(**kw: object) -> StorageConfig:
    return StorageConfig(**kw)  # type: ignore[arg-type]


def _logical_end(payloads: list[bytes]) -> int:
    return FILE_HEADER_SIZE + sum(RECORD_HEADER_SIZE + len(p) for p in payloads)


async def test_open_segment_has_zeros_ahead_and_sealing_cuts_them(tmp_path: Path) -> None:
    store = await SegmentStore.open(tmp_path, _config(max_entries_per_ledger=30))
    ml = await store.open_ledger(TOPIC)
    payloads = [b"p%03d" % i * 50 for i in range(40)]
    for p in payloads:
        await ml.append(p)
    first, second = segment_paths(tmp_path, TOPIC)
    await store.writer.barrier()
    # Ledger 1 was sealed by the rollover: back to its logical end. Ledger 2 is open and
    # has written zeros ahead of its head.
    assert first.stat().st_size == _logical_end(payloads[:30])
    assert second.stat().st_size >= _logical_end(payloads[30:]) + 4096
    assert second.read_bytes()[_logical_end(payloads[30:]):].count(0) == (
        second.stat().st_size - _logical_end(payloads[30:]))
    # Sizes are logical: the data bytes, never the preallocated file size.
    assert ml.total_size_bytes == sum(map(len, payloads))
    assert [li.size_bytes for li in ml.ledgers] == [sum(map(len, payloads[:30])),
                                                     sum(map(len, payloads[30:]))]
    await store.close()
    assert second.stat().st_size == _logical_end(payloads[30:])


async def test_prezero_keeps_ahead_of_a_long_stream_amortised(tmp_path: Path) -> None:
    store = await SegmentStore.open(tmp_path, _config(**SMALL))
    ml = await store.open_ledger(TOPIC)
    rng = random.Random(1)
    payloads = [rng.randbytes(rng.randrange(100, 2000)) for _ in range(300)]
    for p in payloads:  # one at a time: the single-appender pattern
        await ml.append(p)
    stats = store.stats()
    written = _logical_end(payloads)
    assert stats.prezero_writes >= written // SMALL["segment_prezero_bytes"]
    assert stats.prezero_writes < len(payloads) // 4  # a step per many appends
    assert stats.prezero_bytes >= written - 4096
    # One fdatasync per group commit, plus at most one per pre-zero step (the sync stage's
    # next fdatasync of the file covers the zeros: its own, or the next group commit's).
    assert stats.group_commits <= stats.fsyncs <= stats.group_commits + stats.prezero_writes
    (path,) = segment_paths(tmp_path, TOPIC)
    await store.writer.barrier()
    assert path.stat().st_size > written
    await store.close()
    store = await SegmentStore.open(tmp_path)
    ml = await store.open_ledger(TOPIC)
    got = await ml.read_entries(Position(0, 0), 1000, 1 << 30)
    assert [e.data for e in got] == payloads
    assert store.recovery_report.events == ()
    await store.close()


async def test_crash_leaves_a_zero_tail_that_recovery_drops_silently(tmp_path: Path) -> None:
    store = await SegmentStore.open(tmp_path / "live", _config(**SMALL))
    ml = await store.open_ledger(TOPIC)
    payloads = [b"e%d" % i * 40 for i in range(200)]
    positions = await asyncio.gather(*(ml.append(p) for p in payloads))
    await store.writer.barrier()
    # The state a SIGKILL (or power loss after the last fdatasync) leaves behind.
    crashed = copy_store(tmp_path / "live", tmp_path / "crashed")
    await store.close()
    (path,) = segment_paths(crashed, TOPIC)
    zero_tail = path.stat().st_size - _logical_end(payloads)
    assert zero_tail > 0
    store = await SegmentStore.open(crashed, _config(entry_cache_bytes=0))
    ml = await store.open_ledger(TOPIC)
    got = await ml.read_entries(positions[0], 1000, 1 << 30)
    assert [e.data for e in got] == payloads
    report = store.recovery_report
    assert report.events == ()
    assert report.truncated_bytes == 0 and report.dropped_entries == 0
    assert path.stat().st_size == _logical_end(payloads)  # the recovered ledger is sealed
    assert ml.total_size_bytes == sum(map(len, payloads))
    await store.close()


async def test_damage_in_a_crashed_zero_tail_never_costs_an_entry(tmp_path: Path) -> None:
    store = await SegmentStore.open(tmp_path / "live", _config(**SMALL))
    ml = await store.open_ledger(TOPIC)
    payloads = [b"f%d" % i * 30 for i in range(100)]
    await asyncio.gather(*(ml.append(p) for p in payloads))
    await store.writer.barrier()
    base = copy_store(tmp_path / "live", tmp_path / "base")
    await store.close()
    end = _logical_end(payloads)
    size = segment_paths(base, TOPIC)[0].stat().st_size
    rng = random.Random(3)
    for trial in range(8):
        copy = copy_store(base, tmp_path / f"t{trial}")
        (path,) = segment_paths(copy, TOPIC)
        if trial % 2:
            os.truncate(path, rng.randrange(end, size))  # power loss inside the zero tail
        flips = [rng.randrange(end, size) for _ in range(rng.randint(0, 3))]
        for at in flips:
            if at < path.stat().st_size:
                flip_bit(path, at, rng.randrange(8))
        store = await SegmentStore.open(copy, _config(entry_cache_bytes=0))
        ml = await store.open_ledger(TOPIC)
        got = await ml.read_entries(Position(0, 0), 1000, 1 << 30)
        assert [e.data for e in got] == payloads
        report = store.recovery_report
        assert report.corrupt_records == 0 and report.dropped_entries == 0
        assert {e.kind for e in report.events} <= {"truncated_tail"}
        assert report.truncated_bytes <= (max(flips) + 1 - end if flips else 0)
        await store.close()


async def test_failed_prezero_fences_the_ledger_but_keeps_acknowledged_entries(
    tmp_path: Path,
) -> None:
    ops = FaultyFileOps()
    store = await SegmentStore.open(tmp_path, _config(**SMALL), file_ops=ops)
    ml = await store.open_ledger(TOPIC)
    acked = [await ml.append(b"a" * 100)]
    ops.fail_pwrite = True
    acked_data = [b"a" * 100]
    failed = None
    for i in range(400):  # until the writer needs to pre-zero and fails
        try:
            acked.append(await ml.append(b"b%d" % i * 50))
            acked_data.append(b"b%d" % i * 50)
        except PersistenceError as exc:
            failed = exc
            break
    assert failed is not None
    assert ml.fenced
    with pytest.raises(PersistenceError):
        await ml.append(b"later")
    assert ml.last_confirmed == acked[-1]
    await store.close()
    store = await SegmentStore.open(tmp_path)
    ml = await store.open_ledger(TOPIC)
    got = await ml.read_entries(acked[0], 1000, 1 << 30)
    assert [e.data for e in got] == acked_data
    await store.close()


async def test_prezero_can_be_disabled(tmp_path: Path) -> None:
    store = await SegmentStore.open(tmp_path, _config(segment_prezero_bytes=0))
    ml = await store.open_ledger(TOPIC)
    payloads = [b"x" * 500 for _ in range(50)]
    for p in payloads:
        await ml.append(p)
    await store.writer.barrier()
    (path,) = segment_paths(tmp_path, TOPIC)
    assert path.stat().st_size == _logical_end(payloads)
    assert store.stats().prezero_writes == 0
    await store.close()


async def test_scan_of_a_live_segment_matches_the_writer_index(tmp_path: Path) -> None:
    store = await SegmentStore.open(tmp_path / "live", _config(**SMALL))
    ml = await store.open_ledger(TOPIC)
    await asyncio.gather(*(ml.append(b"q" * (i % 700)) for i in range(300)))
    await store.writer.barrier()
    led = ml._ledgers[ml.ledgers[-1].ledger_id]
    offsets = list(led.segment.offsets)
    copy = copy_store(tmp_path / "live", tmp_path / "copy")
    await store.close()
    (path,) = segment_paths(copy, TOPIC)
    result = scan_segment(FileOps(), path, int(path.stem), truncate=False)
    assert list(result.offsets) == offsets
    assert result.events == [] and result.zero_tail_bytes > 0


class _FreezingPwriteOps(FileOps):
    """Freezes the writer thread in the middle of a pre-zero write (half of it written), the
    moment a SIGKILL would leave behind; the test snapshots the files there."""

    def __init__(self, freeze_at_call: int) -> None:
        self.calls = 0
        self.freeze_at_call = freeze_at_call
        self.frozen = threading.Event()
        self.release = threading.Event()

    def pwrite(self, fd: int, data: bytes | memoryview, offset: int) -> int:
        self.calls += 1
        if self.calls == self.freeze_at_call:
            half = len(data) // 2
            written = os.pwrite(fd, data[:half], offset)
            self.frozen.set()
            self.release.wait(30)
            return written
        return os.pwrite(fd, data, offset)


@pytest.mark.parametrize("freeze_at_call", [1, 2, 5])
async def test_kill_in_the_middle_of_a_prezero_loses_nothing(
    tmp_path: Path, freeze_at_call: int
) -> None:
    ops = _FreezingPwriteOps(freeze_at_call)
    store = await SegmentStore.open(tmp_path / "live", _config(**SMALL), file_ops=ops)
    ml = await store.open_ledger(TOPIC)
    acked: list[tuple[Position, bytes]] = []
    loop = asyncio.get_running_loop()
    for i in range(2000):
        data = b"k%d" % i * 20
        fut = ml.append(data)
        # The freeze may hold this very append's batch (the first pre-zero step is written
        # when the segment is created): only what resolved before the snapshot is acked.
        while not fut.done() and not ops.frozen.is_set():
            await asyncio.wait({fut}, timeout=0.01)
        if fut.done():
            acked.append((fut.result(), data))
        if ops.frozen.is_set():
            break
    assert ops.frozen.is_set()
    crashed = await loop.run_in_executor(
        None, copy_store, tmp_path / "live", tmp_path / "crashed")
    ops.release.set()
    await store.close()
    store = await SegmentStore.open(crashed, _config(entry_cache_bytes=0))
    ml = await store.open_ledger(TOPIC)
    got = await ml.read_entries(Position(0, 0), 5000, 1 << 30)
    assert [(e.position, e.data) for e in got] == acked
    report = store.recovery_report
    assert report.events == ()
    await store.close()


async def test_large_group_commits_grow_the_segment_instead_of_pre_zeroing(
        tmp_path: Path) -> None:
    config = {**SMALL, "segment_prezero_max_batch_bytes": 16 * 1024}
    store = await SegmentStore.open(tmp_path, _config(**config))
    ml = await store.open_ledger(TOPIC)
    payloads = [bytes([i % 251]) * 1000 for i in range(200)]
    await asyncio.gather(*(ml.append(p) for p in payloads))  # one commit of ~200 KB
    await asyncio.gather(*(ml.append(p) for p in payloads))
    await store.writer.barrier()
    stats = store.stats()
    assert stats.prezero_writes == 0 and stats.fsyncs == stats.group_commits
    small = await ml.append(b"s" * 100)  # a small commit pre-zeroes again
    await store.writer.barrier()
    assert store.stats().prezero_writes == 1
    await store.close()
    store = await SegmentStore.open(tmp_path)
    ml = await store.open_ledger(TOPIC)
    got = await ml.read_entries(Position(small.ledger_id, 0), 1000, 1 << 30)
    assert [e.data for e in got] == payloads + payloads + [b"s" * 100]
    assert store.recovery_report.events == ()
    await store.close()
