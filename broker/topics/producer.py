"""Producers: PRODUCER -> PRODUCER_SUCCESS, and the SEND -> SEND_RECEIPT pipeline.

Theory of operation
-------------------
A :class:`Producer` belongs to one connection and one topic. Each SEND is put in the
producer's FIFO ``_queue`` *before* anything can fail, so every answer leaves in the order
the sends arrived (the C++ client closes the connection when a receipt overtakes an earlier
send). The queue's records are defined in :mod:`broker.topics.publish_records`:

1. The hot path (:meth:`Producer.on_sends`) takes all SENDs of one socket read for this
   producer at once, hand-parsed by the decoder (:class:`protocol.send_path.SendFrame`, no
   protobuf object). Each is checked (the producer has not failed, the CRC verdict, not a
   re-send, :meth:`broker.topics.topic.Topic.check_publish`: metadata, the delayed-delivery
   publish guard of PIP-315/437); the consecutive accepted ones form ONE
   :class:`PublishRun` (five ints per SEND in parallel lists; no object, future, task or
   closure per SEND), appended to the ledger as one run with one completion.
2. A SEND refused there (SEND_ERROR ChecksumError for a bad CRC: the one error the client
   fails a single message for; the connection stays), a re-send and an entry storage
   refuses become one :class:`Pending` each, ending the run before them: re-sends and
   oversized entries take the per-entry path (:meth:`Topic.publish`, a future); the
   generic-decoded SEND (:meth:`Producer.on_send`) does too.
3. The drain (:meth:`Producer._drain`, :class:`broker.topics.publish_answers.Answers`)
   answers the head records whose outcome is known, in order, with ONE write: a run range
   by range as the ledger reports it (a rollover may split it), receipts encoded in bulk
   (echoing ``sequence_id`` and ``highest_sequence_id``, as Pulsar does for batches), a
   SEND_ERROR where a record failed. A failed append fails every record queued behind it
   as well, so nothing is acknowledged out of order. A producer whose head is in flight is
   listed in its topic's ``awaiting_durable``; the topic's durable listener, which the
   ledger calls right after a group commit, drains it there
   (:meth:`Producer.drain_finished`), so the receipts leave in that very callback. A
   done-callback on a Pending head's future (one per group commit, not per SEND) is the
   fallback, and the only path for failed future appends. A re-send that must wait for a
   run's item gets a future made on demand (:meth:`Producer.pending_append`).

Every SEND counts towards the connection's pending-publish limit (back-pressure) from
step 1 until its answer is written.

Re-sends: a SEND whose key (the highest sequence id it carries) is not above the highest
one appended under the producer's name is a re-send; :mod:`broker.topics.dedup` decides how it is
answered (the original message id, the append still in flight, a new append, or -1:-1).
The hot path costs one comparison against ``seq_state.pushed``; a durable append is recorded
in ``seq_state`` when its receipt is written.

Access modes: Shared (any number), Exclusive (refused with ProducerBusy while another
producer is attached, or while an exclusive one is), ExclusiveWithFencing (closes the
others), WaitForExclusive (queued: PRODUCER_SUCCESS with ``producer_ready=false`` at once,
then a second one with ``producer_ready=true`` when the topic's producers are gone, as
Pulsar does; the client waits without a timeout meanwhile).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from typing import Any, Protocol

from broker.metrics.rates import iso_ms
from broker.topics.dedup import SequenceState, send_key
from broker.topics.publish_answers import Answers
from broker.topics.publish_records import Pending, PublishRun, answerable
from broker.topics.publish_refusals import REASON_DISK
from broker.topics.storage_errors import StorageFailure
from protocol import commands as C
from protocol import pulsar_pb as pb
from protocol.errors import ChecksumError, RequestError
from protocol.frames import Frame
from protocol.send_path import SendFrame
from storage.positions import Position
from storage.segment_file import DurableSink
from storage.segments import MAX_RECORD_BYTES

__all__ = ["ACCESS_MODE_NAMES", "Producer", "ProducerTransport", "PublishTarget"]

log = logging.getLogger("horae.producer")

ACCESS_MODE_NAMES: dict[int, str] = {
    pb.Shared: "Shared",
    pb.Exclusive: "Exclusive",
    pb.WaitForExclusive: "WaitForExclusive",
    pb.ExclusiveWithFencing: "ExclusiveWithFencing",
}


class ProducerTransport(Protocol):
    """What a producer may ask of the connection it was created on
    (:class:`broker.net.connection.ServerConnection`, which owns the producer registry)."""

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    @property
    def is_closed(self) -> bool: ...

    @property
    def remote_address(self) -> str: ...

    @property
    def client_version(self) -> str: ...

    def write(self, data: bytes) -> None: ...

    def publish_started(self, count: int, nbytes: int) -> None:
        """*count* SENDs holding *nbytes* (their entries) wait for their answers
        (back-pressure accounting)."""

    def publish_finished(self, count: int, nbytes: int) -> None:
        """*count* SENDs holding *nbytes* in all were answered."""

    def producer_detached(self, producer: Producer) -> None:
        """The broker closed *producer* (fenced, displaced, topic unloaded): forget it."""

    def producer_ready(self, producer: Producer) -> None:
        """A queued WaitForExclusive *producer* was given the topic: register it."""


class ResendPolicy(Protocol):
    """How a topic answers a re-send (:meth:`broker.topics.dedup.MessageDeduplication.resend`;
    a non-persistent topic publishes it again)."""

    def resend(self, state: SequenceState, entry: bytes,
               key: int) -> tuple[asyncio.Future[Position] | None, int | None]: ...


class PublishTarget(Protocol):
    """What a producer may ask of its topic (:class:`broker.topics.topic.Topic`,
    :class:`broker.topics.nonpersistent.NonPersistentTopic`)."""

    @property
    def dedup(self) -> ResendPolicy: ...

    awaiting_durable: dict[Producer, None]
    publish_latency_buckets: list[int]

    def publish(self, entry: bytes) -> tuple[asyncio.Future[Position], int, bool]: ...

    def check_publish(self, entry: bytes) -> tuple[bytes, int, bool]: ...

    def append_run(self, entries: list[bytes], sink: DurableSink) -> None: ...

    def record_published(self, messages: int, size: int, entries: int,
                         latency_sum_ms: float) -> None: ...

    def on_persistence_failure(self, exc: object) -> None: ...

    def publish_refused(self, reason: str, refused: int) -> None: ...

    def remove_producer(self, producer: Producer) -> None: ...


class Producer:
    """A producer attached to *topic* through *connection*."""

    def __init__(self, connection: ProducerTransport, topic: PublishTarget, producer_id: int,
                 name: str, access_mode: int, user_provided_name: bool,
                 metadata: dict[str, str], epoch: int = 0) -> None:
        self.connection = connection
        self.topic = topic
        self.producer_id = producer_id
        self.name = name
        self.access_mode = access_mode
        self.user_provided_name = user_provided_name
        self.metadata = metadata
        self.epoch = epoch
        self.connected_since_ms = int(time.time() * 1000)
        self.msg_in_counter = 0
        self.bytes_in_counter = 0
        self.closed = False
        # Closed because the store is read-only (broker/topics/publish_refusals.py): stays
        # registered on its connection until the client re-creates or closes it.
        self.blocked = False
        # set by a ledger run refused because the store is read-only: the drain answers what
        # precedes the first record carrying this error, then blocks the producer (_block)
        self.blocking: RequestError | None = None
        self._queue: deque[Pending | PublishRun] = deque()
        self._failed: RequestError | None = None
        self._drained: asyncio.Event | None = None
        self._watched: asyncio.Future[Position] | None = None
        self._loop = connection.loop
        self._write = connection.write
        self._on_done = self._drain_cb  # bound once: one allocation less per SEND
        # Replaced by the topic's MessageDeduplication.attach (broker.net.producers) before any SEND.
        self.seq_state = SequenceState(name)

    @property
    def access_mode_name(self) -> str:
        return str(ACCESS_MODE_NAMES.get(self.access_mode, str(self.access_mode)))

    @property
    def pending(self) -> int:
        """SENDs not answered yet."""
        return sum(len(item) - item.answered if isinstance(item, PublishRun) else 1
                   for item in self._queue)

    # ------------------------------------------------------------------ hot path

    def on_send(self, frame: Frame, send: pb.CommandSend) -> None:
        """One SEND the fast path declined (*send* is ``frame.command.send``, already looked
        up by the caller): the per-entry path of :meth:`_one_send`."""
        started = self._loop.time()
        entry = frame.entry
        seq = send.sequence_id
        highest = send.highest_sequence_id
        key = send_key(seq, highest, send.num_messages)
        if self.blocked:  # already on the wire when CLOSE_PRODUCER left: dropped
            self.topic.publish_refused(REASON_DISK, 1)
            return
        if entry is None:
            error = self._failed or ChecksumError("SEND without a payload")
            item = Pending(seq, highest, key, started, None, error, 0, 0)
            nbytes = 0
        else:  # a frame without a checksum (checksum_valid None) is taken as it is
            item = self._one_send(entry, seq, highest, key, frame.checksum_valid is not False,
                                  started)
            nbytes = len(entry)
        item.buffered = nbytes
        queue = self._queue
        queue.append(item)
        self.connection.publish_started(1, nbytes)
        if len(queue) == 1:
            self._watch_head()

    def on_sends(self, sends: list[SendFrame]) -> None:
        """The hand-parsed SENDs of one socket read for this producer, in order: each checked
        as :meth:`on_send` does, the accepted ones appended as runs (one completion each; a
        SEND taking another path ends the run before it, so the queue stays in send order)."""
        started = self._loop.time()
        check = self.topic.check_publish
        state = self.seq_state
        enqueue = self._queue.append
        was_empty = not self._queue
        run = PublishRun(self, started)
        seqs, highests, keys, messages, sizes = run.appenders()
        datas: list[bytes] = []  # the run's entries as they will be stored
        add_data = datas.append
        nbytes = 0
        for _, seq, count, highest, entry, checksum_valid, _ in sends:
            size = len(entry)
            nbytes += size
            key = highest if highest > seq else seq
            if count > 1 and seq + count - 1 > key:  # a C++ batch: ids seq .. seq+count-1
                key = seq + count - 1
            refused: Pending | None = None
            if self._failed is None and checksum_valid and key > state.pushed \
                    and size <= MAX_RECORD_BYTES:
                try:
                    stored, in_entry, partial = check(entry)
                except RequestError as exc:
                    refused = Pending(seq, highest, key, started, None, exc, 0, 0)
                else:
                    if partial:  # a chunk but the last of its message is no dedup key
                        keys(None)
                    else:
                        state.pushed = key
                        keys(key)
                    seqs(seq)
                    highests(highest)
                    messages(in_entry)
                    sizes(size)
                    add_data(stored)
                    continue
            if datas:  # the run so far first: ledger order = queue order = send order
                self._append_run(run, datas)
                run = PublishRun(self, started)
                seqs, highests, keys, messages, sizes = run.appenders()
                datas = []
                add_data = datas.append
            # _one_send may append at once: only now, after the run before it
            item = refused if refused is not None else \
                self._one_send(entry, seq, highest, key, checksum_valid, started)
            item.buffered = size
            enqueue(item)
        if datas:
            self._append_run(run, datas)
        self.connection.publish_started(len(sends), nbytes)
        if was_empty:
            self._watch_head()

    def _one_send(self, entry: bytes, seq: int, highest: int, key: int,
                  checksum_valid: bool, started: float) -> Pending:
        """A SEND the run path does not take (the producer failed, a bad checksum, a re-send,
        an entry storage refuses) or the fast decoder declined: its Pending, appended with a
        future or refused."""
        try:
            if self._failed is not None:
                raise self._failed
            if not checksum_valid:
                raise ChecksumError("Checksum failed on the broker")
            if key <= self.seq_state.pushed:
                return self._resend(entry, seq, highest, key, started)
            fut, messages, partial = self.topic.publish(entry)
            if not partial:
                self.seq_state.pushed = key
            return Pending(seq, highest, None if partial else key, started, fut, None,
                           messages, len(entry))
        except RequestError as exc:
            return Pending(seq, highest, key, started, None, exc, 0, 0)

    def _append_run(self, run: PublishRun, datas: list[bytes]) -> None:
        """Queue *run* and append its entries (*datas*) to the ledger."""
        self._queue.append(run)
        try:
            self.topic.append_run(datas, run)
        except RequestError as exc:  # the topic answered for the ledger: none was appended
            run.refuse(exc)

    def _resend(self, entry: bytes, seq: int, highest: int, key: int,
                started: float) -> Pending:
        """A SEND whose key is not above the highest appended one (:mod:`broker.topics.dedup`)."""
        original, record_key = self.topic.dedup.resend(self.seq_state, entry, key)
        if original is not None:
            return Pending(seq, highest, key, started, original, None, 0, 0, dup=True)
        fut, messages, _ = self.topic.publish(entry)
        return Pending(seq, highest, record_key, started, fut, None, messages, len(entry))

    def pending_append(self, key: int) -> asyncio.Future[Position] | None:
        """The future of a queued, not failed, send of *key* (a re-send on a later
        incarnation of this producer is answered with it)."""
        for item in self._queue:
            if isinstance(item, PublishRun):
                fut = item.waiter(key, self._loop)
                if fut is not None:
                    return fut
            elif item.key == key and item.error is None and item.future is not None:
                return item.future
        return None

    # -- RunOwner (broker.topics.publish_records) ----------------------------------------------

    def run_durable(self) -> None:
        if not self.closed:  # answered from the topic's durable listener, right after
            self.topic.awaiting_durable[self] = None

    def run_failed(self, failure: StorageFailure, first_failure: bool) -> None:
        if failure.block_producer:  # read-only store: the drain blocks the producer there
            self.blocking = failure.error
        elif first_failure:
            self.fail_behind(failure.error, reload_topic=failure.reload_topic)
        self.drain_finished()

    def drain_finished(self) -> None:
        """Answer the sends whose appends are durable now (the snapshot wants every durable
        entry reflected in the sequence state; the done-callbacks may not have run yet)."""
        queue = self._queue
        if queue and answerable(queue[0]):
            self._drain()

    def _watch_head(self) -> None:
        """Answer what can be answered; then wait for the head record.

        Appends of one ledger resolve in order and a group commit resolves many at once, so
        one callback per group commit (not one per SEND) drains every finished record: a run
        reports to the topic's durable listener, a Pending's future gets a done-callback.
        """
        queue = self._queue
        if not queue:
            return
        head = queue[0]
        if answerable(head):
            self._drain()
        elif isinstance(head, PublishRun):
            self.topic.awaiting_durable[self] = None  # its run reports to the listener
        else:
            self._watch(head)

    def _watch(self, head: Pending) -> None:
        """Drain when the head record's future is done (it has one: a record without a
        future carries an error and is answerable at once)."""
        fut = head.future
        assert fut is not None
        if fut is not self._watched:
            self._watched = fut
            fut.add_done_callback(self._on_done)
            self.topic.awaiting_durable[self] = None

    def _drain_cb(self, fut: asyncio.Future[Position]) -> None:
        if fut is self._watched:  # else a newer head is watched: keep its callback's record
            self._watched = None
        queue = self._queue
        if queue and answerable(queue[0]):
            self._drain()  # usually the topic's durable listener drained this already

    def _drain(self) -> None:
        """Answer the records at the head of the queue whose outcome is known, in order, with
        one write (:class:`broker.topics.publish_answers.Answers`)."""
        topic = self.topic
        answers = Answers(self, self._loop.time(), topic.publish_latency_buckets)
        queue = self._queue
        while queue:
            item = queue[0]
            if isinstance(item, PublishRun):
                if not answers.run(item):
                    break
            elif not answers.pending(item):
                break
            queue.popleft()
        if answers.answered:
            self._write(answers.data())
            self.connection.publish_finished(answers.answered, answers.buffered)
        if answers.count:
            self.msg_in_counter += answers.msgs
            self.bytes_in_counter += answers.size
            topic.record_published(answers.msgs, answers.size, answers.count,
                                   answers.latency_sum)
        if answers.blocked is not None:
            self._block(answers.blocked)
            return
        if queue:
            head = queue[0]
            if isinstance(head, PublishRun):
                topic.awaiting_durable[self] = None
            else:
                self._watch(head)
        else:
            topic.awaiting_durable.pop(self, None)
            if self._drained is not None:
                self._drained.set()

    def fail_behind(self, error: RequestError, *, reload_topic: bool) -> None:
        """A failed append fails every later send of this producer (FIFO answers)."""
        self._failed = error
        for later in self._queue:
            if isinstance(later, PublishRun):
                later.fail_unanswered(error)
            elif later.error is None:
                later.error = error
        if reload_topic:
            self.topic.on_persistence_failure(error)

    def _block(self, error: RequestError) -> None:
        """The store refused an append (read-only): drop what is queued unanswered, close,
        and send CLOSE_PRODUCER; the client's re-creation is refused until the store is
        writable (broker/topics/publish_refusals.py), on which it fails the pending sends.
        A SEND_ERROR instead would make the client close the whole connection."""
        queue = self._queue
        dropped = self.pending
        dropped_bytes = 0
        for item in queue:
            dropped_bytes += (sum(item.sizes[item.answered:]) if isinstance(item, PublishRun)
                              else item.buffered)
        queue.clear()
        self._watched = None
        self._failed = error
        self.blocked = True
        self.topic.awaiting_durable.pop(self, None)
        if dropped:
            self.connection.publish_finished(dropped, dropped_bytes)
            self.topic.publish_refused(REASON_DISK, dropped)
        if self._drained is not None:
            self._drained.set()
        if not self.closed:
            log.warning("storage is read-only: closing producer %s (%d sends refused)",
                        self.name, dropped)
            self.close()
            self.connection.write(C.encode_close_producer(self.producer_id, 0))

    # ------------------------------------------------------------------ lifecycle

    async def close_gracefully(self, timeout: float = 30.0) -> None:
        """Client CLOSE_PRODUCER: answer what is in flight, then detach."""
        if self._queue:
            self._drained = asyncio.Event()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._drained.wait(), timeout)
        self.close()

    def close(self) -> None:
        """Detach from the topic (connection lost, topic deleted, fenced)."""
        if self.closed:
            return
        self.closed = True
        self.topic.remove_producer(self)

    def disconnect(self) -> None:
        """Broker-initiated close: tell the client (it will look up and reconnect)."""
        self.connection.producer_detached(self)
        self.close()
        self.connection.write(C.encode_close_producer(self.producer_id, 0))

    def stats(self, msg_rate_in: float = 0.0, msg_throughput_in: float = 0.0) -> dict[str, Any]:
        """Pulsar's PublisherStats shape."""
        avg = self.bytes_in_counter / self.msg_in_counter if self.msg_in_counter else 0.0
        return {
            "accessMode": self.access_mode_name,
            "msgRateIn": msg_rate_in,
            "msgThroughputIn": msg_throughput_in,
            "averageMsgSize": avg,
            "chunkedMessageRate": 0.0,
            "producerId": self.producer_id,
            "supportsPartialProducer": False,
            "producerName": self.name,
            "address": self.connection.remote_address,
            "connectedSince": iso_ms(self.connected_since_ms),
            "clientVersion": self.connection.client_version,
            "metadata": dict(self.metadata),
            "msgInCounter": self.msg_in_counter,
            "bytesInCounter": self.bytes_in_counter,
        }

