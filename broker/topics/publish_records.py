"""The records of the publish pipeline: one :class:`Pending` per SEND, one :class:`PublishRun`
per batch of SENDs appended together.

Theory of operation
-------------------
A :class:`broker.topics.producer.Producer` keeps its unanswered SENDs as :class:`Pending`
records in one FIFO queue, in arrival order; a record is answered (SEND_RECEIPT or SEND_ERROR)
only when every record ahead of it is. A record is in one of three states, told by its fields:

* appended with a future (``future`` set): answerable once the future is done;
* appended in a run (no future): ``entry_id`` is :data:`IN_FLIGHT` until the run stamps it
  with its position (durable) or :data:`SETTLED` with an ``error`` (failed);
* answered without an append (a duplicate, or refused): :data:`SETTLED` from the start.

A :class:`PublishRun` is the storage's ``DurableSink`` for the records of one
``Producer.on_sends`` call: the ledger reports their entries in order, durable (stamped, and
the waiters :meth:`Producer.pending_append` handed out resolved) or failed (settled with the
storage error). It then tells its owner through the narrow :class:`RunOwner` interface, never
more: the producer decides when to answer (its drain) and what a failure does to it.
Everything here runs on the broker loop; no locks.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from broker.topics.storage_errors import StorageFailure, StorageOp, storage_failure
from protocol.errors import RequestError
from storage.positions import Position

__all__ = ["IN_FLIGHT", "SETTLED", "Pending", "PublishRun", "RunOwner", "answerable",
           "resolve_waiters"]


class RunOwner(Protocol):
    """What a run tells its producer (:class:`broker.topics.producer.Producer`)."""

    def run_durable(self) -> None:
        """Records of the run were stamped durable: answer them soon (the topic's durable
        listener, right after the group commit)."""
        ...

    def run_failed(self, failure: StorageFailure, first_failure: bool) -> None:
        """Records of the run failed; *first_failure*: one of them carried no error yet."""
        ...


IN_FLIGHT = -1
"""``Pending.entry_id`` of a run record whose append is neither durable nor failed yet."""
SETTLED = -2
"""``Pending.entry_id`` of a record with nothing in flight in a run (an error, or a future)."""


class Pending:
    """One SEND awaiting its answer (``dup``: a re-send answered without a new append).

    Answered once ``future`` is done, or, for a record appended in a run (no future), once
    ``entry_id`` is no longer ``IN_FLIGHT``; ``waiters`` are futures handed out for it by
    :meth:`Producer.pending_append`."""

    __slots__ = ("buffered", "dup", "entry_id", "error", "future", "highest_sequence_id", "key",
                 "ledger_id", "messages",
                 "sequence_id", "size", "started", "waiters")

    def __init__(self, sequence_id: int, highest_sequence_id: int, key: int | None,
                 started: float,
                 future: asyncio.Future[Position] | None, error: RequestError | None,
                 messages: int, size: int, dup: bool = False,
                 entry_id: int = SETTLED) -> None:
        self.sequence_id = sequence_id
        self.highest_sequence_id = highest_sequence_id
        self.key = key
        self.started = started
        self.future = future
        self.error = error
        self.messages = messages
        self.size = size
        self.dup = dup
        self.buffered = 0  # bytes counted against the publish buffers until answered
        self.ledger_id = -1
        self.entry_id = entry_id
        self.waiters: list[asyncio.Future[Position]] | None = None


class PublishRun:
    """The storage's DurableSink for the records of one :meth:`Producer.on_sends` call whose
    entries were appended together, in order: stamps them with their positions (or fails
    them), the producer's drain answers them."""

    __slots__ = ("done", "items", "producer")

    def __init__(self, producer: RunOwner) -> None:
        self.producer = producer
        self.items: list[Pending] = []
        self.done = 0  # records reported so far (reports come in order)

    def entries_durable(self, ledger_id: int, first_entry_id: int, count: int) -> None:
        start = self.done
        self.done = end = start + count
        entry_id = first_entry_id
        items = self.items
        for i in range(start, end):
            item = items[i]
            item.ledger_id = ledger_id
            item.entry_id = entry_id
            entry_id += 1
            if item.waiters is not None:
                resolve_waiters(item.waiters, Position(ledger_id, item.entry_id))
        self.producer.run_durable()

    def entries_failed(self, count: int, error: BaseException) -> None:
        start = self.done
        self.done = end = start + count
        failure = storage_failure(error, StorageOp.PUBLISH)
        first_failure = False
        for item in self.items[start:end]:
            item.entry_id = SETTLED
            if item.error is None:
                item.error = failure.error
                first_failure = True
            if item.waiters is not None:
                for waiter in item.waiters:
                    if not waiter.done():
                        waiter.set_exception(failure.error)
        self.producer.run_failed(failure, first_failure)


def resolve_waiters(waiters: list[asyncio.Future[Position]], position: Position) -> None:
    for waiter in waiters:
        if not waiter.done():
            waiter.set_result(position)


def answerable(item: Pending) -> bool:
    """The record's answer is known: its future is done, or its run reported it (or it
    carried an error from the start)."""
    fut = item.future
    if fut is not None:
        return fut.done()
    return item.entry_id != IN_FLIGHT
