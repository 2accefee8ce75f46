"""The records of the publish pipeline: a :class:`PublishRun` for the SENDs appended together,
a :class:`Pending` for a SEND answered without an append of its own.

Theory of operation
-------------------
A :class:`broker.topics.producer.Producer` keeps its unanswered SENDs in one FIFO queue, in
arrival order; a SEND is answered (SEND_RECEIPT or SEND_ERROR) only when every SEND ahead of
it is. The queue holds two kinds of records:

* :class:`PublishRun`: the consecutive SENDs of one socket read that passed the publish
  checks and were appended to the ledger as one run (a SEND the hot loop does not take --
  out of order, a re-send stored again, an entry the hot checks decline -- is a run of one). It is the storage's ``DurableSink``
  and holds its SENDs as parallel lists (sequence ids, highest sequence ids, dedup keys,
  messages, sizes), not as one object each: the hot path adds five ints per SEND. The
  ledger reports its entries in order, durable (a *span*: items ``[start, end)`` are at
  ``ledger_id:first_entry_id..``) or failed; ``done`` counts the items reported, ``answered``
  the items the drain has answered (a prefix of ``done``). ``errors`` stays None until one
  of its items fails; then it holds one error (or None) per item.
* :class:`Pending`: a duplicate answered with the original's future (``dup``), or a SEND
  refused before any append (``error`` set, no future).

A run tells its producer through the narrow :class:`RunOwner` interface, never more: the
producer decides when to answer (its drain) and what a failure does to it. Futures handed
out for a run's item (:meth:`PublishRun.waiter`, a re-send waiting for its original) are
resolved when the item is reported. Everything here runs on the broker loop; no locks.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol

from broker.topics.storage_errors import StorageFailure, StorageOp, storage_failure
from protocol.errors import RequestError
from storage.positions import Position

__all__ = ["Pending", "PublishRun", "RunOwner", "answerable"]


class RunOwner(Protocol):
    """What a run tells its producer (:class:`broker.topics.producer.Producer`)."""

    def run_durable(self) -> None:
        """Items of the run were reported durable: answer them now."""
        ...

    def run_failed(self, failure: StorageFailure, first_failure: bool) -> None:
        """Items of the run failed; *first_failure*: one of them carried no error yet."""
        ...


class Pending:
    """One SEND awaiting its answer outside a run: a re-send answered with the original's
    future, without a new append (``dup``), once ``future`` is done; or a record refused
    before any append, which has no future and carries ``error``."""

    __slots__ = ("buffered", "dup", "error", "future", "highest_sequence_id", "key",
                 "messages", "sequence_id", "size", "started")

    def __init__(self, sequence_id: int, highest_sequence_id: int, key: int | None,
                 started: float,
                 future: asyncio.Future[Position] | None, error: RequestError | None,
                 messages: int, size: int, dup: bool = False) -> None:
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


class PublishRun:
    """Consecutive SENDs of one producer appended as one ledger run (module docstring)."""

    __slots__ = ("answered", "done", "errors", "highests", "keys", "messages", "producer",
                 "seqs", "sizes", "spans", "started", "waiters")

    def __init__(self, producer: RunOwner, started: float) -> None:
        self.producer = producer
        self.started = started  # loop time the SENDs arrived (one socket read)
        self.seqs: list[int] = []
        self.highests: list[int] = []
        self.keys: list[int | None] = []  # None: a chunk but the last of its message
        self.messages: list[int] = []
        self.sizes: list[int] = []  # bytes of each SEND's entry (as received)
        self.done = 0  # items reported by the ledger, durable or failed (in order)
        self.answered = 0  # items answered by the drain: a prefix of done
        self.spans: list[tuple[int, int, int, int]] = []
        """(first item, end item, ledger id, first entry id) of each durable report."""
        self.errors: list[RequestError | None] | None = None
        self.waiters: dict[int, list[asyncio.Future[Position]]] | None = None

    def __len__(self) -> int:
        return len(self.seqs)

    def appenders(self) -> tuple[Callable[[int], None], Callable[[int], None],
                                 Callable[[int | None], None], Callable[[int], None],
                                 Callable[[int], None]]:
        """The bound ``append`` of (seqs, highests, keys, messages, sizes): the producer's
        hot loop adds a SEND with five local calls."""
        return (self.seqs.append, self.highests.append, self.keys.append,
                self.messages.append, self.sizes.append)

    def add(self, seq: int, highest: int, key: int | None, messages: int, size: int) -> None:
        """One SEND (a run of one: the per-entry path)."""
        self.seqs.append(seq)
        self.highests.append(highest)
        self.keys.append(key)
        self.messages.append(messages)
        self.sizes.append(size)

    # -- DurableSink (storage.segment_file) ---------------------------------------------------

    def entries_durable(self, ledger_id: int, first_entry_id: int, count: int) -> None:
        start = self.done
        self.done = end = start + count
        self.spans.append((start, end, ledger_id, first_entry_id))
        if self.waiters is not None:
            for index in range(start, end):
                waiting = self.waiters.pop(index, None)
                if waiting is not None:
                    resolve_waiters(waiting, Position(ledger_id, first_entry_id + index - start))
        self.producer.run_durable()

    def entries_failed(self, count: int, error: BaseException) -> None:
        start = self.done
        self.done = end = start + count
        failure = storage_failure(error, StorageOp.PUBLISH)
        errors = self.error_list()
        first_failure = False
        for index in range(start, end):
            if errors[index] is None:
                errors[index] = failure.error
                first_failure = True
            if self.waiters is not None:
                for waiter in self.waiters.pop(index, ()):
                    if not waiter.done():
                        waiter.set_exception(failure.error)
        self.producer.run_failed(failure, first_failure)

    # -- the rare paths ----------------------------------------------------------------------

    def error_list(self) -> list[RequestError | None]:
        """The per-item errors, created on the first failure."""
        if self.errors is None:
            self.errors = [None] * len(self.seqs)
        return self.errors

    def fail_unanswered(self, error: RequestError) -> None:
        """Every unanswered item without an error gets *error* (a failed append fails every
        later send of the producer); answered once the ledger has reported it."""
        errors = self.error_list()
        for index in range(self.answered, len(errors)):
            if errors[index] is None:
                errors[index] = error

    def refuse(self, error: RequestError) -> None:
        """The run was refused before any append (the topic answered for the ledger)."""
        errors = self.error_list()
        for index in range(len(errors)):
            if errors[index] is None:
                errors[index] = error
        self.done = len(errors)

    def position(self, index: int) -> Position | None:
        """Where item *index* was stored, if it was reported durable."""
        for start, end, ledger_id, first_entry_id in self.spans:
            if start <= index < end:
                return Position(ledger_id, first_entry_id + index - start)
        return None

    def waiter(self, sequence_id: int, key: int,
               loop: asyncio.AbstractEventLoop) -> asyncio.Future[Position] | None:
        """A future of the unanswered, not failed item ``[sequence_id, key]`` (a re-send on
        a later incarnation of the producer waits on it), or None."""
        keys = self.keys
        for index in range(self.answered, len(keys)):
            if keys[index] != key or self.seqs[index] != sequence_id \
                    or (self.errors is not None and self.errors[index] is not None):
                continue
            fut: asyncio.Future[Position] = loop.create_future()
            position = self.position(index) if index < self.done else None
            if position is not None:  # durable, its receipt not written yet
                fut.set_result(position)
                return fut
            if self.waiters is None:
                self.waiters = {}
            self.waiters.setdefault(index, []).append(fut)
            return fut
        return None


def resolve_waiters(waiters: list[asyncio.Future[Position]], position: Position) -> None:
    for waiter in waiters:
        if not waiter.done():
            waiter.set_result(position)


def answerable(item: Pending | PublishRun) -> bool:
    """The record's next answer is known: a Pending's future is done (or it carried an error
    from the start); a run's next item was reported."""
    if isinstance(item, PublishRun):
        return item.answered < item.done
    fut = item.future
    return fut is None or fut.done()
