"""A busy dispatcher lets a publish on its store through: while appends wait for the storage
threads, each slice's end waits for them to come back, a bounded time (the loop idles, the
threads take the interpreter), and a publish that does not come back does not stop it: its
deliveries go on, in order, each message once."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest

from broker.net.consumers import ConsumerSide
from broker.subscriptions.consumer import Consumer
from broker.subscriptions.dispatchers import base as dispatch_base
from broker.subscriptions.subscription import Subscription
from storage import SegmentStore, StorageConfig
from storage.appends_in_flight import AppendsInFlight
from storage.fileops import FileOps
from tests.consumers.test_dispatch_unit import FakeConnection, StubTopic, _entry, _settle_dispatch

WAIT_S = 60.0   # a bound for a hung writer, never reached when it works


async def _dispatch_done(sub: Subscription) -> None:
    """Until the dispatcher's round (its task, once started) has ended: its waits are timed,
    so this follows the task rather than counting loop turns."""
    for _ in range(10_000):
        task = sub.dispatcher._task
        if task is None:
            return
        if isinstance(task, asyncio.Task):
            await asyncio.wait_for(asyncio.shield(task), WAIT_S)
        else:
            await asyncio.sleep(0)    # a round not started yet


class _GatedWrites(FileOps):
    """Once armed, holds the next write of appends until released."""

    def __init__(self) -> None:
        self.armed = False
        self.release = threading.Event()

    def writev(self, fd: int, buffers: Sequence[bytes | memoryview]) -> int:
        if self.armed:
            self.armed = False
            self.release.wait(WAIT_S)
        return super().writev(fd, buffers)


def record_waits(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, float, bool]]:
    """From now on, every wait for appends in flight is recorded: (batches in flight when it
    began, its bound, whether they came back)."""
    waits: list[tuple[int, float, bool]] = []
    original = AppendsInFlight.handed_back

    async def spy(self: AppendsInFlight, timeout: float) -> bool:
        batches = self.batches
        back = await original(self, timeout)
        waits.append((batches, timeout, back))
        return back

    monkeypatch.setattr(AppendsInFlight, "handed_back", spy)
    return waits


async def test_a_busy_dispatcher_waits_for_a_publish_a_bounded_time_then_goes_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dispatch_base, "DISPATCH_SLICE_S", 0.0)   # every round ends a slice
    monkeypatch.setattr(dispatch_base, "APPENDS_WAIT_S", 0.001)   # the bound, whatever it is
    ops = _GatedWrites()
    store = await SegmentStore.open(tmp_path, StorageConfig(fsync=False), file_ops=ops)
    try:
        ledger = await store.open_ledger("persistent://public/default/busy")
        other = await store.open_ledger("persistent://public/default/other")
        for i in range(1000):
            await ledger.append(_entry(i))
        waits = record_waits(monkeypatch)
        sub = await Subscription.open(StubTopic(ledger), "s", durable=True,
                                      initial_position="earliest")
        conn = FakeConnection()
        side = ConsumerSide(conn)
        consumer = Consumer(side, 1, name="c", sub_type=1)
        side.attach(consumer, sub)
        await sub.add_consumer(consumer)
        await _settle_dispatch(sub)
        ops.armed = True
        publish = other.append(b"published meanwhile")  # held in the write thread
        consumer.permits = 2000
        sub.dispatcher.schedule()
        await _dispatch_done(sub)
        assert sub.dispatcher._task is None
        # every slice's end found the publish in flight and waited for it, its bound at
        # most, then went on: all delivered while it is held
        assert waits and all(w == (1, 0.001, False) for w in waits)
        assert not publish.done()
        ids = conn.message_ids()
        assert len(ids) == 1000 and ids == sorted(set(ids))
        ops.release.set()
        await asyncio.wait_for(publish, WAIT_S)
        assert ledger.appends_in_flight.batches == 0
    finally:
        ops.release.set()
        await store.close()
