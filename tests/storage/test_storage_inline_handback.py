"""A group commit the write thread syncs itself (the sync stage idle) is handed back to the
loop after the thread's bookkeeping for it, but never after anything that could make the loop
wait: a control queued behind the group (a barrier completes after the group's appends) or a
pre-zero write (the appends are answered while the zeros are still being written)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from storage import SegmentStore, StorageConfig
from storage.fileops import FileOps
from storage.positions import Position

TOPIC = "persistent://public/default/handback"
WAIT_S = 10.0


class _GatedZeros(FileOps):
    """Once armed, holds the first pre-zero write (a pwrite of zeros) until released."""

    def __init__(self) -> None:
        self.armed = False
        self.entered = threading.Event()
        self.release = threading.Event()

    def pwrite(self, fd: int, data: bytes | memoryview, offset: int) -> int:
        if self.armed and not self.entered.is_set() and not any(bytes(data[:64])):
            self.entered.set()
            self.release.wait(3 * WAIT_S)
        return super().pwrite(fd, data, offset)


async def test_appends_are_answered_while_a_prezero_write_is_in_progress(tmp_path: Path) -> None:
    ops = _GatedZeros()
    config = StorageConfig(segment_prezero_bytes=32 * 1024, segment_prezero_min_bytes=4096,
                           segment_prezero_max_batch_bytes=1 << 30)
    store = await SegmentStore.open(tmp_path, config, file_ops=ops)
    try:
        ml = await store.open_ledger(TOPIC)
        await ml.append(b"first")  # the segment exists, its first zeros written
        ops.armed = True
        later: asyncio.Future[Position] | None = None
        for i in range(1000):  # one at a time: every group synced by the write thread itself
            fut = ml.append(b"%05d" % i * 100)
            deadline = asyncio.get_running_loop().time() + WAIT_S
            while not fut.done() and not ops.entered.is_set() \
                    and asyncio.get_running_loop().time() < deadline:
                await asyncio.wait({fut}, timeout=0.01)
            if not fut.done() and ops.entered.is_set():
                # The write thread began the zeros after answering the append before this one
                # and before this one reached it: this one waits for the zeros, as designed.
                later = fut
                break
            assert fut.done(), f"append {i} unanswered while the writer writes zeros"
            if ops.entered.is_set():
                break
        assert ops.entered.is_set(), "no pre-zero write happened"
        # The append whose group commit came right before the held zeros write is answered;
        # the next one is written once the zeros are.
        if later is None:
            later = ml.append(b"later")
        ops.release.set()
        await asyncio.wait_for(later, WAIT_S)
    finally:
        ops.release.set()
        await store.close()


async def test_a_barrier_completes_after_the_appends_queued_before_it(tmp_path: Path) -> None:
    store = await SegmentStore.open(tmp_path, StorageConfig())
    try:
        ml = await store.open_ledger(TOPIC)
        for rounds in range(20):
            futs = [ml.append(b"r%d-%d" % (rounds, i)) for i in range(rounds % 4 + 1)]
            await store.writer.barrier()  # queued in the same loop iteration as the appends
            assert all(f.done() for f in futs), rounds
            await asyncio.gather(*futs)
    finally:
        await store.close()
