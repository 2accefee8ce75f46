"""A topic's terminated state (Pulsar's ``terminate``): no more messages, ever.

Theory of operation
-------------------
One :class:`Termination` per loaded topic (``Topic.termination``). :meth:`terminate` runs
Pulsar's terminate once the topic refuses new messages (its state is TERMINATED from then on,
:meth:`broker.topics.topic.Topic.terminate`); once the appends in flight are
durable (waited for up to ``TERMINATE_DRAIN_S``), :meth:`record` writes the topic's
last message id in the metadata store (kind ``"terminated"``, key the full topic
name) before it reports the topic terminated, so the state survives unloads and restarts;
:meth:`load` reads it back when the topic loads. From then on the topic refuses new producers
and SENDs with ``TopicTerminatedError`` ("Topic was already terminated"), as Pulsar does.
Each producer is disconnected (CLOSE_PRODUCER) as soon as its own SENDs in flight are
answered, woken by that answer and before the record is written, as Pulsar disconnects them
once the ledger is closed: a client that sends one message at a time is told of the
termination by CLOSE_PRODUCER, so its reconnection is refused with TopicTerminatedError,
rather than by a SEND_ERROR, which the Go client takes as the end of that producer on the
connection (it then ignores the CLOSE_PRODUCER and its next sends time out). A subscription with nothing left to acknowledge tells its
consumers REACHED_END_OF_TOPIC (:meth:`broker.subscriptions.subscription.Subscription.check_end_of_topic`),
but only clients that handle it (the Java client): pulsar-client 3.13 (C++ 4.2.0) closes the
connection on that command (reference 2.2), so its consumers simply receive nothing more.

Terminating twice answers the same last id. Deleting the topic drops the record
(:func:`forget`). Called by :class:`broker.topics.topic.Topic` and the admin API.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Protocol

from storage.metadata import MetadataStore
from storage.positions import Position

__all__ = ["TERMINATED_KIND", "TERMINATED_REASON", "Termination", "forget"]

TERMINATED_KIND = "terminated"
TERMINATED_REASON = "Topic was already terminated"

# terminate: how long appends already in flight may take to become durable
TERMINATE_DRAIN_S = 5.0


class DrainingProducer(Protocol):
    """What terminate needs of the topic's producers."""

    @property
    def closed(self) -> bool:
        """Detached from the topic already."""
        ...

    async def answered(self, timeout: float) -> None:
        """Return once every SEND received so far is answered (at most *timeout* s)."""
        ...

    def disconnect(self) -> None: ...


class Termination:
    """The terminated flag and last message id of one topic (module docstring)."""

    def __init__(self, metadata: MetadataStore, full: str) -> None:
        self._md = metadata
        self._full = full
        self.last: Position | None = None
        self.recorded = False   # durable: the topic is TERMINATED from the load on

    async def load(self) -> None:
        doc = await self._md.get(TERMINATED_KIND, self._full)
        if doc is not None:
            self.recorded = True
            ledger, entry = int(doc["ledgerId"]), int(doc["entryId"])
            self.last = Position(ledger, entry) if ledger >= 0 else None

    async def terminate(self, producers: Mapping[str, DrainingProducer],
                        last_confirmed: Callable[[], Position | None]) -> Position | None:
        """Called once the topic refuses every new message (TERMINATED): let the appends
        already in flight become durable, disconnecting each of *producers* as soon as its
        own are answered (their re-creation is refused with TopicTerminatedError), then
        record the last message id durably and return it. Raises when the record fails (the
        topic then accepts messages again)."""
        if self.recorded:
            return self.last
        await asyncio.gather(*(_disconnect_when_answered(p) for p in list(producers.values())))
        return await self.record(last_confirmed())

    async def record(self, last: Position | None) -> Position | None:
        """Make the termination durable at *last* (None: the topic has no message); raises
        when the write fails (the topic lifts its refusal, so it is never terminated only in
        memory)."""
        doc = {"ledgerId": last.ledger_id if last else -1, "entryId": last.entry_id if last else -1}
        await self._md.put(TERMINATED_KIND, self._full, doc)
        self.last = last
        self.recorded = True
        return last


async def _disconnect_when_answered(producer: DrainingProducer) -> None:
    await producer.answered(TERMINATE_DRAIN_S)
    if not producer.closed:
        producer.disconnect()


async def forget(metadata: MetadataStore, full: str) -> None:
    """The topic is deleted: a topic created again under its name is not terminated."""
    await metadata.delete(TERMINATED_KIND, full)
