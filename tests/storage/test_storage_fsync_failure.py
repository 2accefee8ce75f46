"""Fault injection: a failed fdatasync or write fences the ledger; nothing unsynced is acked."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from pathlib import Path

import pytest
from storage_testlib import FaultyFileOps

from storage import PersistenceError, Position, SegmentStore, StorageConfig

TOPIC = "persistent://public/default/f"


async def _open(root: Path, ops: FaultyFileOps) -> SegmentStore:
    return await SegmentStore.open(root, StorageConfig(max_entries_per_ledger=1000),
                                   file_ops=ops)


async def test_fsync_eio_fences_ledger_and_acknowledges_nothing_after(tmp_path: Path) -> None:
    ops = FaultyFileOps()
    store = await _open(tmp_path, ops)
    ml = await store.open_ledger(TOPIC)
    good = await asyncio.gather(*(ml.append(b"ok%d" % i) for i in range(20)))
    ops.fail_fdatasync = True
    failing = [ml.append(b"bad%d" % i) for i in range(20)]
    results = await asyncio.gather(*failing, return_exceptions=True)
    assert all(isinstance(r, PersistenceError) for r in results)
    assert ml.fenced
    assert ml.last_confirmed == good[-1]
    ops.fail_fdatasync = False  # a later fsync "succeeding" must not un-fence (fsyncgate)
    later = ml.append(b"later")
    with pytest.raises(PersistenceError):
        await later
    assert ml.last_confirmed == good[-1]
    got = await ml.read_entries(good[0], 100)
    assert [e.data for e in got] == [b"ok%d" % i for i in range(20)]
    await store.close()
    # After a restart every acknowledged entry is there, and the topic accepts writes again.
    store = await SegmentStore.open(tmp_path)
    ml = await store.open_ledger(TOPIC)
    got = await ml.read_entries(good[0], 100)
    assert [e.data for e in got[:20]] == [b"ok%d" % i for i in range(20)]
    pos = await ml.append(b"after-restart")
    assert pos.ledger_id > good[-1].ledger_id
    await store.close()


async def test_write_eio_fences_only_the_failing_ledger(tmp_path: Path) -> None:
    ops = FaultyFileOps()
    store = await _open(tmp_path, ops)
    bad = await store.open_ledger("bad")
    fine = await store.open_ledger("fine")
    await bad.append(b"first")
    ops.fail_writev = True
    fut = bad.append(b"x")
    with pytest.raises(PersistenceError):
        await fut
    ops.fail_writev = False
    assert bad.fenced
    assert await fine.append(b"y") == Position(fine.ledgers[-1].ledger_id, 0)
    assert not fine.fenced
    await store.close()


async def test_futures_already_queued_behind_a_failed_batch_fail_too(tmp_path: Path) -> None:
    ops = FaultyFileOps()
    store = await _open(tmp_path, ops)
    ml = await store.open_ledger(TOPIC)
    await ml.append(b"warm")
    ops.fail_fdatasync = True
    acked: list[Position] = []
    failures = 0

    async def producer(i: int) -> None:
        nonlocal failures
        for j in range(10):
            try:
                acked.append(await ml.append(b"%d-%d" % (i, j)))
            except PersistenceError:
                failures += 1
                return

    await asyncio.gather(*(producer(i) for i in range(16)))
    assert acked == []
    assert failures == 16
    assert store.stats().failed_fsyncs >= 1
    await store.close()


class ShortWriteOps(FaultyFileOps):
    """writev writes only half of its first buffer, as a full disk or a signal might."""

    def writev(self, fd: int, buffers: Sequence[bytes | memoryview]) -> int:
        first = bytes(buffers[0])
        return os.write(fd, first[: max(1, len(first) // 2)])


async def test_short_writes_are_completed_not_acknowledged_torn(tmp_path: Path) -> None:
    store = await SegmentStore.open(tmp_path, file_ops=ShortWriteOps())
    ml = await store.open_ledger(TOPIC)
    payloads = [b"short-%d" % i * (i + 1) for i in range(30)]
    positions = await asyncio.gather(*(ml.append(p) for p in payloads))
    await store.close()
    store = await SegmentStore.open(tmp_path)
    ml = await store.open_ledger(TOPIC)
    got = await ml.read_entries(positions[0], 100)
    assert [e.data for e in got] == payloads
    assert store.recovery_report.events == ()
    await store.close()


async def test_a_group_of_more_records_than_iov_max_is_written_whole(tmp_path: Path) -> None:
    # 1,300 records in one group: writev in three pieces of at most IOV_MAX buffers, each
    # one short (ShortWriteOps) and finished with plain writes, in order.
    store = await SegmentStore.open(tmp_path, file_ops=ShortWriteOps())
    ml = await store.open_ledger(TOPIC)
    payloads = [b"many-%d" % i for i in range(1300)]
    positions = await asyncio.gather(*(ml.append(p) for p in payloads))
    assert store.stats().group_commits == 1
    await store.close()
    store = await SegmentStore.open(tmp_path)
    ml = await store.open_ledger(TOPIC)
    got = await ml.read_entries(positions[0], 2000)
    assert [e.data for e in got] == payloads
    assert store.recovery_report.events == ()
    await store.close()
