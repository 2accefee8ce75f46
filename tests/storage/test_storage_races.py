"""Races with a slowed disk (a FileOps whose fsync waits on an event; no sleeps): a deleted
cursor is never written back, delete_ledger is serialised with open_ledger, and an
open_ledger that overlaps close() registers nothing."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
from storage_testlib import ledger_dir

from storage import LedgerClosedError, SegmentStore, StorageConfig
from storage.fileops import FileOps
from storage.sealed_manifest import MANIFEST_NAME

TOPIC = "persistent://public/default/races"
CONFIG = StorageConfig(mark_delete_rate_limit_per_sec=0)
WAIT = 10.0
HELD = 0.3   # how long a held-back task is given to show it is not held (never fails by load)


class GatedOps(FileOps):
    """fsync / fdatasync / open of paths whose name contains `match` block until `gate` is set; `entered`
    is set when one is blocked."""

    def __init__(self) -> None:
        self.match: str | None = None
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()
        self._paths: dict[int, Path] = {}

    def _hold(self, path: Path) -> None:
        if self.match is not None and self.match in str(path) and not self.gate.is_set():
            self.entered.set()
            assert self.gate.wait(WAIT), "test gate never opened"

    def open(self, path: Path, flags: int, mode: int = 0o644) -> int:
        self._hold(Path(path))
        fd = super().open(path, flags, mode)
        self._paths[fd] = Path(path)
        return fd

    def fsync(self, fd: int) -> None:
        self._hold(self._paths.get(fd, Path()))
        super().fsync(fd)

    def fdatasync(self, fd: int) -> None:   # the segment writer's sync
        self._hold(self._paths.get(fd, Path()))
        super().fdatasync(fd)

    def block(self, match: str) -> None:
        self.match = match
        self.entered.clear()
        self.gate.clear()

    async def wait_entered(self) -> None:
        assert await asyncio.get_running_loop().run_in_executor(None, self.entered.wait, WAIT)

    def release(self) -> None:
        self.gate.set()


async def test_deleted_cursor_is_never_written_back_by_a_flush_in_flight(tmp_path: Path) -> None:
    ops = GatedOps()
    store = await SegmentStore.open(tmp_path, CONFIG, file_ops=ops)
    ml = await store.open_ledger(TOPIC)
    cursor = await ml.open_cursor("doomed", initial_position="earliest")
    pos = await ml.append(b"x")
    cursor.mark_delete(pos)
    ops.block(".cur.tmp")  # the save's fsync of its temporary file hangs
    flushing = asyncio.create_task(store.flush())
    await ops.wait_entered()
    deleting = asyncio.create_task(ml.delete_cursor("doomed"))
    await asyncio.sleep(0)  # let the delete start (it must wait for the save in flight)
    assert not deleting.done()
    ops.release()
    await asyncio.gather(flushing, deleting)
    assert list((ledger_dir(tmp_path, TOPIC) / "cursors").iterdir()) == []
    await store.close()
    store = await SegmentStore.open(tmp_path, CONFIG)
    ml = await store.open_ledger(TOPIC)
    assert "doomed" not in ml.cursors
    assert await ml.trim() is not None
    await store.close()


async def test_flush_after_delete_does_not_recreate_the_cursor(tmp_path: Path) -> None:
    store = await SegmentStore.open(tmp_path, CONFIG)
    ml = await store.open_ledger(TOPIC)
    cursor = await ml.open_cursor("gone")
    cursor.read_position = cursor.read_position  # dirty
    await ml.delete_cursor("gone")
    await cursor.flush()  # someone still holding the object: a no-op
    assert list((ledger_dir(tmp_path, TOPIC) / "cursors").iterdir()) == []
    await store.close()


async def test_delete_ledger_waits_for_an_open_of_the_same_name(tmp_path: Path) -> None:
    ops = GatedOps()
    store = await SegmentStore.open(tmp_path, CONFIG, file_ops=ops)
    ml = await store.open_ledger(TOPIC)
    await ml.append(b"data")
    await ml.close()
    ops.block(MANIFEST_NAME)  # hold the reopen in recovery, where it reads the manifest
    opening = asyncio.create_task(store.open_ledger(TOPIC))
    await ops.wait_entered()
    deleting = asyncio.create_task(store.delete_ledger(TOPIC))
    await asyncio.sleep(0)
    assert not deleting.done()  # serialised behind the open
    ops.release()
    reopened = await opening
    await deleting
    assert reopened.closed  # the delete closed what the open registered
    assert TOPIC not in store.open_ledgers
    assert TOPIC not in store.ledger_names()
    assert not ledger_dir(tmp_path, TOPIC).exists()
    await store.close()


async def test_open_ledger_overlapping_close_registers_nothing(tmp_path: Path) -> None:
    ops = GatedOps()
    store = await SegmentStore.open(tmp_path, CONFIG, file_ops=ops)
    ml = await store.open_ledger(TOPIC)
    await ml.append(b"data")
    await ml.close()
    ops.block(MANIFEST_NAME)
    opening = asyncio.create_task(store.open_ledger(TOPIC))
    await ops.wait_entered()
    closing = asyncio.create_task(store.close())
    await asyncio.sleep(0)  # close() has begun (marked the store closed)
    ops.release()
    with pytest.raises(LedgerClosedError):
        await opening
    await closing
    assert store.open_ledgers == {}


async def test_a_cancelled_flush_still_holds_back_the_delete_until_its_write_is_done(
        tmp_path: Path) -> None:
    """The store's background flush is cancelled at close, a subscription's task can be too:
    the write already handed to a cursor thread goes on regardless, so the delete must still
    wait for it, or the deleted cursor's file is written back."""
    ops = GatedOps()
    store = await SegmentStore.open(tmp_path, CONFIG, file_ops=ops)
    ml = await store.open_ledger(TOPIC)
    cursor = await ml.open_cursor("doomed", initial_position="earliest")
    cursor.mark_delete(await ml.append(b"x"))
    ops.block(".cur.tmp")
    flushing = asyncio.create_task(cursor.flush())
    await ops.wait_entered()
    flushing.cancel()
    deleting = asyncio.create_task(ml.delete_cursor("doomed"))
    # Time enough for the delete to finish were it not held back (it is, for good: no race).
    done, _ = await asyncio.wait({deleting}, timeout=HELD)
    assert not done
    ops.release()
    await deleting
    with pytest.raises(asyncio.CancelledError):
        await flushing
    assert list((ledger_dir(tmp_path, TOPIC) / "cursors").iterdir()) == []
    await store.close()


async def test_a_save_after_a_cancelled_one_never_overlaps_its_write(tmp_path: Path) -> None:
    """Two writes of one cursor's temporary file at once leave a torn or missing file (seen
    as a rename of a temporary file that another write had already moved): the next save
    starts only when the cancelled one's write has ended, and the last state is the one kept."""
    ops = GatedOps()
    store = await SegmentStore.open(tmp_path, CONFIG, file_ops=ops)
    ml = await store.open_ledger(TOPIC)
    cursor = await ml.open_cursor("s", initial_position="earliest")
    first, second = await ml.append(b"a"), await ml.append(b"b")
    cursor.mark_delete(first)
    ops.block(".cur.tmp")
    flushing = asyncio.create_task(cursor.flush())
    await ops.wait_entered()
    flushing.cancel()
    cursor.mark_delete(second)
    again = asyncio.create_task(cursor.flush())
    done, _ = await asyncio.wait({again}, timeout=HELD)
    assert not done   # behind the write in flight, not beside it
    ops.release()
    await again
    with pytest.raises(asyncio.CancelledError):
        await flushing
    assert cursor.last_save_error is None
    await store.close()
    store = await SegmentStore.open(tmp_path, CONFIG)
    ml = await store.open_ledger(TOPIC)
    assert ml.cursors["s"].mark_delete_position == second
    assert not store.trim_unsafe()   # recovered from its newest file, not a fallback
    await store.close()


class GatedUnlinks(GatedOps):
    """Only unlinks of paths whose name contains `match` block (opens and fsyncs never)."""

    def _hold(self, path: Path) -> None:
        return

    def unlink(self, path: Path) -> None:
        GatedOps._hold(self, Path(path))
        super().unlink(path)


async def test_a_cancelled_cursor_delete_holds_back_a_new_cursor_of_that_name(
        tmp_path: Path) -> None:
    """An unsubscribe's task is cancelled when its connection goes: the removal already handed
    to a cursor thread goes on, so a subscription of the same name created meanwhile must
    wait for it, or its new file is the one removed (the subscription gone at restart)."""
    ops = GatedUnlinks()
    store = await SegmentStore.open(tmp_path, CONFIG, file_ops=ops)
    ml = await store.open_ledger(TOPIC)
    await ml.open_cursor("s", initial_position="earliest")
    ops.block(".cur")
    deleting = asyncio.create_task(ml.delete_cursor("s"))
    await ops.wait_entered()
    deleting.cancel()
    opening = asyncio.create_task(ml.open_cursor("s", initial_position="latest"))
    done, _ = await asyncio.wait({opening}, timeout=HELD)
    ops.release()
    assert not done   # behind the removal in flight, not beside it
    await opening
    with pytest.raises(asyncio.CancelledError):
        await deleting
    await store.close()
    store = await SegmentStore.open(tmp_path, CONFIG)
    ml = await store.open_ledger(TOPIC)
    assert list(ml.cursors) == ["s"]
    await store.close()


class GatedMoves(GatedOps):
    """Only renames of the path `match` itself block (opens and fsyncs never)."""

    def _hold(self, path: Path) -> None:
        return

    def replace(self, src: Path, dst: Path) -> None:
        if str(src) == self.match:
            GatedOps._hold(self, Path(src))
        super().replace(src, dst)


async def test_a_cancelled_ledger_delete_holds_back_an_open_of_that_name(tmp_path: Path) -> None:
    """The broker's close cancels the housekeeping that deletes inactive topics: the
    directory's removal already handed to the I/O thread goes on, so an open of the same name
    must wait for it, or it recovers the doomed directory and appends into it as it goes."""
    ops = GatedMoves()
    store = await SegmentStore.open(tmp_path, CONFIG, file_ops=ops)
    ml = await store.open_ledger(TOPIC)
    await ml.append(b"old")
    ops.block(str(ledger_dir(tmp_path, TOPIC)))
    deleting = asyncio.create_task(store.delete_ledger(TOPIC))
    await ops.wait_entered()
    deleting.cancel()
    opening = asyncio.create_task(store.open_ledger(TOPIC))
    done, _ = await asyncio.wait({opening}, timeout=HELD)
    ops.release()
    assert not done   # behind the removal in flight, not beside it
    ml = await opening
    await ml.append(b"new")
    with pytest.raises(asyncio.CancelledError):
        await deleting
    await store.close()
    store = await SegmentStore.open(tmp_path, CONFIG)
    ml = await store.open_ledger(TOPIC)
    first = ml.first_position
    assert first is not None
    assert [e.data for e in await ml.read_entries(first, 10)] == [b"new"]
    await store.close()


async def test_a_cancelled_cursor_open_keeps_the_cursor_its_save_wrote(tmp_path: Path) -> None:
    """A SUBSCRIBE's task is cancelled when its connection goes: the new cursor's save already
    handed to a cursor thread goes on and writes its file, so the ledger must keep the cursor
    too (else it trims what the cursor holds, and the cursor is back after a restart)."""
    ops = GatedOps()
    store = await SegmentStore.open(tmp_path, CONFIG, file_ops=ops)
    ml = await store.open_ledger(TOPIC)
    ops.block(".cur.tmp")
    opening = asyncio.create_task(ml.open_cursor("s", initial_position="earliest"))
    await ops.wait_entered()
    opening.cancel()
    ops.release()
    with pytest.raises(asyncio.CancelledError):
        await opening
    assert list(ml.cursors) == ["s"]   # what its file says
    await store.close()
    store = await SegmentStore.open(tmp_path, CONFIG)
    ml = await store.open_ledger(TOPIC)
    assert list(ml.cursors) == ["s"]
    await store.close()


class CountedGate(GatedOps):
    """GatedOps that counts the threads held at the gate at once."""

    def __init__(self) -> None:
        super().__init__()
        self.held = 0
        self._count = threading.Lock()

    def _hold(self, path: Path) -> None:
        if self.match is not None and self.match in str(path) and not self.gate.is_set():
            with self._count:
                self.held += 1
        super()._hold(path)


async def test_an_open_cancelled_in_recovery_holds_the_name_until_its_recovery_ends(
        tmp_path: Path) -> None:
    """A topic load runs in the task of the request that asked for it, cancelled when its
    connection goes: the recovery already handed to a read thread goes on (cutting back
    segments, removing leftovers, writing the sealed manifest), so the next open of the name
    must wait for it instead of recovering the same directory beside it."""
    ops = CountedGate()
    store = await SegmentStore.open(tmp_path, CONFIG, file_ops=ops)
    ml = await store.open_ledger(TOPIC)
    await ml.append(b"data")
    await ml.close()
    ops.block(MANIFEST_NAME)   # the reopen's recovery hangs where it reads the manifest
    opening = asyncio.create_task(store.open_ledger(TOPIC))
    await ops.wait_entered()
    opening.cancel()
    again = asyncio.create_task(store.open_ledger(TOPIC))
    done, _ = await asyncio.wait({again}, timeout=HELD)
    held = ops.held
    ops.release()
    assert not done and held == 1   # one recovery of the directory at a time
    reopened = await again
    with pytest.raises(asyncio.CancelledError):
        await opening
    assert store.open_ledgers == {TOPIC: reopened}
    await store.close()


async def test_a_ledger_close_cut_short_by_its_caller_still_saves_every_cursor(
        tmp_path: Path) -> None:
    """A shutdown that stops waiting for a ledger's close (its timeout) must not leave the
    close half done: the store's own close then skipped the ledger, and its cursors' unsaved
    acknowledgements were lost to redelivery."""
    ops = GatedOps()
    store = await SegmentStore.open(tmp_path, CONFIG, file_ops=ops)
    ml = await store.open_ledger(TOPIC)
    cursor = await ml.open_cursor("s", initial_position="earliest")
    acked = await ml.append(b"a")
    cursor.mark_delete(acked)              # not saved yet: the close is what saves it
    ops.block(".seg")                      # the next append's sync hangs: the close waits
    appending = ml.append(b"b")
    await ops.wait_entered()
    closing = asyncio.create_task(ml.close())
    done, _ = await asyncio.wait({closing}, timeout=HELD)
    assert not done
    closing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await closing
    ops.release()
    await appending
    await store.close()
    store = await SegmentStore.open(tmp_path, CONFIG)
    ml = await store.open_ledger(TOPIC)
    assert ml.cursors["s"].mark_delete_position == acked
    await store.close()
