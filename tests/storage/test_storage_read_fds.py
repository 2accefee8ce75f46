"""Reads the page cache answers whole, done on the loop (storage/read_fds.py): the same entries
as a read thread returns, the same checks, descriptors opened off the loop, bounded, and closed
when their segment is trimmed or the store closes."""

from __future__ import annotations

import asyncio
import errno
import os
import random
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from pathlib import Path
from typing import Any

import pytest
from storage_testlib import flip_bit, open_store, segment_paths

from storage import Position, SegmentStore, StorageConfig
from storage.fileops import FileOps
from storage.ledger import ManagedLedger
from storage.read_fds import ReadFds
from storage.segment_file import SegmentFile
from storage.segments import RECORD_HEADER_SIZE

TOPIC = "persistent://public/default/in-place"

pytestmark = pytest.mark.skipif(not hasattr(os, "RWF_NOWAIT"),
                                reason="this OS has no RWF_NOWAIT: every read goes to a thread")


class CountingOps(FileOps):
    """Counts the descriptors opened read-only and closed, and the in-place reads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.read_only: set[int] = set()
        self.closed_read_only = 0
        self.closed = threading.Event()
        self.nowait_calls = 0

    def open(self, path: str | Path, flags: int, mode: int = 0o644) -> int:
        fd = super().open(path, flags, mode)
        if flags == os.O_RDONLY:
            with self.lock:
                self.read_only.add(fd)
        return fd

    def close(self, fd: int) -> None:
        with self.lock:
            if fd in self.read_only:
                self.read_only.discard(fd)
                self.closed_read_only += 1
                self.closed.set()
        super().close(fd)

    def pread_nowait(self, fd: int, buf: memoryview, offset: int) -> bool:
        self.nowait_calls += 1
        return super().pread_nowait(fd, buf, offset)


class FailingOps(FileOps):
    """An in-place read fails with EIO (a bad sector, say) while ``failing``."""

    def __init__(self) -> None:
        self.failing = False

    def pread_nowait(self, fd: int, buf: memoryview, offset: int) -> bool:
        if self.failing:
            raise OSError(errno.EIO, "injected EIO (in-place read)")
        return super().pread_nowait(fd, buf, offset)


class RefusingOps(FileOps):
    """A kernel or file system that does not take RWF_NOWAIT."""

    def pread_nowait(self, fd: int, buf: memoryview, offset: int) -> bool:
        raise OSError(errno.EOPNOTSUPP, "injected: RWF_NOWAIT not supported")


def _opened_event(fds: ReadFds, count: int) -> asyncio.Event:
    """Set once ``fds`` holds ``count`` descriptors (wraps its hand-back from the pool)."""
    event = asyncio.Event()
    opened = fds._opened

    def wrapped(segment: object, fd: int) -> None:
        opened(segment, fd)  # type: ignore[arg-type]
        if fds.open_count >= count:
            event.set()

    fds._opened = wrapped  # type: ignore[method-assign]
    return event


async def _reopened(root: Path, ops: FileOps, **config: object) -> SegmentStore:
    return await SegmentStore.open(root, StorageConfig(**config), file_ops=ops)  # type: ignore[arg-type]


async def _written_then_reopened(
        root: Path, ops: FileOps, payloads: list[bytes], per_ledger: int,
) -> tuple[SegmentStore, ManagedLedger, list[Position]]:
    """``payloads`` appended to TOPIC, the store closed and opened again over ``ops`` (nothing
    cached, every segment sealed): the store, the topic's ledger, the positions written."""
    store = await open_store(root, max_entries_per_ledger=per_ledger)
    ml = await store.open_ledger(TOPIC)
    written = [await ml.append(p) for p in payloads]
    await store.close()
    store = await _reopened(root, ops, max_entries_per_ledger=per_ledger)
    return store, await store.open_ledger(TOPIC), written


async def test_a_run_the_page_cache_holds_is_read_in_place_as_a_thread_reads_it(
        tmp_path: Path) -> None:
    payloads = [b"m%d" % i * (i % 5 + 1) for i in range(120)]
    ops = CountingOps()
    store, ml, written = await _written_then_reopened(tmp_path, ops, payloads, 50)
    fds = store.read_fds
    opened = _opened_event(fds, 1)
    from_thread = await ml.read_entries(written[0], 30)
    assert fds.hits == 0          # no descriptor yet: a read thread read it, and asked for one
    await asyncio.wait_for(opened.wait(), 30)
    in_place = await ml.read_entries(written[0], 30)
    assert fds.hits == 1
    assert in_place == from_thread
    assert [e.data for e in in_place] == payloads[:30]
    assert [e.position for e in in_place] == written[:30]
    await store.close()
    assert ops.read_only == set()   # every descriptor closed with the store


async def test_entries_read_in_place_are_their_own_bytes_whatever_is_read_after(
        tmp_path: Path) -> None:
    # entries of 100 KiB-ish (a batched entry): runs of 15 (~1.5 MiB) are read in place
    payloads = [bytes([i]) * (100_000 + 37 * i) for i in range(40)]
    store, ml, written = await _written_then_reopened(tmp_path, CountingOps(), payloads, 100)
    fds = store.read_fds
    opened = _opened_event(fds, 1)
    await ml.read_entries(written[0], 1)          # a read thread, which asks for a descriptor
    await asyncio.wait_for(opened.wait(), 30)
    small = await ml.read_entries(written[30], 1)  # in place, into a buffer of its size
    first = await ml.read_entries(written[0], 15)  # in place: the buffer grows
    second = await ml.read_entries(written[15], 15)   # in place, into the same buffer
    assert fds.hits == 3
    for got, at in ((small, 30), (first, 0), (second, 15)):
        assert [type(e.data) for e in got] == [bytes] * len(got)
        assert [e.data for e in got] == payloads[at:at + len(got)]
        assert [e.position for e in got] == written[at:at + len(got)]
    assert len(first) == len(second) == 15
    await store.close()


async def test_an_entry_failing_its_checks_is_never_served_from_an_in_place_read(
        tmp_path: Path) -> None:
    store, ml, written = await _written_then_reopened(
        tmp_path, CountingOps(), [b"entry-%03d" % i for i in range(20)], 50)
    opened = _opened_event(store.read_fds, 1)
    assert len(await ml.read_entries(written[0], 20)) == 20
    await asyncio.wait_for(opened.wait(), 30)
    (segment,) = segment_paths(tmp_path, TOPIC)
    blob = segment.read_bytes()
    at = blob.index(b"entry-007")     # entry 7's data, after its record header
    assert blob.count(b"entry-007") == 1 and at >= RECORD_HEADER_SIZE
    flip_bit(segment, at + 3, 0)
    before = store.stats().corrupt_records
    got = await ml.read_entries(written[0], 20)
    assert store.read_fds.hits == 1
    assert [e.position for e in got] == written[:7] + written[8:]
    assert store.stats().corrupt_records == before + 1
    await store.close()


async def test_a_trimmed_segment_s_descriptor_is_closed(tmp_path: Path) -> None:
    ops = CountingOps()
    store = await _reopened(tmp_path, ops, max_entries_per_ledger=10)
    ml = await store.open_ledger(TOPIC)
    cursor = await ml.open_cursor("sub", initial_position="earliest")
    written = [await ml.append(b"t%d" % i) for i in range(25)]
    store.cache.drop_ledger(written[0].ledger_id)    # read from disk, not from memory
    opened = _opened_event(store.read_fds, 1)
    assert len(await ml.read_entries(written[0], 10)) == 10
    await asyncio.wait_for(opened.wait(), 30)
    assert store.read_fds.open_count == 1
    ops.closed.clear()
    cursor.mark_delete(written[-1])
    assert written[0].ledger_id in await ml.trim()
    assert store.read_fds.open_count == 0
    await asyncio.wait_for(asyncio.get_running_loop().run_in_executor(None, ops.closed.wait), 30)
    assert ops.closed_read_only >= 1
    deleted = [os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")
               if os.path.islink(f"/proc/self/fd/{fd}")]
    assert not [p for p in deleted if p.endswith("(deleted)") and str(tmp_path) in p]
    await store.close()
    assert ops.read_only == set()


@pytest.mark.parametrize("ops", [CountingOps, FileOps], ids=["reference", "as-built"])
async def test_scattered_positions_are_read_in_place_as_a_thread_reads_them(
        tmp_path: Path, ops: type[FileOps]) -> None:
    # "as-built": os's own reads, so the C twin where the extension is built
    store, ml, written = await _written_then_reopened(   # 2 segments
        tmp_path, ops(), [b"s%03d" % i * (i % 4 + 1) for i in range(150)], 100)
    fds = store.read_fds
    opened = _opened_event(fds, 2)
    wanted = sorted(random.Random(3).sample(written, 40))
    from_thread, missing = await ml.read_positions(wanted)
    assert missing == [] and fds.hits == 0
    await asyncio.wait_for(opened.wait(), 30)
    in_place, missing = await ml.read_positions(wanted)
    assert missing == [] and fds.hits == 40
    assert in_place == from_thread and [e.position for e in in_place] == wanted
    # one of them damaged on disk: missing and reported, the others served
    damaged = wanted[7]
    mark = b"s%03d" % written.index(damaged)
    (segment,) = [p for p in segment_paths(tmp_path, TOPIC) if mark in p.read_bytes()]
    flip_bit(segment, segment.read_bytes().index(mark), 1)
    before = store.stats().corrupt_records
    got, missing = await ml.read_positions(wanted)
    assert missing == [damaged] and store.stats().corrupt_records == before + 1
    assert [e.position for e in got] == [p for p in wanted if p != damaged]
    # a byte limit leaves the rest neither read nor missing, in place as in the thread
    got, missing = await ml._reader.read_positions(wanted, max_bytes=20)
    assert missing == [] and 1 <= len(got) < 7     # stopped before the damaged one
    assert [e.position for e in got] == [p for p in wanted if p != damaged][:len(got)]
    await store.close()


class InlinePool(Executor):
    """Runs each job at once in the caller (the loop), so the order of opens is known."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        fut: Future[Any] = Future()
        fut.set_result(fn(*args, **kwargs))
        return fut


async def test_descriptors_are_bounded_least_recently_read_closed_first(tmp_path: Path) -> None:
    store = await open_store(tmp_path, max_entries_per_ledger=5)
    ml = await store.open_ledger(TOPIC)
    [await ml.append(b"b%d" % i) for i in range(20)]          # 4 segments
    await store.close()
    segments = [SegmentFile(int(p.stem), p, 0) for p in segment_paths(tmp_path, TOPIC)]
    assert len(segments) == 4
    ops = CountingOps()
    fds = ReadFds(asyncio.get_running_loop(), ops, InlinePool(), limit=2)
    for segment in segments[:3]:
        assert fds.read(segment, 4, 0) is None     # no descriptor yet: one is opened
    await asyncio.sleep(0)                         # the opens' hand-backs run
    assert fds.open_count == 2 and ops.closed_read_only == 1   # the first one's closed
    assert fds.read(segments[0], 4, 0) is None     # (asked for again)
    await asyncio.sleep(0)
    assert fds.open_count == 2 and ops.closed_read_only == 2   # the second one's now
    assert fds.read(segments[2], 4, 0) == segments[2].path.read_bytes()[:4]
    assert fds.hits == 1
    fds.forget(segments[2])
    assert fds.open_count == 1 and ops.closed_read_only == 3
    fds.want(segments[3])
    fds.forget(segments[3])                        # forgotten before its open came back
    await asyncio.sleep(0)
    assert fds.open_count == 1 and ops.closed_read_only == 4
    for fd in fds.close():
        ops.close(fd)
    assert ops.read_only == set()
    fds.want(segments[1])                          # a closed one keeps nothing
    await asyncio.sleep(0)
    assert fds.open_count == 0 and ops.read_only == set()


async def test_where_the_kernel_refuses_every_read_goes_to_a_thread(tmp_path: Path) -> None:
    store, ml, written = await _written_then_reopened(
        tmp_path, RefusingOps(), [b"r%d" % i for i in range(30)], 50)
    opened = _opened_event(store.read_fds, 1)
    first = await ml.read_entries(written[0], 30)
    await asyncio.wait_for(opened.wait(), 30)
    again = await ml.read_entries(written[0], 30)
    assert first == again and [e.position for e in again] == written
    assert not store.read_fds.enabled and store.read_fds.hits == 0
    assert [e.position for e in await ml.read_entries(written[0], 30)] == written
    await store.close()


async def test_a_failing_scattered_read_in_place_is_read_again_in_a_thread(
        tmp_path: Path) -> None:
    ops = FailingOps()
    store, ml, written = await _written_then_reopened(
        tmp_path, ops, [b"f%d" % i for i in range(60)], 100)
    wanted = written[::3]
    opened = _opened_event(store.read_fds, 1)
    first, missing = await ml.read_positions(wanted)
    await asyncio.wait_for(opened.wait(), 30)
    ops.failing = True
    again, missing = await ml.read_positions(wanted)   # the thread read them: same entries
    assert missing == [] and again == first and [e.position for e in again] == wanted
    assert store.read_fds.open_count == 0 and store.read_fds.hits == 0
    await store.close()


async def test_a_failing_in_place_read_is_read_again_in_a_thread(tmp_path: Path) -> None:
    ops = FailingOps()
    store, ml, written = await _written_then_reopened(
        tmp_path, ops, [b"e%d" % i for i in range(30)], 50)
    opened = _opened_event(store.read_fds, 1)
    first = await ml.read_entries(written[0], 30)
    await asyncio.wait_for(opened.wait(), 30)
    ops.failing = True
    again = await ml.read_entries(written[0], 30)     # the thread read it: same entries
    assert again == first and [e.position for e in again] == written
    assert store.read_fds.open_count == 0 and store.read_fds.enabled   # that descriptor dropped
    await store.close()
