"""Unit tests of the PIP-269 cursor state revision controller (broker/subscriptions/revision.py)."""

from __future__ import annotations

import asyncio

import pytest

from broker.subscriptions.revision import RevisionController, RevisionTaskState


class _Cursor:
    def __init__(self) -> None:
        self.revision = 7
        self.read = 10


async def test_start_marks_under_revision_and_every_number_outdated() -> None:
    cursor = _Cursor()
    ctl = RevisionController(cursor)
    assert not ctl.is_outdated(7)
    assert ctl.task_state is RevisionTaskState.IDLE
    rev = await ctl.start()
    assert ctl.under_revision
    assert ctl.task_state is RevisionTaskState.RUNNING
    assert ctl.is_outdated(7)  # a read started before the reset is dropped while it runs
    assert rev.started_under == 7
    ctl.end(rev)
    assert not ctl.under_revision


async def test_end_applies_the_edit_and_bumps_the_revision_atomically() -> None:
    cursor = _Cursor()
    ctl = RevisionController(cursor)
    seen: list[tuple[int, int]] = []
    rev = await ctl.start()

    def edit() -> None:
        seen.append((cursor.revision, cursor.read))
        cursor.read = 3

    rev.apply_at_end(edit)
    assert cursor.read == 10  # nothing moves before end()
    assert ctl.end(rev) == 8
    assert seen == [(7, 10)]
    assert (cursor.revision, cursor.read) == (8, 3)
    assert ctl.is_outdated(7)
    assert not ctl.is_outdated(8)
    assert ctl.increase_count == 1


async def test_a_second_revision_is_queued_fifo_not_refused() -> None:
    cursor = _Cursor()
    ctl = RevisionController(cursor)
    order: list[str] = []
    first = await ctl.start()

    async def other(name: str) -> None:
        async with ctl.revise() as rev:
            order.append(f"{name}@{rev.started_under}")

    second = asyncio.create_task(other("b"))
    third = asyncio.create_task(other("c"))
    for _ in range(5):
        await asyncio.sleep(0)
    assert ctl.queued == 2
    assert order == []  # both wait for the first
    ctl.end(first)
    await asyncio.wait_for(asyncio.gather(second, third), 5)
    assert order == ["b@8", "c@9"]
    assert cursor.revision == 10
    assert ctl.increase_count == 3
    assert ctl.queued == 0


async def test_a_failed_body_bumps_the_revision_without_applying_edits() -> None:
    cursor = _Cursor()
    ctl = RevisionController(cursor)
    with pytest.raises(ValueError):
        async with ctl.revise() as rev:
            rev.apply_at_end(lambda: setattr(cursor, "read", 0))
            raise ValueError("boom")
    assert cursor.read == 10
    assert cursor.revision == 8
    assert not ctl.under_revision
    async with ctl.revise():  # the controller is usable again
        pass
    assert cursor.revision == 9


async def test_end_of_a_revision_that_is_not_running_is_refused() -> None:
    ctl = RevisionController(_Cursor())
    rev = await ctl.start()
    ctl.end(rev)
    with pytest.raises(RuntimeError):
        ctl.end(rev)
    assert ctl.increase_count == 1


async def test_wait_idle_returns_when_the_revision_ends() -> None:
    ctl = RevisionController(_Cursor())
    rev = await ctl.start()
    waiter = asyncio.create_task(ctl.wait_idle())
    for _ in range(5):
        await asyncio.sleep(0)
    assert not waiter.done()
    ctl.end(rev)
    await asyncio.wait_for(waiter, 5)
    assert waiter.done()


async def test_flush_drops_frames_made_under_an_outdated_revision() -> None:
    from broker.net.consumers import ConsumerSide
    from broker.subscriptions.consumer import Consumer
    from broker.subscriptions.dispatchers.shared import SharedDispatcher
    from storage.positions import Position
    from tests.consumers.revision_testlib import FakeConnection, entry

    cursor = _Cursor()
    ctl = RevisionController(cursor)
    dispatcher = SharedDispatcher(_Subscription(ctl), None)  # type: ignore[arg-type]
    conn = FakeConnection()
    consumer = Consumer(ConsumerSide(conn), 1, name="c", sub_type=1)  # type: ignore[arg-type]
    dispatcher.consumers.append(consumer)
    consumer.permits = 10
    for pos, messages, revision in ((Position(1, 0), 1, 6),   # made before a reset
                                    (Position(1, 1), 2, 7)):
        consumer.send(pos, entry(pos.entry_id), messages=messages, revision=revision)
        dispatcher.owner[pos] = consumer
    dispatcher.flush_consumers()
    await dispatcher.close()
    assert conn.entry_ids() == [1]
    assert consumer.permits == 8                 # the dropped frame's permit came back
    assert list(consumer.pending) == [Position(1, 1)]
    assert consumer.unacked_messages == 2
    assert list(dispatcher.owner) == [Position(1, 1)]   # handed back, not lost:
    assert list(dispatcher.replay) == [Position(1, 0)]  # it waits for the next round


class _DeletedNothing:
    def is_deleted(self, position: object) -> bool:
        return False


class _Subscription:
    """The part of a DispatchContext the flush guard and hand_back use."""

    def __init__(self, revisions: RevisionController) -> None:
        self.revisions = revisions
        self.cursor = _DeletedNothing()
        self.redelivery_counts: dict[object, int] = {}
