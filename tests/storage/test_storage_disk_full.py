"""Disk nearly full, as BookKeeper handles it: read-only at diskUsageThreshold, writable again
below diskUsageLwmThreshold, reads/acks/cursor saves/trims keep working meanwhile; disk usage
comes from an injected measure."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from storage import SegmentStore, StorageConfig, StorageReadOnlyError
from storage.diskusage import DiskMonitor, DiskSpace

TOPIC = "persistent://public/default/full"
TOTAL = 1000 * 1024 * 1024


class FakeDisk:
    """A disk whose usage the test sets; counts how often it was measured."""

    def __init__(self, usage: float) -> None:
        self.usage = usage
        self.measured = 0

    def __call__(self, path: Path) -> DiskSpace:
        self.measured += 1
        return DiskSpace(TOTAL, int(TOTAL * (1 - self.usage)))


async def _store(root: Path, disk: FakeDisk) -> SegmentStore:
    config = StorageConfig(max_entries_per_ledger=5, mark_delete_rate_limit_per_sec=0,
                           disk_check_interval_ms=3_600_000)  # checks driven by the test
    return await SegmentStore.open(root, config, measure_space=disk)


async def test_read_only_above_high_watermark_and_writable_below_low(tmp_path: Path) -> None:
    disk = FakeDisk(0.50)
    store = await _store(tmp_path, disk)
    ml = await store.open_ledger(TOPIC)
    cursor = await ml.open_cursor("sub", initial_position="earliest")
    stored = [await ml.append(b"e%d" % i) for i in range(12)]
    assert not store.disk.read_only
    disk.usage = 0.96
    assert await store.disk.check()  # >= 0.95: read-only
    with pytest.raises(StorageReadOnlyError):
        await ml.append(b"refused")
    assert not ml.fenced  # nothing to reload: the ledger is fine
    # Reads, acks, cursor saves and trimming go on.
    got = await ml.read_entries(stored[0], 100)
    assert [e.data for e in got] == [b"e%d" % i for i in range(12)]
    cursor.mark_delete(stored[9])
    await cursor.flush()
    assert await ml.trim() != []
    disk.usage = 0.92  # between the watermarks: still read-only (hysteresis)
    assert await store.disk.check()
    with pytest.raises(StorageReadOnlyError):
        await ml.append(b"still refused")
    disk.usage = 0.89  # below diskUsageLwmThreshold: writable again by itself
    assert not await store.disk.check()
    pos = await ml.append(b"resumed")
    assert (await ml.read_entry(pos)) is not None
    stats = store.stats()
    assert (stats.read_only, stats.read_only_entered, stats.appends_refused_read_only) == (
        False, 1, 2)
    assert stats.disk_usage == pytest.approx(0.89)
    await store.close()


async def test_store_opened_on_a_full_disk_starts_read_only(tmp_path: Path) -> None:
    disk = FakeDisk(0.99)
    store = await _store(tmp_path, disk)
    assert store.disk.read_only
    assert disk.measured == 1  # measured once at open, off the loop
    ml = await store.open_ledger(TOPIC)
    with pytest.raises(StorageReadOnlyError):
        await ml.append(b"x")
    assert any("read-only" in p for p in store.health_problems())
    await store.close()


async def test_usage_is_measured_periodically_off_the_loop(tmp_path: Path) -> None:
    loop = asyncio.get_running_loop()
    disk = FakeDisk(0.10)
    seen = asyncio.Event()
    threads: list[bool] = []

    def measure(path: Path) -> DiskSpace:
        threads.append(loop.is_running() and _on_loop_thread(loop))
        if len(threads) >= 3:
            loop.call_soon_threadsafe(seen.set)
        return disk(path)

    monitor = DiskMonitor(loop, tmp_path, high=0.95, low=0.90, interval_s=0.001,
                          measure=measure)
    monitor.start()
    await asyncio.wait_for(seen.wait(), 10)
    await monitor.stop()
    assert threads and not any(threads)  # never measured on the event loop's thread


def _on_loop_thread(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


def test_watermarks_must_be_ordered(tmp_path: Path) -> None:
    loop = asyncio.new_event_loop()
    try:
        with pytest.raises(ValueError, match="diskUsageLwmThreshold <= diskUsageThreshold"):
            DiskMonitor(loop, tmp_path, high=0.80, low=0.90, interval_s=1)
    finally:
        loop.close()
