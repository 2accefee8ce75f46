"""The double-buffered group commit (storage/writer.py + storage/sync_stage.py), pinned with a
FileOps whose segment fdatasyncs each wait on their own event (no sleeps): the next group is
written while the previous one syncs, nothing completes before an fdatasync that started
after its write returned, groups written during one fdatasync share the next, a failed
fdatasync fails what was written behind it, barriers wait for both stages, and the fd LRU
never closes a file the sync stage is about to fdatasync.

With nothing else queued and the sync stage idle the write thread syncs a group itself (no
overlap to gain), so the tests that need the hand-off hold the first group's write until the
second group is queued (_queue_behind_a_held_write)."""

from __future__ import annotations

import asyncio
import errno
import threading
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from storage import PersistenceError, Position, SegmentStore, StorageConfig
from storage.fileops import FileOps

WAIT = 10.0
CONFIG = StorageConfig(segment_prezero_bytes=0, mark_delete_rate_limit_per_sec=0)
WRITER_THREADS = {"horae-storage-writer", "horae-storage-sync"}


class HeldSyncOps(FileOps):
    """Once hold() is called, the writer's n-th fdatasync (1-based, counted from then, from
    either writer thread) waits for release(n) (fail=True: it raises EIO then). log records,
    for segment files, ("write", fd) after each write returned and ("sync", fd) /
    ("synced", fd) around each held fdatasync. hold_next_writes(n): the next n segment writes
    wait for their events before they return."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._segments: set[int] = set()
        self.holding = False
        self.syncs = 0  # sync-stage fdatasyncs since hold()
        self.writes = 0  # segment writes since hold()
        self.released: set[int] = set()
        self.failing: set[int] = set()
        self.log: list[tuple[str, int]] = []
        self.held_writes = 0  # writes that reached their gate
        self._write_gates: list[threading.Event] = []

    def open(self, path: Path, flags: int, mode: int = 0o644) -> int:
        fd = super().open(path, flags, mode)
        if Path(path).suffix == ".seg":
            with self._lock:
                self._segments.add(fd)
        return fd

    def close(self, fd: int) -> None:
        with self._lock:
            self._segments.discard(fd)
        super().close(fd)

    def _wrote(self, fd: int) -> None:
        with self._cond:
            if not (self.holding and fd in self._segments):
                return
            gate = self._write_gates.pop(0) if self._write_gates else None
            if gate is not None:
                self.held_writes += 1
                self._cond.notify_all()
        if gate is not None:
            assert gate.wait(WAIT), "write never released"
        with self._cond:
            self.writes += 1
            self.log.append(("write", fd))
            self._cond.notify_all()

    def hold_next_writes(self, count: int) -> list[threading.Event]:
        """The next count segment writes, once done, each wait for their event before they
        return (and are logged)."""
        gates = [threading.Event() for _ in range(count)]
        with self._cond:
            self._write_gates.extend(gates)
        return gates

    def writev(self, fd: int, buffers: Sequence[bytes | memoryview]) -> int:
        written = super().writev(fd, buffers)
        self._wrote(fd)
        return written

    def write(self, fd: int, data: bytes | memoryview) -> int:
        written = super().write(fd, data)
        self._wrote(fd)
        return written

    def pwrite(self, fd: int, data: bytes | memoryview, offset: int) -> int:
        written = super().pwrite(fd, data, offset)
        self._wrote(fd)
        return written

    def fdatasync(self, fd: int) -> None:
        if not self.holding or threading.current_thread().name not in WRITER_THREADS:
            super().fdatasync(fd)
            return
        with self._cond:
            self.syncs += 1
            n = self.syncs
            self.log.append(("sync", fd))
            self._cond.notify_all()
            assert self._cond.wait_for(lambda: n in self.released, WAIT), "never released"
            fail = n in self.failing
        if fail:
            raise OSError(errno.EIO, "injected EIO (fdatasync)")
        super().fdatasync(fd)  # EBADF if the fd was closed meanwhile
        with self._cond:
            self.log.append(("synced", fd))

    def hold(self, on: bool = True) -> None:
        with self._cond:
            self.holding = on

    def release(self, n: int, *, fail: bool = False) -> None:
        with self._cond:
            if fail:
                self.failing.add(n)
            self.released.add(n)
            self._cond.notify_all()

    def _wait(self, what: str, predicate: object) -> None:
        with self._cond:
            assert self._cond.wait_for(predicate, WAIT), f"never {what}"  # type: ignore[arg-type]

    async def entered(self, n: int) -> None:
        """Wait until the n-th held fdatasync has begun."""
        await asyncio.get_running_loop().run_in_executor(
            None, self._wait, f"entered fdatasync {n}", lambda: self.syncs >= n)

    async def held(self, n: int) -> None:
        """Wait until n held writes reached their gates."""
        await asyncio.get_running_loop().run_in_executor(
            None, self._wait, f"held {n} writes", lambda: self.held_writes >= n)

    async def written(self, n: int) -> None:
        """Wait until n segment writes have returned since hold()."""
        await asyncio.get_running_loop().run_in_executor(
            None, self._wait, f"wrote {n} times", lambda: self.writes >= n)

    def kinds(self) -> list[str]:
        with self._lock:
            return [kind for kind, _ in self.log]


async def _open(tmp_path: Path, ops: HeldSyncOps, config: StorageConfig = CONFIG) -> SegmentStore:
    return await SegmentStore.open(tmp_path, config, file_ops=ops)


async def _queue_behind_a_held_write(
    ops: HeldSyncOps, first: Callable[[], Awaitable[Position]],
    second: Callable[[], Awaitable[Position]],
) -> tuple[Awaitable[Position], Awaitable[Position]]:
    """Start the first group and hold its write until the second group is queued, so the
    write thread hands the first to the sync thread instead of syncing it itself; hold the
    second group's write until that fdatasync has begun (held), so the two do not share one.
    Returns then, with the second group's write returning."""
    gates = ops.hold_next_writes(2)
    one = first()
    await ops.held(1)
    two = second()
    await asyncio.sleep(0)  # the loop's kick (scheduled by the append) queues it
    gates[0].set()
    await ops.held(2)
    await ops.entered(1)
    gates[1].set()
    return one, two


async def test_next_group_is_written_while_the_previous_one_syncs(tmp_path: Path) -> None:
    ops = HeldSyncOps()
    store = await _open(tmp_path, ops)
    ml = await store.open_ledger("t")
    await ml.append(b"warm")  # the segment exists
    ops.hold()
    first, second = await _queue_behind_a_held_write(
        ops, lambda: ml.append(b"one"), lambda: ml.append(b"two"))
    await ops.written(2)  # written while the first group's fdatasync is still running
    assert not first.done() and not second.done()  # type: ignore[attr-defined]
    ops.release(1)
    assert await first == Position(0, 1)
    await ops.entered(2)  # second's own fdatasync, started after its write returned
    assert not second.done()  # type: ignore[attr-defined]
    ops.release(2)
    assert await second == Position(0, 2)
    assert ops.kinds() == ["write", "sync", "write", "synced", "sync", "synced"]
    await store.close()


async def test_groups_written_during_one_fdatasync_share_the_next(tmp_path: Path) -> None:
    ops = HeldSyncOps()
    store = await _open(tmp_path, ops)
    ml = await store.open_ledger("t")
    await ml.append(b"warm")
    ops.hold()
    first, second = await _queue_behind_a_held_write(
        ops, lambda: ml.append(b"one"), lambda: ml.append(b"two"))
    await ops.written(2)
    third = ml.append(b"three")  # another loop iteration: another written group
    await ops.written(3)
    ops.release(1)
    await ops.entered(2)
    assert first.done() and not second.done() and not third.done()  # type: ignore[attr-defined]
    ops.release(2)
    assert await asyncio.gather(second, third) == [Position(0, 2), Position(0, 3)]
    assert ops.syncs == 2  # one fdatasync covered both groups written behind the first
    assert ops.kinds() == ["write", "sync", "write", "write", "synced", "sync", "synced"]
    await store.close()


async def test_big_batch_slices_sync_while_the_next_slice_is_written(tmp_path: Path) -> None:
    config = StorageConfig(segment_prezero_bytes=0, mark_delete_rate_limit_per_sec=0,
                           group_commit_early_sync_bytes=100)
    ops = HeldSyncOps()
    store = await _open(tmp_path, ops, config)
    ml = await store.open_ledger("t")
    await ml.append(b"warm")
    ops.hold()
    gates = ops.hold_next_writes(2)
    gates[0].set()  # the first slice's write returns at once
    futs = [ml.append(b"%d" % i * 100) for i in range(3)]  # one batch, three slices
    await ops.held(2)  # the second slice is written (held until...)
    await ops.entered(1)  # ...the first slice's fdatasync began
    gates[1].set()
    await ops.written(3)  # the other two slices were written meanwhile
    ops.release(1)
    await ops.entered(2)  # one fdatasync for the two slices written behind it
    assert not any(f.done() for f in futs)  # the batch waits for its last slice's sync
    ops.release(2)
    assert await asyncio.gather(*futs) == [Position(0, i) for i in range(1, 4)]
    assert ops.kinds() == ["write", "sync", "write", "write", "synced", "sync", "synced"]
    await store.close()


async def test_failed_fdatasync_fails_the_group_written_behind_it(tmp_path: Path) -> None:
    ops = HeldSyncOps()
    store = await _open(tmp_path, ops)
    ml = await store.open_ledger("t")
    other = await store.open_ledger("other")
    warm = await ml.append(b"warm")
    await other.append(b"warm")
    ops.hold()
    bystander: list[Awaitable[Position]] = []

    def second_group() -> Awaitable[Position]:
        bystander.append(other.append(b"fine"))  # another ledger in the same group
        return ml.append(b"two")  # its own fdatasync would succeed

    first, second = await _queue_behind_a_held_write(
        ops, lambda: ml.append(b"one"), second_group)
    await ops.written(3)
    ops.release(1, fail=True)
    ops.release(2)
    ops.release(3)
    results = await asyncio.gather(first, second, return_exceptions=True)
    assert all(isinstance(r, PersistenceError) for r in results), results
    assert await bystander[0] == Position(1, 1)
    assert ml.fenced and not other.fenced
    assert ml.last_confirmed == warm
    # The fenced ledger's file was never fsynced again (fsyncgate): one for it, one for other.
    assert ops.syncs == 2
    await store.close()
    store = await SegmentStore.open(tmp_path, CONFIG)
    ml = await store.open_ledger("t")
    got = await ml.read_entries(warm, 10)
    assert [e.data for e in got] == [b"warm"]  # nothing unsynced survived
    await store.close()


async def test_barrier_waits_for_the_sync_stage(tmp_path: Path) -> None:
    ops = HeldSyncOps()
    store = await _open(tmp_path, ops)
    ml = await store.open_ledger("t")
    await ml.append(b"warm")
    ops.hold()
    first = ml.append(b"one")
    await ops.entered(1)
    barrier = asyncio.ensure_future(store.writer.barrier())
    done, _ = await asyncio.wait({barrier}, timeout=0.2)
    assert not done  # the write thread waits for the sync stage before the barrier
    ops.release(1)
    await barrier
    assert first.done() and first.result() == Position(0, 1)  # completed before the barrier
    await store.close()


async def test_fd_eviction_never_closes_a_file_being_synced(tmp_path: Path) -> None:
    config = StorageConfig(segment_prezero_bytes=0, max_open_segment_files=1,
                           mark_delete_rate_limit_per_sec=0)
    ops = HeldSyncOps()
    store = await _open(tmp_path, ops, config)
    ledgers = [await store.open_ledger(name) for name in ("a", "b", "c")]
    for ml in ledgers:
        await ml.append(b"warm")
    a, b, c = ledgers
    ops.hold()
    # a's fdatasync is about to run on a's fd (held) while b is written: the LRU (limit 1)
    # would close a's fd after that
    fa, fb = await _queue_behind_a_held_write(
        ops, lambda: a.append(b"x"), lambda: b.append(b"y"))
    await ops.written(2)
    fc = c.append(b"z")  # the write thread finished b's group (its eviction included)
    await ops.written(3)
    for n in (1, 2, 3):
        ops.release(n)
    assert await fa == Position(0, 1)  # fdatasync ran on a still-open fd (no EBADF)
    assert await asyncio.gather(fb, fc) == [Position(1, 1), Position(2, 1)]
    assert not any(ml.fenced for ml in ledgers)
    ops.hold(False)
    await c.append(b"again")  # once synced, the idle files are evicted as before
    await store.writer.barrier()
    # A barrier is answered from its control, before the same round's eviction: a second one
    # is taken by the write thread only after that round is over.
    await store.writer.barrier()
    assert store.writer.fds.open_count <= 1
    await store.close()
