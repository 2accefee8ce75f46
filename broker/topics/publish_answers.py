"""One drain of a producer's queue: the SEND_RECEIPTs and SEND_ERRORs it writes, in order.

Theory of operation
-------------------
:meth:`broker.topics.producer.Producer._drain` walks its FIFO queue from the head and hands
each record whose outcome is known to one :class:`Answers`, which collects the answers of the
whole drain for ONE write, in send order: a run's receipts are encoded straight from its
lists (:func:`protocol.send_path.encode_run_receipts`, span by span), a Pending's receipt is
gathered as a ``(sequence id, ledger id, entry id, highest sequence id)`` tuple and those are
encoded in bulk (:func:`protocol.send_path.encode_send_receipts`) before whatever answer
follows them. It also sums what the producer and
topic count (messages, bytes, latency histogram) and records durable keys in the producer's
:class:`broker.topics.dedup.SequenceState`.

A :class:`broker.topics.publish_records.PublishRun` is answered range by range: with no
failure in it, the reported items ``[answered, done)`` are durable, so their receipts,
dedup keys and counts come from its lists and spans without a per-item branch, and they share
one latency (a run's SENDs arrived in one socket read). A run with failures and a
:class:`~broker.topics.publish_records.Pending` are answered item by item. An error that is the
producer's ``blocking`` one (the store is read-only) stops the drain there: the producer
then blocks (``blocked``). Loop only; the producer owns the object for one drain.
"""

from __future__ import annotations

import asyncio
import bisect
from typing import Protocol

from broker.metrics.rates import PUBLISH_LATENCY_BUCKETS_MS
from broker.topics.dedup import SequenceState
from broker.topics.publish_records import Pending, PublishRun
from broker.topics.storage_errors import StorageOp, storage_failure
from protocol import commands as C
from protocol.errors import RequestError
from protocol.send_path import encode_run_receipts, encode_send_receipt_of, encode_send_receipts

__all__ = ["AnsweringProducer", "Answers", "lone_receipt"]

_bucket_of = bisect.bisect_left
_BOUNDS = PUBLISH_LATENCY_BUCKETS_MS


class AnsweringProducer(Protocol):
    """What a drain reads of its producer (:class:`broker.topics.producer.Producer`)."""

    producer_id: int
    seq_state: SequenceState

    @property
    def blocking(self) -> RequestError | None: ...

    def fail_behind(self, error: RequestError, *, reload_topic: bool) -> None: ...


def lone_receipt(producer: AnsweringProducer, run: PublishRun, now: float,
                 buckets: list[int]) -> tuple[bytes, float]:
    """What :class:`Answers` makes of a drain whose queue is *run* alone, one send reported
    durable (a lone publisher's every drain): its receipt, its dedup key recorded and its
    latency counted in *buckets*, without the drain's lists. Returns (the receipt, the latency
    in ms); the caller marks it answered and counts it as a drain's answers are counted."""
    ((_, _, ledger_id, entry_id),) = run.spans
    seq = run.seqs[0]
    key = run.keys[0]
    if key is not None:
        producer.seq_state.record_one(seq, key, ledger_id, entry_id)
    latency_ms = (now - run.started) * 1000.0
    buckets[_bucket_of(_BOUNDS, latency_ms)] += 1
    return encode_send_receipt_of(producer.producer_id, seq, run.highests[0], ledger_id,
                                  entry_id), latency_ms


class Answers:
    """The answers of one drain (module docstring)."""

    __slots__ = ("answered", "blocked", "buckets", "buffered", "count", "latency_sum", "msgs",
                 "now", "out", "producer", "receipts", "size")

    def __init__(self, producer: AnsweringProducer, now: float, buckets: list[int]) -> None:
        self.producer = producer
        self.now = now
        self.buckets = buckets  # the topic's publish latency histogram
        self.out: list[bytes] = []
        self.receipts: list[tuple[int, int, int, int]] = []
        self.answered = 0  # SENDs answered
        self.buffered = 0  # their bytes, released from the publish buffers
        self.count = 0  # entries acknowledged (not duplicates)
        self.msgs = 0
        self.size = 0
        self.latency_sum = 0.0
        self.blocked: RequestError | None = None

    def run(self, run: PublishRun) -> bool:
        """Answer what the ledger has reported of *run*; True when all of it is answered."""
        start, done = run.answered, run.done
        if start < done:
            if run.errors is None:
                self._durable(run, start, done)
                run.answered = done
            elif not self._one_by_one(run, start, done):
                return False
        return run.answered == len(run.seqs)

    def _durable(self, run: PublishRun, start: int, end: int) -> None:
        """Items [start, end) of a run without failures: all durable."""
        self._flush_receipts()  # receipts of Pending records before it first: in send order
        seqs, highests, keys = run.seqs, run.highests, run.keys
        out = self.out
        pid = self.producer.producer_id
        seq_state = self.producer.seq_state
        record_run = seq_state.record_run
        record_one = seq_state.record_one
        for first, last, ledger_id, entry_id in run.spans:
            lo = first if first > start else start
            hi = last if last < end else end
            if lo >= hi:
                continue
            first_entry = entry_id + lo - first
            if hi - lo == 1:  # a lone send's span: no lists sliced for it
                seq = seqs[lo]
                out.append(encode_send_receipt_of(pid, seq, highests[lo], ledger_id, first_entry))
                key = keys[lo]
                if key is not None:
                    record_one(seq, key, ledger_id, first_entry)
                continue
            span_seqs = seqs[lo:hi]
            out.append(encode_run_receipts(pid, span_seqs, highests[lo:hi], ledger_id,
                                           first_entry))
            record_run(span_seqs, keys[lo:hi], ledger_id, first_entry)
        n = end - start
        if n == 1:
            size = run.sizes[start]
            self.msgs += run.messages[start]
        else:
            size = sum(run.sizes[start:end])
            self.msgs += sum(run.messages[start:end])
        self.answered += n
        self.buffered += size
        self.count += n
        self.size += size
        latency_ms = (self.now - run.started) * 1000.0
        self.latency_sum += latency_ms * n
        self.buckets[_bucket_of(_BOUNDS, latency_ms)] += n

    def _one_by_one(self, run: PublishRun, start: int, end: int) -> bool:
        """Items [start, end) of a run with failures; False when the drain must stop."""
        errors = run.errors
        assert errors is not None
        blocking = self.producer.blocking
        for index in range(start, end):
            error = errors[index]
            if error is not None and error is blocking:
                run.answered = index
                self.blocked = error
                return False
            size = run.sizes[index]
            self.answered += 1
            self.buffered += size
            if error is not None:
                self._error(run.seqs[index], error)
                continue
            position = run.position(index)
            assert position is not None, "an item reported without error is durable"
            self.receipts.append((run.seqs[index], position.ledger_id, position.entry_id,
                                  run.highests[index]))
            key = run.keys[index]
            if key is not None:
                self.producer.seq_state.record(run.seqs[index], key, position.ledger_id,
                                               position.entry_id)
            self._count(run.messages[index], size, run.started)
        run.answered = end
        return True

    def pending(self, item: Pending) -> bool:
        """Answer *item* if its outcome is known; False when the drain must stop here."""
        fut = item.future
        if fut is not None:
            if not fut.done():
                return False
            if item.error is None and (fut.cancelled() or fut.exception() is not None):
                exc = fut.exception() if not fut.cancelled() else None
                failure = storage_failure(
                    exc if exc is not None else asyncio.CancelledError("append cancelled"),
                    StorageOp.PUBLISH)
                if failure.block_producer:
                    self.blocked = failure.error
                    return False
                item.error = failure.error
                self.producer.fail_behind(failure.error, reload_topic=failure.reload_topic)
        if item.error is not None and item.error is self.producer.blocking:
            self.blocked = item.error
            return False
        self.answered += 1
        self.buffered += item.buffered
        if item.error is not None:
            self._error(item.sequence_id, item.error)
            return True
        assert fut is not None
        position = fut.result()
        self.receipts.append((item.sequence_id, position.ledger_id, position.entry_id,
                              item.highest_sequence_id))
        if not item.dup:  # a duplicate is answered again, not appended again: not counted
            if item.key is not None:
                self.producer.seq_state.record(item.sequence_id, item.key,
                                               position.ledger_id, position.entry_id)
            self._count(item.messages, item.size, item.started)
        return True

    def _count(self, messages: int, size: int, started: float) -> None:
        self.count += 1
        self.msgs += messages
        self.size += size
        latency_ms = (self.now - started) * 1000.0
        self.latency_sum += latency_ms
        self.buckets[_bucket_of(_BOUNDS, latency_ms)] += 1

    def _flush_receipts(self) -> None:
        """Encode the receipts gathered one by one (answers stay in send order)."""
        if self.receipts:
            self.out.append(encode_send_receipts(self.producer.producer_id, self.receipts))
            self.receipts = []

    def _error(self, sequence_id: int, error: RequestError) -> None:
        self._flush_receipts()  # the receipts before it first
        self.out.append(C.encode_send_error(self.producer.producer_id, sequence_id, error.code,
                                            error.message))

    def data(self) -> bytes:
        """Everything to write, in order (empty when nothing was answered)."""
        self._flush_receipts()
        out = self.out
        return out[0] if len(out) == 1 else b"".join(out)


