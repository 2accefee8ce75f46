"""Producers: PRODUCER -> PRODUCER_SUCCESS, and the SEND -> SEND_RECEIPT pipeline.

Theory of operation
-------------------
A :class:`Producer` belongs to one connection and one topic. Each SEND becomes a
:class:`_Pending` record appended to the producer's FIFO ``_queue`` *before* anything can
fail, so every answer leaves in the order the sends arrived (the C++ client closes the
connection when a receipt overtakes an earlier send):

1. The CRC verdict of the frame decoder is checked first: a mismatch is SEND_ERROR
   ChecksumError (the one error the client fails a single message for; the connection stays).
2. :meth:`broker.topic.Topic.publish` parses the metadata, applies the delayed-delivery
   publish guard (PIP-315/437) and appends the entry to the managed ledger, which resolves
   the returned future once the entry is fsynced (group commit).
3. When the record at the head of the queue is complete (one done-callback, on the head's
   future only, per group commit), its SEND_RECEIPT (echoing
   ``sequence_id`` and ``highest_sequence_id``, as Pulsar does for batches) or SEND_ERROR is
   written, and the next record is looked at. A failed append fails every record queued
   behind it as well, so nothing is acknowledged out of order.

Every record counts towards the connection's pending-publish limit (back-pressure) from
step 1 until its answer is written.

Re-sends (deduplication of what the client sends again)
-------------------------------------------------------
The C++/Python client closes the connection on any SEND_ERROR but ChecksumError and, once the
producer is re-created, re-sends its whole pending queue. Sends pipelined behind a rejected
one were already stored; their receipts died with the connection. So, per topic and producer
name (the client re-uses the name the broker assigned), a :class:`SequenceState` keeps the
highest sequence id appended (``pushed``) and persisted (``persisted``), and the message ids of
the last :data:`RECEIPT_WINDOW` persisted entries. The key of a SEND is the highest sequence
id it carries (:func:`send_key`: ``highest_sequence_id`` if set, else ``sequence_id +
num_messages - 1``, batches of the C++ client). The hot path costs one comparison:
``key > pushed`` is a new message. Otherwise (:meth:`Producer._resend`):

* persisted and still in the window -> SEND_RECEIPT with the original message id;
* still in flight on an earlier incarnation of the producer -> answered with that append;
* at or above ``floor`` (every persisted key >= floor is in the window) -> it was never stored
  (rejected by the publish guard, failed): published like a new message;
* below ``floor`` -> the publish guard still runs (a message it rejects is rejected again),
  then Pulsar's deduplication answer: a receipt with message id -1:-1 (the C++ client
  completes the send with that id; ``ProducerImpl::ackReceived`` only matches sequence ids).

PRODUCER_SUCCESS carries ``last_sequence_id`` = the highest persisted id of that name, as
Pulsar does with deduplication; a client that never got a receipt continues its sequence
from there (its pending re-sends keep their ids).

Persistence (:class:`Deduplicator`): the topic's cursor ``pulsar.dedup`` (Pulsar's name) holds
one property per producer name (its highest persisted id) and a mark-delete position P such
that the properties cover every entry <= P. A snapshot is taken once a second (the service's
housekeeping tick) and on topic close; storage persists cursor state atomically at its
rate limit. On load the state is rebuilt from the properties plus a replay (metadata only)
of every entry after P -- so a crash loses nothing; the replay is about two seconds of ingest
at most -- and of the last :data:`TAIL_REPLAY_ENTRIES` entries, for the message ids of the
receipt windows. The cursor also keeps trimming from deleting entries the replay needs.
Names idle for :data:`PRODUCER_INACTIVITY_S` are forgotten (Pulsar's
brokerDeduplicationProducerInactivityTimeoutMinutes, 6 h).

Chunks other than the last of a message share its sequence id: they are appended without
touching the state (a re-sent one is stored again unless its message is already complete);
the last chunk is deduplicated like any message.

Access modes: Shared (any number), Exclusive (refused with ProducerBusy while another
producer is attached, or while an exclusive one is), ExclusiveWithFencing (closes the
others), WaitForExclusive (queued: PRODUCER_SUCCESS with ``producer_ready=false`` at once,
then a second one with ``producer_ready=true`` when the topic's producers are gone, as
Pulsar does; the client waits without a timeout meanwhile).
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from protocol import commands as C
from protocol import pulsar_pb as pb
from protocol.errors import (
    ChecksumError,
    PersistenceError,
    ProducerBusyError,
    RequestError,
    ServiceNotReadyError,
)
from storage.positions import Position

if TYPE_CHECKING:
    from broker.connection import ServerConnection
    from broker.topic import Topic
    from protocol.frames import Frame

__all__ = ["DEDUP_CURSOR", "PUBLISH_LATENCY_BUCKETS_MS", "Deduplicator", "Producer",
           "SequenceState", "create_producer"]

log = logging.getLogger("horae.producer")

#: The cursor holding the per-producer-name sequence snapshot (Pulsar's name for it).
DEDUP_CURSOR = "pulsar.dedup"
#: Message ids remembered per producer name, to answer re-sends with their original ids.
RECEIPT_WINDOW = 256
#: Entries replayed from the ledger's tail on load, for those ids (bounded in bytes too).
TAIL_REPLAY_ENTRIES = 1000
TAIL_REPLAY_BYTES = 4 * 1024 * 1024
#: A producer name not attached for this long is forgotten (Pulsar: 360 minutes)...
PRODUCER_INACTIVITY_S = 6 * 3600.0
#: ... and its receipt window is dropped after this long (the highest id is kept).
WINDOW_IDLE_S = 600.0
_NO_FLOOR = -(1 << 64)  # below every key: nothing was stored before the window
#: Pulsar's deduplication answer for a re-send older than what is remembered: -1:-1
#: (uint64 on the wire).
_UNKNOWN_ID = (1 << 64) - 1

#: Upper bounds (ms) of the publish-latency histogram: Pulsar's pulsar_storage_write_latency
#: buckets (0.5 ms ... 1 s); one more bucket counts everything slower.
PUBLISH_LATENCY_BUCKETS_MS = (0.5, 1.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 1000.0)

ACCESS_MODE_NAMES: dict[int, str] = {
    pb.Shared: "Shared",
    pb.Exclusive: "Exclusive",
    pb.WaitForExclusive: "WaitForExclusive",
    pb.ExclusiveWithFencing: "ExclusiveWithFencing",
}


class _Pending:
    """One SEND awaiting its answer (``dup``: a re-send answered without a new append)."""

    __slots__ = ("dup", "error", "future", "highest_sequence_id", "key", "messages",
                 "sequence_id", "size", "started")

    def __init__(self, sequence_id: int, highest_sequence_id: int, key: int | None,
                 started: float,
                 future: asyncio.Future[Any] | None, error: RequestError | None,
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


class SequenceState:
    """What one producer name has appended and persisted on one topic (module docstring)."""

    __slots__ = ("floor", "idle_since", "name", "persisted", "producers", "pushed",
                 "snapshotted", "window")

    def __init__(self, name: str, persisted: int = -1, *, floor: int = _NO_FLOOR,
                 snapshotted: int | None = None) -> None:
        self.name = name
        self.pushed = persisted          # highest key appended (durable or in flight)
        self.persisted = persisted       # highest key durable (its receipt was produced)
        self.floor = floor               # every persisted key >= floor is in the window
        self.window: deque[tuple[int, int, int]] = deque()  # (key, ledger, entry), ascending
        self.producers: list[Producer] = []  # incarnations that may have sends in flight
        self.snapshotted = snapshotted   # persisted value in the dedup cursor
        self.idle_since = 0.0

    def record(self, key: int, ledger_id: int, entry_id: int) -> None:
        """A send with this key is durable at (ledger_id, entry_id)."""
        window = self.window
        if key > self.persisted:
            self.persisted = key
        if not window or key > window[-1][0]:
            window.append((key, ledger_id, entry_id))
        else:  # a gap filled late (re-sent after a rejection): keep the window sorted
            i = bisect.bisect_left(window, key, key=_first)
            if i < len(window) and window[i][0] == key:
                return
            window.insert(i, (key, ledger_id, entry_id))
        if len(window) > RECEIPT_WINDOW:
            evicted = window.popleft()[0]
            if evicted >= self.floor:
                self.floor = evicted + 1

    def stored_at(self, key: int) -> tuple[int, int] | None:
        window = self.window
        i = bisect.bisect_left(window, key, key=_first)
        if i < len(window) and window[i][0] == key:
            return window[i][1], window[i][2]
        return None

    def in_flight(self, key: int) -> asyncio.Future[Any] | None:
        """The pending append of *key* on any incarnation of this producer, if any."""
        for producer in self.producers:
            for item in producer._queue:
                if item.key == key and item.future is not None and item.error is None:
                    return item.future
        return None

    def drop_window(self) -> None:
        if self.window:
            self.floor = max(self.floor, self.window[-1][0] + 1)
            self.window.clear()


def _first(item: tuple[int, int, int]) -> int:
    return item[0]


def is_partial_chunk(entry: bytes) -> bool:
    """True for a chunk other than the last of its message (metadata-only parse; rare path)."""
    md = _metadata(entry)
    return md is not None and md.HasField("num_chunks_from_msg") and \
        md.chunk_id < md.num_chunks_from_msg - 1


def _metadata(entry: bytes) -> pb.MessageMetadata | None:
    if len(entry) < 4:
        return None
    size = int.from_bytes(entry[:4], "big")
    try:
        md: pb.MessageMetadata = pb.MessageMetadata.FromString(entry[4:4 + size])
    except Exception:
        return None
    return md


def send_key(sequence_id: int, highest_sequence_id: int, messages: int = 1) -> int:
    """The deduplication key of a send: the highest sequence id it carries (the Java client
    sets highest_sequence_id on batches; the C++ client numbers a batch's messages from
    sequence_id on), as :meth:`Producer.on_send` computes it."""
    key = highest_sequence_id if highest_sequence_id > sequence_id else sequence_id
    return max(key, sequence_id + messages - 1)


class Producer:
    """A producer attached to *topic* through *connection*."""

    def __init__(self, connection: ServerConnection, topic: Topic, producer_id: int,
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
        self._queue: deque[_Pending] = deque()
        self._failed: RequestError | None = None
        self._drained: asyncio.Event | None = None
        self._watched: asyncio.Future[Any] | None = None
        self._loop = connection.loop
        self._write = connection.write
        self._on_done = self._drain_cb  # bound once: one allocation less per SEND
        # Replaced by the topic's Deduplicator.attach (create_producer) before any SEND.
        self.seq_state = SequenceState(name)

    @property
    def access_mode_name(self) -> str:
        return str(ACCESS_MODE_NAMES.get(self.access_mode, str(self.access_mode)))

    @property
    def pending(self) -> int:
        return len(self._queue)

    # ------------------------------------------------------------------ hot path

    def on_send(self, frame: Frame, send: pb.CommandSend) -> None:
        """One SEND (*send* is ``frame.command.send``, already looked up by the caller)."""
        started = self._loop.time()
        entry = frame.entry
        seq = send.sequence_id
        highest = send.highest_sequence_id
        key = highest if highest > seq else seq
        count = send.num_messages
        if count > 1 and seq + count - 1 > key:  # a C++ batch: ids seq .. seq+count-1
            key = seq + count - 1
        state = self.seq_state
        try:
            if self._failed is not None:
                raise self._failed
            if entry is None:
                raise ChecksumError("SEND without a payload")
            if frame.checksum_valid is False:
                raise ChecksumError("Checksum failed on the broker")
            if key <= state.pushed:  # a re-send (or a sequence going backwards): rare
                item = self._resend(entry, seq, highest, key, started)
            else:
                fut, messages, partial = self.topic.publish(entry)
                if partial:  # not the last chunk of its message: not a deduplication key
                    item = _Pending(seq, highest, None, started, fut, None, messages,
                                    len(entry))
                else:
                    state.pushed = key
                    item = _Pending(seq, highest, key, started, fut, None, messages,
                                    len(entry))
        except RequestError as exc:
            item = _Pending(seq, highest, key, started, None, exc, 0, 0)
        queue = self._queue
        queue.append(item)
        self.connection.publish_started()
        if len(queue) == 1:
            self._watch_head()

    def _resend(self, entry: bytes, seq: int, highest: int, key: int,
                started: float) -> _Pending:
        """A SEND whose key is not above the highest appended one (module docstring)."""
        state = self.seq_state
        stored = state.stored_at(key)
        if stored is not None:
            return _Pending(seq, highest, key, started, self._resolved(*stored), None, 0, 0,
                            dup=True)
        if is_partial_chunk(entry):
            # A chunk before the last of a message not stored yet: stored again (its
            # message completes with the last chunk, which is deduplicated).
            fut, messages, _ = self.topic.publish(entry)
            return _Pending(seq, highest, None, started, fut, None, messages, len(entry))
        original = state.in_flight(key)
        if original is not None:
            return _Pending(seq, highest, key, started, original, None, 0, 0, dup=True)
        if key >= state.floor:  # never stored (rejected or failed before): a new message
            fut, messages, _ = self.topic.publish(entry)
            return _Pending(seq, highest, key, started, fut, None, messages, len(entry))
        # Older than what is remembered. The guard still answers what it rejects (a message
        # it rejected before was never stored); anything else is a duplicate.
        self.topic.check_publish(entry)
        return _Pending(seq, highest, key, started, self._resolved(_UNKNOWN_ID, _UNKNOWN_ID),
                        None, 0, 0, dup=True)

    def _resolved(self, ledger_id: int, entry_id: int) -> asyncio.Future[Any]:
        fut: asyncio.Future[Any] = self._loop.create_future()
        fut.set_result(Position(ledger_id, entry_id))
        return fut

    def drain_finished(self) -> None:
        """Answer the sends whose appends are durable now (the snapshot wants every durable
        entry reflected in the sequence state; the done-callbacks may not have run yet)."""
        queue = self._queue
        if queue and (queue[0].future is None or queue[0].future.done()):
            self._drain()

    def _watch_head(self) -> None:
        """Answer what can be answered; then wait on the head record's future only.

        Appends of one ledger resolve in order and a group commit resolves many at once, so
        one callback per group commit (not one per SEND) drains every finished record.
        """
        queue = self._queue
        if not queue:
            return
        fut = queue[0].future
        if fut is None or fut.done():
            self._drain()
        elif fut is not self._watched:
            self._watched = fut
            fut.add_done_callback(self._on_done)

    def _drain_cb(self, _fut: asyncio.Future[Any]) -> None:
        self._watched = None
        self._drain()

    def _drain(self) -> None:
        queue = self._queue
        topic = self.topic
        pid = self.producer_id
        out: list[bytes] = []
        emit = out.append
        encode_receipt = C.encode_send_receipt
        buckets = topic.publish_latency_buckets
        bounds = PUBLISH_LATENCY_BUCKETS_MS
        bucket_of = bisect.bisect_left
        now = self._loop.time()
        record = self.seq_state.record
        msgs = size = count = answered = 0
        latency_sum = 0.0
        while queue:
            item = queue[0]
            fut = item.future
            if fut is not None:
                if not fut.done():
                    break
                if item.error is None and (fut.cancelled() or fut.exception() is not None):
                    exc = None if fut.cancelled() else fut.exception()
                    item.error = PersistenceError(f"Failed to persist the message: {exc}")
                    self._fail_behind(item.error)
            queue.popleft()
            answered += 1
            if item.error is None:
                pos = fut.result()  # type: ignore[union-attr]
                emit(encode_receipt(pid, item.sequence_id, pos.ledger_id, pos.entry_id,
                                    item.highest_sequence_id))
                if item.dup:  # answered again, not appended again: not counted either
                    continue
                if item.key is not None:
                    record(item.key, pos.ledger_id, pos.entry_id)
                msgs += item.messages
                size += item.size
                count += 1
                latency_ms = (now - item.started) * 1000.0
                latency_sum += latency_ms
                buckets[bucket_of(bounds, latency_ms)] += 1
            else:
                emit(C.encode_send_error(pid, item.sequence_id, item.error.code,
                                         item.error.message))
        if answered:
            self._write(out[0] if answered == 1 else b"".join(out))
            self.connection.publish_finished(answered)
        if count:
            self.msg_in_counter += msgs
            self.bytes_in_counter += size
            topic.record_published(msgs, size, count, latency_sum)
        if queue:
            head = queue[0].future
            if head is not None and head is not self._watched:
                self._watched = head
                head.add_done_callback(self._on_done)
        elif self._drained is not None:
            self._drained.set()

    def _fail_behind(self, error: RequestError) -> None:
        """A failed append fails every later send of this producer (FIFO answers)."""
        self._failed = error
        for later in self._queue:
            if later.error is None:
                later.error = error
        self.topic.on_persistence_failure(error)

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
        self.connection.producers.pop(self.producer_id, None)
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
            "connectedSince": _iso(self.connected_since_ms),
            "clientVersion": self.connection.client_version,
            "metadata": dict(self.metadata),
            "msgInCounter": self.msg_in_counter,
            "bytesInCounter": self.bytes_in_counter,
        }


def _iso(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms / 1000)) + f".{ms % 1000:03d}Z"


async def create_producer(connection: ServerConnection, m: pb.CommandProducer) -> None:
    """Handle PRODUCER: load (or auto-create) the topic, attach, answer PRODUCER_SUCCESS."""
    from broker.topic_name import TopicName

    service = connection.service
    name = TopicName.parse(m.topic)
    topic = await service.get_topic(name.full, create=service.config.allow_auto_topic_creation)
    user_provided = m.HasField("producer_name") and m.producer_name != ""
    pname = m.producer_name if user_provided else service.generate_producer_name()
    access_mode = int(m.producer_access_mode) if m.HasField("producer_access_mode") else pb.Shared
    metadata = {kv.key: kv.value for kv in m.metadata}
    # The sequence state of this name must be recovered before PRODUCER_SUCCESS tells the
    # client where its sequence stands (and before its re-sends arrive).
    await topic.dedup.prepare()
    producer = Producer(connection, topic, int(m.producer_id), pname, access_mode,
                        user_provided, metadata, int(m.epoch))
    topic.dedup.attach(producer)
    try:
        topic.add_producer(producer)
    except ProducerBusyError:
        if access_mode != pb.WaitForExclusive:
            raise
        topic.queue_exclusive_waiter(producer, int(m.request_id))
        connection.waiting_producers[producer.producer_id] = producer
        connection.write(encode_producer_success(m.request_id, pname, ready=False))
        return
    if connection.is_closed:
        producer.close()
        return
    connection.producers[producer.producer_id] = producer
    connection.write(C.encode_producer_success(m.request_id, pname,
                                               producer.seq_state.persisted))


def encode_producer_success(request_id: int, producer_name: str, *, ready: bool,
                            last_sequence_id: int = -1) -> bytes:
    """PRODUCER_SUCCESS with an explicit producer_ready (False: queued for exclusive access)."""
    cmd = pb.BaseCommand(type=pb.BaseCommand.PRODUCER_SUCCESS)
    ps = cmd.producer_success
    ps.request_id = request_id
    ps.producer_name = producer_name
    ps.last_sequence_id = last_sequence_id
    ps.producer_ready = ready
    return C.encode_command(cmd)


def latency_bucket(latency_ms: float) -> int:
    """Index into a histogram laid out as PUBLISH_LATENCY_BUCKETS_MS + overflow."""
    return bisect.bisect_left(PUBLISH_LATENCY_BUCKETS_MS, latency_ms)


class Deduplicator:
    """The per-producer-name sequence states of one topic, and their persistence."""

    def __init__(self, topic: Topic) -> None:
        self.topic = topic
        self.ledger = topic.ledger
        self.states: dict[str, SequenceState] = {}
        self.cursor: Any = None
        self.ready = False
        self._recovery: asyncio.Future[None] | None = None

    # ------------------------------------------------------------------ recovery

    async def prepare(self) -> None:
        """Recover once (concurrent callers wait for the same recovery)."""
        if self.ready:
            return
        if self.topic.closed or self.topic.fenced:
            raise ServiceNotReadyError(f"Topic {self.topic.full} is being closed or reloaded")
        if self._recovery is None:
            self._recovery = asyncio.ensure_future(self._recover())
        await asyncio.shield(self._recovery)

    def start_recovery(self) -> None:
        """Recover in the background (topic load, when a snapshot exists)."""
        if self._recovery is None and not self.ready:
            self._recovery = asyncio.ensure_future(self._recover())
            self._recovery.add_done_callback(_log_failure)

    async def _recover(self) -> None:
        try:
            await self._recover_states()
        except BaseException:
            self._recovery = None  # the next producer tries again
            raise

    async def _recover_states(self) -> None:
        ledger = self.ledger
        end = ledger.last_confirmed
        cursor = ledger.cursors.get(DEDUP_CURSOR)
        states: dict[str, SequenceState] = {}
        after: Position | None = None
        if cursor is not None:
            after = cursor.mark_delete_position
            for name, value in cursor.properties.items():
                try:
                    highest = int(value)
                except ValueError:
                    continue
                states[name] = SequenceState(name, highest, floor=highest + 1,
                                             snapshotted=highest)
        else:
            cursor = await ledger.open_cursor(DEDUP_CURSOR, initial_position="latest")
        start = _tail_start(ledger)
        if after is not None:
            resume = ledger.next_position(after)
            start = resume if start is None else min(start, resume)
        if end is not None and start is not None and start <= end:
            try:
                await _replay(ledger, start, end, states)
            except Exception:
                # Better a possible duplicate than a topic that cannot take producers.
                log.exception("replaying %s for producer sequences failed", ledger.name)
        for state in states.values():
            state.pushed = max(state.pushed, state.persisted)
        self.states = states
        self.cursor = cursor
        self.ready = True

    # ------------------------------------------------------------------ producers

    def attach(self, producer: Producer) -> None:
        state = self.states.get(producer.name)
        if state is None:
            state = self.states[producer.name] = SequenceState(producer.name)
        state.producers.append(producer)
        state.idle_since = 0.0
        producer.seq_state = state

    def last_sequence_id(self, name: str) -> int:
        state = self.states.get(name)
        return state.persisted if state is not None else -1

    # ------------------------------------------------------------------ snapshots

    def snapshot(self, now: float) -> None:
        """Write every name's highest persisted id and the position they cover into the
        dedup cursor (storage persists it at its rate limit, atomically)."""
        cursor = self.cursor
        if not self.ready or cursor is None or getattr(self.ledger, "closed", False):
            return
        last = self.ledger.last_confirmed
        states = self.states
        for state in states.values():
            for producer in state.producers:
                producer.drain_finished()  # every durable entry is now in the states
        forget: list[str] = []
        for name, state in states.items():
            if state.producers:
                state.producers = [p for p in state.producers if not p.closed or p._queue]
            if state.persisted != state.snapshotted and state.persisted >= 0:
                cursor.set_property(name, str(state.persisted))
                state.snapshotted = state.persisted
            if state.producers:
                state.idle_since = 0.0
            elif state.idle_since == 0.0:
                state.idle_since = now
            else:
                idle = now - state.idle_since
                if idle > PRODUCER_INACTIVITY_S:
                    forget.append(name)
                elif idle > WINDOW_IDLE_S:
                    state.drop_window()
        for name in forget:
            del states[name]
            cursor.remove_property(name)
        if last is not None and last > cursor.mark_delete_position:
            cursor.mark_delete(last)


def _log_failure(fut: asyncio.Future[None]) -> None:
    if not fut.cancelled() and fut.exception() is not None:
        log.error("recovering producer sequences failed: %s", fut.exception())


def _tail_start(ledger: Any) -> Position | None:
    """The first of the last TAIL_REPLAY_ENTRIES entries (fewer when they are large)."""
    remaining = TAIL_REPLAY_ENTRIES
    budget = float(TAIL_REPLAY_BYTES)
    start: Position | None = None
    for info in reversed(ledger.ledgers):
        if info.entries <= 0:
            continue
        average = max(1.0, info.size_bytes / info.entries)
        take = min(info.entries, remaining, int(budget // average))
        if take <= 0:
            break
        start = Position(info.ledger_id, info.entries - take)
        remaining -= take
        budget -= take * average
        if take < info.entries or remaining <= 0:
            break
    return start


async def _replay(ledger: Any, start: Position, end: Position,
                  states: dict[str, SequenceState]) -> None:
    """Rebuild the states from the entries in [start, end] (metadata only)."""
    pos = start
    while True:
        entries = await ledger.read_entries(pos, 256, 4 * 1024 * 1024)
        if not entries:
            return
        for e in entries:
            if e.position > end:
                return
            md = _metadata(e.data)
            if md is None or not md.HasField("producer_name") or (
                    md.HasField("num_chunks_from_msg")
                    and md.chunk_id < md.num_chunks_from_msg - 1):
                continue
            key = send_key(md.sequence_id, md.highest_sequence_id, md.num_messages_in_batch)
            name = md.producer_name
            state = states.get(name)
            if state is None:
                # Unknown before this entry: keys below it are answered as duplicates.
                state = states[name] = SequenceState(name, floor=key)
            state.record(key, e.position.ledger_id, e.position.entry_id)
        last = entries[-1].position
        if last >= end:
            return
        pos = ledger.next_position(last)
