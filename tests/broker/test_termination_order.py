"""Terminate's order, as Pulsar's: each producer is told (CLOSE_PRODUCER) as soon as its own
SENDs in flight are answered, before the terminated state is written. A client sending one
message at a time then learns of the termination from CLOSE_PRODUCER (its reconnection is
refused with TopicTerminatedError) rather than from a SEND_ERROR after that write; the Go
client drops the producer from the connection on that SEND_ERROR, ignores the CLOSE_PRODUCER
that follows, and its next sends time out (its own TestTopicTermination)."""

from __future__ import annotations

import asyncio
from typing import Any

from broker.topics.termination import TERMINATED_KIND, Termination
from storage.positions import Position

WAIT_S = 5.0


class SlowMetadata:
    """A metadata store whose write of the terminated state waits to be released."""

    def __init__(self) -> None:
        self.write_started = asyncio.Event()
        self.release = asyncio.Event()
        self.docs: dict[tuple[str, str], Any] = {}

    async def put(self, kind: str, key: str, doc: Any) -> None:
        self.write_started.set()
        await self.release.wait()
        self.docs[(kind, key)] = doc


class FakeProducer:
    def __init__(self, name: str, in_flight: bool) -> None:
        self.name = name
        self.closed = False
        self.answer = asyncio.Event()
        if not in_flight:
            self.answer.set()
        self.disconnected = asyncio.Event()

    async def answered(self, timeout: float) -> None:
        await asyncio.wait_for(self.answer.wait(), timeout)

    def disconnect(self) -> None:
        self.closed = True
        self.disconnected.set()


async def test_producers_are_disconnected_once_answered_and_before_the_state_is_written() -> None:
    md = SlowMetadata()
    termination = Termination(md, "persistent://public/default/t")  # type: ignore[arg-type]
    idle, busy = FakeProducer("idle", False), FakeProducer("busy", True)
    last = Position(7, 3)
    task = asyncio.create_task(termination.terminate({"idle": idle, "busy": busy}, lambda: last))

    await asyncio.wait_for(idle.disconnected.wait(), WAIT_S)   # nothing in flight: told at once
    assert not busy.disconnected.is_set()                      # its SEND is not answered yet
    assert not md.write_started.is_set()                       # appends in flight come first

    busy.answer.set()                                          # its receipt goes out ...
    await asyncio.wait_for(busy.disconnected.wait(), WAIT_S)   # ... then its CLOSE_PRODUCER
    await asyncio.wait_for(md.write_started.wait(), WAIT_S)
    assert not task.done() and not termination.recorded        # the REST answer waits for it

    md.release.set()
    assert await asyncio.wait_for(task, WAIT_S) == last
    assert termination.recorded
    assert md.docs[(TERMINATED_KIND, "persistent://public/default/t")] == {"ledgerId": 7,
                                                                           "entryId": 3}


async def test_a_producer_closed_meanwhile_is_not_told_again() -> None:
    md = SlowMetadata()
    md.release.set()
    termination = Termination(md, "persistent://public/default/t")  # type: ignore[arg-type]
    gone = FakeProducer("gone", True)
    task = asyncio.create_task(termination.terminate({"gone": gone}, lambda: None))
    await asyncio.sleep(0)
    gone.closed = True            # the client closed it while its SEND was in flight
    gone.answer.set()
    assert await asyncio.wait_for(task, WAIT_S) is None
    assert not gone.disconnected.is_set()
