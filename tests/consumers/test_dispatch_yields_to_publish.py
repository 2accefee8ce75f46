"""A busy dispatcher lets a publish on its store through: while appends wait for the storage
threads, each slice's end hands them the interpreter for a moment, without waiting for the
publish to be answered; its deliveries go on, in order, each message once."""

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


async def test_a_busy_dispatcher_hands_over_the_interpreter_but_does_not_wait(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dispatch_base, "DISPATCH_SLICE_S", 0.0)   # every round ends a slice
    ops = _GatedWrites()
    store = await SegmentStore.open(tmp_path, StorageConfig(fsync=False), file_ops=ops)
    try:
        ledger = await store.open_ledger("persistent://public/default/busy")
        other = await store.open_ledger("persistent://public/default/other")
        for i in range(1000):
            await ledger.append(_entry(i))
        handovers: list[tuple[int, bool]] = []
        original = AppendsInFlight.let_through

        def spy(self: AppendsInFlight) -> bool:
            handed = original(self)
            handovers.append((self.batches, handed))
            return handed

        monkeypatch.setattr(AppendsInFlight, "let_through", spy)
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
        await _settle_dispatch(sub)
        assert sub.dispatcher._task is None
        # every slice's end found the publish in flight and handed the interpreter over, and
        # the dispatcher went on without waiting for it: all delivered while it is held
        assert handovers and all(h == (1, True) for h in handovers)
        assert not publish.done()
        ids = conn.message_ids()
        assert len(ids) == 1000 and ids == sorted(set(ids))
        ops.release.set()
        await asyncio.wait_for(publish, WAIT_S)
        assert ledger.appends_in_flight.batches == 0
    finally:
        ops.release.set()
        await store.close()
