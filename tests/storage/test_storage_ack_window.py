"""The acknowledgement durability window is bounded and visible: cursor saves run in
parallel, the oldest unsaved ack's age is in the stats, a failing save is surfaced in stats
and health, not only logged."""

from __future__ import annotations

import asyncio
import errno
import threading
from pathlib import Path

import pytest
from waiting import wait_until_async

from storage import Position, SegmentStore, StorageConfig
from storage.fileops import FileOps

TOPIC = "persistent://public/default/acks"
CONFIG = StorageConfig(mark_delete_rate_limit_per_sec=0, cursor_save_threads=2)


class CursorDiskOps(FileOps):
    """Cursor saves can fail (EIO on the temporary file's fsync) or hang (until released);
    `replaced` records the cursor files put in place."""

    def __init__(self) -> None:
        self.fail = False
        self.hang: str | None = None
        self.release = threading.Event()
        self.hanging = threading.Event()
        self.replaced: list[str] = []
        self.other_saved = threading.Event()
        self._paths: dict[int, Path] = {}

    def open(self, path: Path, flags: int, mode: int = 0o644) -> int:
        fd = super().open(path, flags, mode)
        self._paths[fd] = Path(path)
        return fd

    def fsync(self, fd: int) -> None:
        name = self._paths.get(fd, Path()).name
        if name.endswith(".cur.tmp"):
            if self.fail:
                raise OSError(errno.EIO, "injected EIO (cursor fsync)")
            if self.hang is not None and name.startswith(self.hang):
                self.hanging.set()
                assert self.release.wait(10), "never released"
        super().fsync(fd)

    def replace(self, src: Path, dst: Path) -> None:
        super().replace(src, dst)
        if src.name.endswith(".cur.tmp"):
            self.replaced.append(dst.name)
            if self.hang is not None and not dst.name.startswith(self.hang):
                self.other_saved.set()


async def test_oldest_unsaved_ack_age_is_reported_until_saved(tmp_path: Path) -> None:
    store = await SegmentStore.open(tmp_path, CONFIG)
    ml = await store.open_ledger(TOPIC)
    cursor = await ml.open_cursor("sub")
    assert store.stats().oldest_unsaved_ack_seconds == 0.0
    pos = await ml.append(b"x")
    cursor.delete([pos])
    assert cursor.dirty_since is not None
    assert store.stats().oldest_unsaved_ack_seconds > 0.0
    await store.flush()
    assert store.stats().oldest_unsaved_ack_seconds == 0.0
    await store.close()


async def test_an_ack_whose_save_is_in_flight_is_still_unsaved(tmp_path: Path) -> None:
    """The age covers a save that has started but is not yet durable: a kill then loses it."""
    ops = CursorDiskOps()
    store = await SegmentStore.open(tmp_path, CONFIG, file_ops=ops)
    ml = await store.open_ledger(TOPIC)
    cursor = await ml.open_cursor("sub")
    await store.flush()
    pos = await ml.append(b"x")
    ops.hang = "sub"
    cursor.delete([pos])
    saving = asyncio.ensure_future(cursor.flush())
    assert await asyncio.to_thread(ops.hanging.wait, 10)
    assert cursor.dirty_since is not None
    assert store.stats().oldest_unsaved_ack_seconds > 0.0
    ops.release.set()
    await saving
    assert cursor.dirty_since is None
    assert store.stats().oldest_unsaved_ack_seconds == 0.0
    await store.close()


async def test_failing_cursor_save_is_surfaced_in_stats_and_health(tmp_path: Path) -> None:
    ops = CursorDiskOps()
    store = await SegmentStore.open(tmp_path, CONFIG, file_ops=ops)
    ml = await store.open_ledger(TOPIC)
    cursor = await ml.open_cursor("sub")
    cursor.mark_delete(await ml.append(b"x"))
    ops.fail = True
    with pytest.raises(OSError):
        await store.flush()
    stats = store.stats()
    assert (stats.cursor_save_failures, stats.cursors_failing_save) == (1, 1)
    assert cursor.dirty  # kept for the next attempt
    age, total, failing = ml.cursor_set.health(asyncio.get_running_loop().time() + 5.0)
    assert age > 0.0 and (total, failing) == (1, 1)
    assert any("failing to save" in p for p in store.health_problems())
    ops.fail = False
    await store.flush()
    stats = store.stats()
    assert (stats.cursor_save_failures, stats.cursors_failing_save) == (1, 0)
    assert store.health_problems() == []
    await store.close()


async def test_one_slow_cursor_save_does_not_hold_up_the_others(tmp_path: Path) -> None:
    ops = CursorDiskOps()
    store = await SegmentStore.open(tmp_path, CONFIG, file_ops=ops)
    slow = await store.open_ledger(TOPIC)
    fast = await store.open_ledger(TOPIC + "-2")
    a = await slow.open_cursor("aaa")
    b = await fast.open_cursor("bbb")
    a.mark_delete(await slow.append(b"1"))
    b.mark_delete(await fast.append(b"2"))
    ops.hang = "aaa"
    flushing = asyncio.create_task(store.flush())
    loop = asyncio.get_running_loop()
    assert await loop.run_in_executor(None, ops.hanging.wait, 10)
    # While aaa's save hangs in fsync, bbb's save (another cursor thread) completes.
    assert await loop.run_in_executor(None, ops.other_saved.wait, 10)
    ops.release.set()
    await flushing
    assert not a.dirty and not b.dirty
    assert a.mark_delete_position == Position(a.mark_delete_position.ledger_id, 0)
    await store.close()


async def test_rate_limited_flush_saves_only_ledgers_with_dirty_cursors(tmp_path: Path) -> None:
    store = await SegmentStore.open(
        tmp_path, StorageConfig(mark_delete_rate_limit_per_sec=20, cursor_save_threads=2))
    busy = await store.open_ledger(TOPIC)
    idle = await store.open_ledger(TOPIC + "-idle")
    cursor = await busy.open_cursor("sub")
    await idle.open_cursor("sub")
    await store.flush()
    assert not busy.cursor_set.any_dirty
    assert not idle.cursor_set.any_dirty
    cursor.delete([await busy.append(b"x")])
    assert busy.cursor_set.any_dirty
    assert not idle.cursor_set.any_dirty
    await wait_until_async(lambda: not busy.cursor_set.any_dirty,
                           message="the flush loop saves the dirty cursor")
    assert store.stats().oldest_unsaved_ack_seconds == 0.0
    await store.close()
