"""A topic delete goes to its end when the task running it is cancelled, and the service's
close waits for an inactive-topic sweep's delete in flight.

The ledger's delete is held here on an event while the awaiting task is cancelled, as a slow
disk would hold it: the store finishes a delete it has begun, so the ledger goes whatever the
caller does; what must not be skipped is the rest of the delete (the termination and policy
records a topic created again under the name would otherwise inherit).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from typing import Any

from broker.topics.termination import TERMINATED_KIND
from storage.to_the_end import finish

FULL = "persistent://public/default/deleted-while-cancelled"
#: How long a close that must wait is given to (wrongly) end; a loaded machine only makes the
#: check weaker, never wrong.
CLOSE_GRACE_S = 0.5


class HeldDelete:
    """The store's ``delete_ledger``, held on an event after it is entered, then run to its
    end whatever its caller does (as the store runs its thread work)."""

    def __init__(self, real: Callable[[str], Coroutine[Any, Any, None]]) -> None:
        self._real = real
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.done = False

    async def __call__(self, name: str) -> None:
        async def held() -> None:
            self.entered.set()
            await self.release.wait()
            await self._real(name)
            self.done = True

        await finish(held())


async def _terminated_topic(service: Any) -> None:
    topic = await service.get_topic(FULL, create=True)
    await topic.terminate()
    assert await service.store.metadata.get(TERMINATED_KIND, FULL) is not None


def test_a_cancelled_delete_still_forgets_the_termination(broker: Any) -> None:
    service = broker.service

    async def scenario() -> tuple[bool, bool, object]:
        await _terminated_topic(service)
        held = HeldDelete(service.store.delete_ledger)
        service.store.delete_ledger = held
        try:
            task = asyncio.ensure_future(service.delete_topic(FULL))
            await held.entered.wait()
            task.cancel()
            held.release.set()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        finally:
            del service.store.delete_ledger
        return (task.cancelled(), held.done,
                await service.store.metadata.get(TERMINATED_KIND, FULL))

    cancelled, ledger_deleted, record = broker.call(scenario)
    assert cancelled            # the caller still sees its cancel
    assert ledger_deleted
    assert record is None       # a topic created again under the name is not terminated
    topic_again = broker.call(lambda: service.get_topic(FULL, create=True))
    assert broker.call(lambda: topic_again.terminated) is False


def test_close_waits_for_the_sweeps_delete_in_flight(broker_factory: Any) -> None:
    broker = broker_factory(config_overrides={
        "brokerDeleteInactiveTopicsEnabled": True,
        "brokerDeleteInactiveTopicsFrequencySeconds": 1,
        "brokerDeleteInactiveTopicsMaxInactiveDurationSeconds": 1})
    service = broker.service

    async def scenario() -> tuple[bool, bool, object]:
        held = HeldDelete(service.store.delete_ledger)
        service.store.delete_ledger = held
        try:
            await _terminated_topic(service)    # no producer, no subscription: inactive
            await held.entered.wait()           # the sweeper is deleting it
            closing = asyncio.ensure_future(service.close())
            done, _ = await asyncio.wait((closing,), timeout=CLOSE_GRACE_S)
            ended_while_held = bool(done)
            held.release.set()
            await closing
        finally:
            del service.store.delete_ledger
        return (ended_while_held, held.done,
                await service.store.metadata.get(TERMINATED_KIND, FULL))

    ended_while_held, ledger_deleted, record = broker.call(scenario)
    assert not ended_while_held   # the close waited for the delete
    assert ledger_deleted
    assert record is None
