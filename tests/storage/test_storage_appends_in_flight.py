"""The writer counts the batches it holds (opened on the loop, not yet handed back) until
they are back: after success and after a failed fdatasync alike, so a busy reader does not
wait for a batch that will not come back; and a wait for the hand-back ends when the batches
are back or at its timeout, whichever is first."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from waiting import wait_until_async

from storage import SegmentStore, StorageConfig
from storage.appends_in_flight import AppendsInFlight
from storage.errors import PersistenceError
from storage.fileops import FileOps

TOPIC = "persistent://public/default/in-flight"
WAIT_S = 60.0   # a bound for a hung writer, never reached when it works


class _FailingSync(FileOps):
    def __init__(self) -> None:
        self.fail = False

    def fdatasync(self, fd: int) -> None:
        if self.fail:
            raise OSError(5, "injected EIO")
        super().fdatasync(fd)


async def test_appends_are_counted_until_handed_back(tmp_path: Path) -> None:
    store = await SegmentStore.open(tmp_path, StorageConfig())
    try:
        ml = await store.open_ledger(TOPIC)
        other = await store.open_ledger(TOPIC + "-b")
        in_flight = ml.appends_in_flight
        assert in_flight is other.appends_in_flight      # one writer for the store
        assert in_flight.batches == 0
        futs = [ml.append(b"a%d" % i) for i in range(5)] + [other.append(b"b")]
        assert in_flight.batches == 2                    # one batch per ledger and turn
        await wait_until_async(lambda: in_flight.batches == 0, timeout_s=WAIT_S)
        # the hand-back counted them out and answered them in the same callback
        assert all(f.done() for f in futs)
        assert [f.result().entry_id for f in futs[:5]] == [0, 1, 2, 3, 4]
    finally:
        await store.close()


async def test_a_failed_sync_hands_its_batches_back_too(tmp_path: Path) -> None:
    ops = _FailingSync()
    store = await SegmentStore.open(tmp_path, StorageConfig(), file_ops=ops)
    try:
        ml = await store.open_ledger(TOPIC)
        await ml.append(b"before")
        ops.fail = True
        fut = ml.append(b"lost")
        in_flight = ml.appends_in_flight
        assert in_flight.batches == 1
        await wait_until_async(lambda: in_flight.batches == 0, timeout_s=WAIT_S)
        assert fut.done()
        with pytest.raises(PersistenceError) as failed:
            await fut
        assert "fdatasync" in str(failed.value)
    finally:
        await store.close()


async def test_a_wait_for_the_hand_back_ends_at_the_return_or_the_timeout() -> None:
    in_flight = AppendsInFlight()
    assert await in_flight.handed_back(WAIT_S)        # nothing in flight: no wait at all
    in_flight.opened()
    in_flight.opened()
    loop = asyncio.get_running_loop()
    waiting = [loop.create_task(in_flight.handed_back(WAIT_S)) for _ in range(3)]
    await asyncio.sleep(0)
    in_flight.returned(1)
    await asyncio.sleep(0)
    assert not any(w.done() for w in waiting)         # one batch is still out
    in_flight.returned(1)
    assert await asyncio.wait_for(asyncio.gather(*waiting), WAIT_S) == [True] * 3
    in_flight.opened()
    assert not await in_flight.handed_back(0.001)     # never came back: the timeout ends it
    assert in_flight._waiters == []                   # and leaves no waiter behind
    cancelled = loop.create_task(in_flight.handed_back(WAIT_S))
    await asyncio.sleep(0)
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    assert in_flight._waiters == []
    in_flight.returned(5)                             # never below zero
    assert in_flight.batches == 0
