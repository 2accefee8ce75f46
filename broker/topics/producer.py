"""Producers: PRODUCER -> PRODUCER_SUCCESS, and the SEND -> SEND_RECEIPT pipeline.

Theory of operation
-------------------
A :class:`Producer` belongs to one connection and one topic. Each SEND is put in the
producer's FIFO ``_queue`` *before* anything can fail, so every answer leaves in the order
the sends arrived (the C++ client closes the connection when a receipt overtakes an earlier
send). The queue's records are defined in :mod:`broker.topics.publish_records`:

1. The one SEND entry (:meth:`Producer.on_sends`) takes all SENDs of one socket read for this
   producer at once, hand-parsed by the decoder (:class:`protocol.send_path.SendFrame`, no
   protobuf object). Each is checked (the producer has not failed, the CRC verdict, not a
   re-send, :meth:`broker.topics.topic.Topic.check_publish`: metadata, the delayed-delivery
   publish guard of PIP-315/437; a plain message -- the metadata scan's
   :data:`protocol.metadata_scan.SINGLE` (:func:`protocol.send_accel.plain_metadata`), no larger than
   the plain bound of :meth:`broker.topics.topic.Topic.send_bounds`, read once per run -- is
   what that check would return unchanged, and is taken on the scan alone; so is one delayed
   or keyed message that :func:`broker.topics.publish_bounds.single_message` passes, within
   the single bound); the consecutive accepted
   ones form ONE :class:`PublishRun` (five ints per SEND in parallel lists; no object, future,
   task or closure per SEND), appended to the ledger as one run with one completion.
2. A SEND the hot loop does not take ends the run before it: a re-send stored again, one
   out of order or that the hot checks decline is a run of one (the per-entry path); a SEND
   refused before any append (SEND_ERROR ChecksumError for a bad CRC: the one error the
   C++ client fails a single message for; the connection stays; a max-delay rejection takes
   the code its client needs, :mod:`broker.delayed.rejection`) and a duplicate answered with
   its original's append are one :class:`Pending` each.
3. One completion channel: the ledger tells each run once its entries are durable (or
   failed), and the run tells its producer (:meth:`Producer.run_durable`), which answers
   from that very call. The drain (:meth:`Producer._drain`,
   :class:`broker.topics.publish_answers.Answers`) answers the head records whose outcome is
   known, in order, with ONE write: a run range by range as the ledger reports it (a rollover
   may split it), receipts encoded in bulk (echoing ``sequence_id`` and
   ``highest_sequence_id``, as Pulsar does for batches), a SEND_ERROR where a record failed.
   A failed append fails every record queued behind it as well, so nothing is acknowledged
   out of order. A duplicate at the head waits for its original's future (a done-callback);
   a re-send that must wait for a run's item gets a future made on demand
   (:meth:`Producer.pending_append`).

Lifecycle: one :class:`ProducerState` (ACTIVE, FAILED, BLOCKING, BLOCKED, CLOSED).

Every SEND counts towards the connection's pending-publish limit (back-pressure) from
step 1 until its answer is written.

Re-sends: a SEND that starts right after the last one appended under the producer's name
(``sequence_id == seq_state.next_seq``) is new, in order: the hot path costs that one
comparison. So is one whose key (the highest sequence id it carries) is above every key
appended. Anything else -- a re-send, a gap filled late, a batch behind out-of-order delayed
messages -- goes to :mod:`broker.topics.dedup`, which decides how it is answered (the
original message id, the append still in flight, a new append, or -1:-1). A durable append
is recorded in ``seq_state`` when its receipt is written.

Access modes: Shared (any number), Exclusive (refused with ProducerBusy while another
producer is attached, or while an exclusive one is), ExclusiveWithFencing (closes the
others), WaitForExclusive (queued: PRODUCER_SUCCESS with ``producer_ready=false`` at once,
then a second one with ``producer_ready=true`` when the topic's producers are gone, as
Pulsar does; the client waits without a timeout meanwhile).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from broker.delayed.rejection import DelayRejection
from broker.metrics.rates import iso_ms
from broker.topics.dedup import SequenceState
from broker.topics.publish_answers import Answers, lone_receipt
from broker.topics.publish_bounds import SendBounds, single_message
from broker.topics.publish_rate import PublishRateLimiter
from broker.topics.publish_records import Pending, PublishRun, answerable
from broker.topics.publish_refusals import REASON_DISK
from broker.topics.storage_errors import StorageFailure
from protocol import commands as C
from protocol import pulsar_pb as pb
from protocol.entry_shape import check_send_messages
from protocol.errors import ChecksumError, RequestError
from protocol.send_accel import peek_dispatch, plain_metadata
from protocol.send_path import SendFrame
from storage.errors import EntryTooLargeError
from storage.positions import Position
from storage.segment_file import DurableSink
from storage.segments import MAX_RECORD_BYTES

__all__ = ["ACCESS_MODE_NAMES", "Producer", "ProducerRequest", "ProducerState",
           "ProducerTransport", "PublishTarget"]

log = logging.getLogger("horae.producer")

ACCESS_MODE_NAMES: dict[int, str] = {
    pb.Shared: "Shared",
    pb.Exclusive: "Exclusive",
    pb.WaitForExclusive: "WaitForExclusive",
    pb.ExclusiveWithFencing: "ExclusiveWithFencing",
}


class ProducerState(enum.Enum):
    """Where a producer stands; every lifecycle check reads this one field.

    ACTIVE -> FAILED (an append failed, or a max-delay rejection made the client stop
    listening to the producer: every later SEND fails with that error) ->
    BLOCKING (the store refused an append because it is read-only: the drain answers what
    precedes that record, then blocks) -> BLOCKED (closed by the broker, CLOSE_PRODUCER sent;
    it stays registered on its connection until the client re-creates or closes it).
    Any state but BLOCKED -> CLOSED (detached: connection lost, CLOSE_PRODUCER, topic closed,
    a queued WaitForExclusive producer that will never be promoted)."""

    ACTIVE = "active"
    FAILED = "failed"
    BLOCKING = "blocking"
    BLOCKED = "blocked"
    CLOSED = "closed"


_DETACHED = frozenset({ProducerState.CLOSED, ProducerState.BLOCKED})
_BLOCKING = ProducerState.BLOCKING


@dataclass(frozen=True, slots=True)
class ProducerRequest:
    """A PRODUCER command as the topic needs it to attach the producer
    (:meth:`broker.topics.topic.Topic.attach_producer`)."""

    producer_id: int
    request_id: int
    name: str
    user_provided_name: bool
    access_mode: int
    metadata: dict[str, str]
    epoch: int
    topic_epoch: int | None
    schema_version: bytes | None


class ProducerTransport(Protocol):
    """What a producer may ask of the connection it was created on
    (:class:`broker.net.producer_side.ProducerSide`, which owns the connection's producer
    registry)."""

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

    def hold_reading_for(self, seconds: float) -> None:
        """Stop reading the connection for *seconds* (the topic's publish rate is exceeded)."""


class ResendPolicy(Protocol):
    """How a topic answers a re-send (:meth:`broker.topics.dedup.MessageDeduplication.resend`;
    a non-persistent topic publishes it again)."""

    def resend(self, state: SequenceState, entry: bytes, sequence_id: int,
               key: int) -> tuple[asyncio.Future[Position] | None, int | None]: ...


class ProducerRegistry(Protocol):
    """The topic's attached producers (:class:`broker.topics.access_modes.ProducerAdmission`)."""

    def remove(self, producer: Producer) -> None: ...


class PublishTarget(Protocol):
    """What a producer may ask of its topic (:class:`broker.topics.topic.Topic`,
    :class:`broker.topics.nonpersistent.NonPersistentTopic`)."""

    @property
    def dedup(self) -> ResendPolicy: ...

    publish_latency_buckets: list[int]
    publish_rate: PublishRateLimiter

    @property
    def producers(self) -> dict[str, Producer]: ...

    def check_publish(self, entry: bytes) -> tuple[bytes, int, bool]: ...

    def send_bounds(self) -> SendBounds:
        """What may be taken without :meth:`check_publish` right now
        (:mod:`broker.topics.publish_bounds`)."""
        ...

    def append_run(self, entries: list[bytes], sink: DurableSink,
                   messages: Sequence[int]) -> None: ...

    def record_published(self, messages: int, size: int, entries: int,
                         latency_sum_ms: float) -> None: ...

    def on_persistence_failure(self, exc: object) -> None: ...

    def publish_refused(self, reason: str, refused: int) -> None: ...

    @property
    def admission(self) -> ProducerRegistry:
        """The attached producers (this one leaves them when it closes)."""
        ...


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
        self.encrypted = False   # the PRODUCER command's ``encrypted`` (set by its handler)
        self.connected_since_ms = int(time.time() * 1000)
        self.msg_in_counter = 0
        self.bytes_in_counter = 0
        self.state = ProducerState.ACTIVE
        # What every new SEND is refused with (FAILED, BLOCKING, BLOCKED; kept once CLOSED).
        self._error: RequestError | None = None
        self._sending = False  # inside on_sends: runs reported at once are drained at its end
        self._queue: deque[Pending | PublishRun] = deque()
        self._drained: asyncio.Event | None = None
        self._watched: asyncio.Future[Position] | None = None
        self._loop = connection.loop
        self._write = connection.write
        self._on_done = self._drain_cb  # bound once: one allocation less per SEND
        # Replaced by the topic's MessageDeduplication.attach (broker.net.producers) before any SEND.
        self.seq_state = SequenceState(name)
        # How this client must be told of a max-delay rejection (broker.delayed.rejection).
        self._rejection = DelayRejection(connection.client_version)

    @property
    def closed(self) -> bool:
        """Detached from its topic (CLOSED or BLOCKED)."""
        return self.state in _DETACHED

    @property
    def blocked(self) -> bool:
        return self.state is ProducerState.BLOCKED

    @property
    def blocking(self) -> RequestError | None:
        """The read-only refusal the drain stops at (BLOCKING; BLOCKED: SENDs still on the
        wire when CLOSE_PRODUCER left are dropped there), else None."""
        state = self.state
        return self._error if state is _BLOCKING or state is ProducerState.BLOCKED else None

    @property
    def access_mode_name(self) -> str:
        return str(ACCESS_MODE_NAMES.get(self.access_mode, str(self.access_mode)))

    @property
    def pending(self) -> int:
        """SENDs not answered yet."""
        return sum(len(item) - item.answered if isinstance(item, PublishRun) else 1
                   for item in self._queue)

    # ------------------------------------------------------------------ hot path

    def on_sends(self, sends: list[SendFrame]) -> None:
        """The SENDs of one socket read for this producer, in order (the one SEND entry of a
        producer): each is checked, the accepted ones appended as runs (one completion each; a
        SEND taking another path ends the run before it, so the queue stays in send order).
        Runs reported meanwhile (a non-persistent topic reports at once) are answered after
        the SENDs are counted as started."""
        self._sending = True
        try:
            nbytes = self._take(sends)
        finally:
            self._sending = False
        self.connection.publish_started(len(sends), nbytes)
        limiter = self.topic.publish_rate
        if limiter.active:
            hold_s = limiter.record(sum(s.num_messages for s in sends), nbytes, self._loop.time())
            if hold_s > 0:   # Pulsar throttles every producer of the topic, not just this one
                for connection in {id(p.connection): p.connection
                                   for p in self.topic.producers.values()}.values():
                    connection.hold_reading_for(hold_s)
                self.connection.hold_reading_for(hold_s)   # attached or not, it went over
        self._answer_head()

    def _take(self, sends: list[SendFrame]) -> int:
        """Queue and append *sends* (:meth:`on_sends`); returns the bytes of their entries."""
        started = self._loop.time()
        topic = self.topic
        check = topic.check_publish
        # Entries up to the plain bound whose metadata the scan reads as a plain message pass
        # check_publish unchanged; up to the single bound, single_message tells of one message
        # with a deliver time or a key (-1: none does; read again after anything but the run).
        send_bounds = topic.send_bounds
        bounds = send_bounds()
        bound, single_bound = min(bounds.plain, MAX_RECORD_BYTES), bounds.single
        plain = plain_metadata
        single = single_message
        state = self.seq_state
        enqueue = self._queue.append
        run = PublishRun(self, started)
        seqs, highests, keys, messages, sizes = run.appenders()
        datas: list[bytes] = []  # the run's entries as they will be stored
        add_data = datas.append
        nbytes = 0
        for _, seq, count, highest, entry, checksum_valid, _ in sends:
            size = len(entry)
            nbytes += size
            if size <= bound and seq == state.next_seq and count == 1 and highest <= seq \
                    and checksum_valid and self._error is None \
                    and (plain(entry) or (size <= single_bound and single(entry, bounds))):
                # The usual SEND, one message (plain, or delayed or keyed and noted by
                # single_message): check_publish would give (entry, 1, False).
                state.next_seq = seq + 1
                keys(seq)
                seqs(seq)
                highests(highest)
                messages(1)
                sizes(size)
                add_data(entry)
                continue
            key = highest if highest > seq else seq
            if count > 1 and seq + count - 1 > key:  # a C++ batch: ids seq .. seq+count-1
                key = seq + count - 1
            if self._error is None and checksum_valid and seq == state.next_seq \
                    and size <= MAX_RECORD_BYTES:
                try:
                    stored, in_entry, partial = check(entry)
                    if count != 1 or in_entry != 1:
                        check_send_messages(count, in_entry)
                except RequestError as exc:
                    item: Pending | None = Pending(seq, highest, key, started, None,
                                                   self._refused(exc), 0, 0)
                else:
                    if partial:  # a chunk but the last of its message is no dedup key
                        keys(None)
                    else:
                        state.next_seq = key + 1
                        keys(key)
                    seqs(seq)
                    highests(highest)
                    messages(in_entry)
                    sizes(size)
                    add_data(stored)
                    continue
            else:
                item = None  # decided once the run before it is queued (a re-send of one
                #              of its sends is answered with that append)
            if datas:  # the run so far first: ledger order = queue order = send order
                self._append_run(run, datas)
                run = PublishRun(self, started)
                seqs, highests, keys, messages, sizes = run.appenders()
                datas = []
                add_data = datas.append
            if item is None:
                self._one_send(entry, seq, highest, key, checksum_valid, started, count)
            else:
                item.buffered = size
                enqueue(item)
            # an append or a refusal may have changed the topic
            bounds = send_bounds()
            bound, single_bound = min(bounds.plain, MAX_RECORD_BYTES), bounds.single
        if datas:
            self._append_run(run, datas)
        return nbytes

    def _one_send(self, entry: bytes, seq: int, highest: int, key: int,
                  checksum_valid: bool, started: float, num_messages: int) -> None:
        """A SEND the run path does not take (the producer failed, a bad checksum or no
        payload, not in order, an entry storage refuses): queued as a run of one, as a
        duplicate answered with its original's append, or refused.
        *num_messages* is the SEND's (checked against the entry's)."""
        size = len(entry)
        try:
            if self._error is not None:
                raise self._error
            if not checksum_valid:
                raise ChecksumError("Checksum failed on the broker" if entry
                                    else "SEND without a payload")
            if num_messages != 1:  # a batch's size: no more than the entry holds
                check_send_messages(num_messages, peek_dispatch(entry)[0])
            resend = key <= self.seq_state.pushed
            record_key: int | None = key
            if resend:
                original, record_key = self.topic.dedup.resend(self.seq_state, entry, seq, key)
                if original is not None:
                    dup = Pending(seq, highest, key, started, original, None, 0, 0, dup=True)
                    dup.buffered = size
                    self._queue.append(dup)
                    return
            stored, messages, partial = self.topic.check_publish(entry)
        except RequestError as exc:
            refused = Pending(seq, highest, key, started, None, self._refused(exc), 0, 0)
            refused.buffered = size
            self._queue.append(refused)
            return
        if not resend:
            if partial:
                record_key = None
            else:
                self.seq_state.pushed = key
        run = PublishRun(self, started)
        run.add(seq, highest, record_key, messages, size)
        if len(stored) > MAX_RECORD_BYTES:  # failed as the ledger fails it: no append
            self._queue.append(run)
            run.entries_failed(1, EntryTooLargeError(
                f"entry of {len(stored)} bytes > {MAX_RECORD_BYTES}"))
            return
        self._append_run(run, [stored])

    def _refused(self, error: RequestError) -> RequestError:
        """The answer to a SEND refused with *error* (a max-delay rejection takes the code its
        client needs). A client that stops listening to the producer on it (the Go client)
        gets every later send refused as well: FAILED, nothing stored it would not hear of."""
        answered = self._rejection.answer(error)
        later = self._rejection.refuse_after(answered)
        if later is not None and self.state is ProducerState.ACTIVE:
            self.state = ProducerState.FAILED
            self._error = later
        return answered

    def _append_run(self, run: PublishRun, datas: list[bytes]) -> None:
        """Queue *run* and append its entries (*datas*) to the ledger."""
        self._queue.append(run)
        try:
            self.topic.append_run(datas, run, run.messages)
        except RequestError as exc:  # the topic answered for the ledger: none was appended
            run.refuse(exc)

    def pending_append(self, sequence_id: int, key: int) -> asyncio.Future[Position] | None:
        """The future of a queued, not failed, send ``[sequence_id, key]`` (a re-send on a
        later incarnation of this producer is answered with it)."""
        for item in self._queue:
            if isinstance(item, PublishRun):
                fut = item.waiter(sequence_id, key, self._loop)
                if fut is not None:
                    return fut
            elif item.key == key and item.sequence_id == sequence_id and item.error is None \
                    and item.future is not None:
                return item.future
        return None

    # -- RunOwner (broker.topics.publish_records) ----------------------------------------------

    def run_durable(self) -> None:
        """The ledger reported entries of a run durable: answer them now, from that very call
        (runs of one ledger are reported in append order, so every record ahead of them was
        reported first). A detached producer answers nothing more."""
        if not self._sending and self.state not in _DETACHED:
            self._answer_head()

    def run_failed(self, failure: StorageFailure, first_failure: bool) -> None:
        if failure.block_producer:  # read-only store: the drain blocks the producer there
            if self.state is ProducerState.ACTIVE or self.state is ProducerState.FAILED:
                self.state = ProducerState.BLOCKING
                self._error = failure.error
        elif first_failure:
            self.fail_behind(failure.error, reload_topic=failure.reload_topic)
        if not self._sending:
            self._answer_head()

    def drain_finished(self) -> None:
        """Answer the sends whose appends are durable now, detached or not (the dedup
        snapshot wants every durable entry reflected in the sequence state)."""
        queue = self._queue
        if queue and answerable(queue[0]):
            self._drain()

    def _answer_head(self) -> None:
        """Answer what can be answered. A run at the head is answered when the ledger reports
        it (:meth:`run_durable`); a duplicate at the head waits for its original's future."""
        queue = self._queue
        if not queue:
            return
        head = queue[0]
        if answerable(head):
            self._drain()
        elif type(head) is Pending:
            self._watch(head)

    def _watch(self, head: Pending) -> None:
        """Drain when the head duplicate's original is done (a record without a future
        carries an error and is answerable at once)."""
        fut = head.future
        assert fut is not None
        if fut is not self._watched:
            self._watched = fut
            fut.add_done_callback(self._on_done)

    def _drain_cb(self, fut: asyncio.Future[Position]) -> None:
        if fut is self._watched:  # else a newer head is watched: keep its callback's record
            self._watched = None
        queue = self._queue
        if queue and answerable(queue[0]):
            self._drain()

    def _drain(self) -> None:
        """Answer the records at the head of the queue whose outcome is known, in order, with
        one write (:class:`broker.topics.publish_answers.Answers`)."""
        topic = self.topic
        queue = self._queue
        if len(queue) == 1:
            run = queue[0]
            if type(run) is PublishRun and run.done == 1 and run.answered == 0 \
                    and run.errors is None and len(run.seqs) == 1:
                # One send, durable, nothing behind it (a lone publisher): answered as the
                # loop below answers it, without a drain's lists.
                data, latency_ms = lone_receipt(self, run, self._loop.time(),
                                                topic.publish_latency_buckets)
                run.answered = 1
                queue.popleft()
                self._write(data)
                size = run.sizes[0]
                messages = run.messages[0]
                self.connection.publish_finished(1, size)
                self.msg_in_counter += messages
                self.bytes_in_counter += size
                topic.record_published(messages, size, 1, latency_ms)
                if self._drained is not None:
                    self._drained.set()
                return
        answers = Answers(self, self._loop.time(), topic.publish_latency_buckets)
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
            if type(head) is Pending:
                self._watch(head)
        elif self._drained is not None:
            self._drained.set()

    def fail_behind(self, error: RequestError, *, reload_topic: bool) -> None:
        """A failed append fails every later send of this producer (FIFO answers)."""
        if self.state is ProducerState.ACTIVE:
            self.state = ProducerState.FAILED
        if self._error is None or self.state is ProducerState.FAILED:
            self._error = error
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
        was_attached = self.state not in _DETACHED
        self.state = ProducerState.BLOCKED
        self._error = error
        if dropped:
            self.connection.publish_finished(dropped, dropped_bytes)
            self.topic.publish_refused(REASON_DISK, dropped)
        if self._drained is not None:
            self._drained.set()
        if was_attached:
            log.warning("storage is read-only: closing producer %s (%d sends refused)",
                        self.name, dropped)
            self.topic.admission.remove(self)
            self.connection.write(C.encode_close_producer(self.producer_id, 0))

    # ------------------------------------------------------------------ lifecycle

    async def close_gracefully(self, timeout: float = 30.0) -> None:
        """Client CLOSE_PRODUCER: answer what is in flight, then detach."""
        await self.answered(timeout)
        self.close()

    async def answered(self, timeout: float) -> None:
        """Return once every SEND received so far is answered (or *timeout* seconds passed),
        woken by the answer itself (no polling)."""
        if not self._queue:
            return
        if self._drained is None or self._drained.is_set():
            self._drained = asyncio.Event()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._drained.wait(), timeout)

    def close(self) -> None:
        """Detach from the topic (connection lost, topic deleted, fenced)."""
        if self.state in _DETACHED:
            return
        self.state = ProducerState.CLOSED
        self.topic.admission.remove(self)

    def abandon(self) -> None:
        """A queued WaitForExclusive producer that will never be promoted: CLOSED, never
        attached."""
        if self.state not in _DETACHED:
            self.state = ProducerState.CLOSED

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

