"""The producer endpoint: JSON messages in, one ``ProducerAck`` out per message.

Theory of operation
-------------------
:func:`open_producer` creates the producer on the session's link (PRODUCER; a refusal is
raised for the route to answer over HTTP, as Pulsar answers before the upgrade), and learns the
producer's name and where its sequence stands. :class:`ProducerSession` then turns every text
frame into one SEND: the payload and ``properties``, ``key`` (partition key),
``replicationClusters`` / ``disableReplication``, ``eventTime``, ``deliverAt`` (epoch ms) and
``deliverAfterMs`` (the later wins, as the client's builder applies them in that order) go into
the message metadata; the sequence id is the frame's ``sequenceId`` when given, else the next
one. With ``batchingEnabled=true`` messages arriving within ``batchingMaxPublishDelay`` (10 ms)
go out as one batch entry of at most ``batchingMaxMessages`` (1000), each answered with its
batch message id; a delayed message is sent on its own, as the client sends it. With
``compressionType`` (LZ4, ZLIB, ZSTD, SNAPPY) the payload is stored compressed in Pulsar's
format for that codec (:mod:`broker.websocket.codecs`), as the Java client stores it. The answer, ``{"result": "ok", "messageId", "context"}`` or
``send-error:N`` with ``errorMsg``, is queued when the broker's receipt or error arrives, or when
``sendTimeoutMillis`` passes first (0 = no timeout), in the order they arrive.

The broker may close the producer (its topic unloaded or deleted): the session re-creates it
under the same name and sends what was pending again, as the client does, meanwhile holding
new messages; a refusal that another attempt cannot change ends the session.

Bounds: a frame is read from the client only when the session has a slot for its answer;
slots are ``maxPendingMessages`` (at most the broker's
``maxPendingPublishRequestsPerConnection``) and one is freed when its answer has been written
to the socket; and only while the messages awaiting the broker's answer hold less than
:data:`MAX_PENDING_BYTES`. A client that sends faster than the broker stores, or reads its
answers slowly, is therefore paused (its socket is not read) rather than answered with a
full-queue error.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from aiohttp import web

from broker.websocket.codecs import COMPRESSIONS, compress
from broker.websocket.frames import (
    FrameError,
    MessageRef,
    ProduceRequest,
    WebSocketError,
    encode_message_id,
    parse_produce_request,
    producer_ack,
    producer_error,
)
from broker.websocket.link import BrokerLink
from broker.websocket.params import ProducerOptions
from broker.websocket.session import Session
from protocol import commands as C
from protocol import pulsar_pb as pb
from protocol.errors import RequestError
from protocol.metadata import encode_batch_payload, encode_entry

__all__ = ["ProducerSession", "open_producer"]

log = logging.getLogger("horae.websocket.producer")

#: Bytes of entries a session may have sent and not yet answered: the next frame from the
#: client is read only below this (as the client's ``memoryLimitBytes`` bounds its pending sends).
MAX_PENDING_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class OpenedProducer:
    producer_id: int
    name: str
    last_sequence_id: int


async def open_producer(link: BrokerLink, topic: str, options: ProducerOptions) -> OpenedProducer:
    """PRODUCER on *link*; raises :class:`RequestError` with the broker's refusal."""
    producer_id = link.next_id()
    request_id = link.next_request_id()
    answer = await link.request(
        C.encode_producer(topic, producer_id, request_id, options.producer_name), request_id)
    success = answer.producer_success
    last = success.last_sequence_id if success.HasField("last_sequence_id") else -1
    return OpenedProducer(producer_id, success.producer_name, last)


@dataclass(slots=True)
class _Pending:
    """One SEND awaiting its answer: a message, or a batch of them (one context each)."""

    contexts: list[str | None]
    timer: asyncio.TimerHandle | None
    entry: bytes
    """Kept to send again on the re-created producer after the broker closed this one."""
    batch: bool
    highest_sequence_id: int


class ProducerSession(Session):
    """One producer endpoint session (see the module docstring)."""

    def __init__(self, ws: web.WebSocketResponse, link: BrokerLink, topic: str,
                 idle_timeout_s: float, opened: OpenedProducer, options: ProducerOptions, *,
                 max_pending: int, max_message_size: int) -> None:
        super().__init__(ws, link, topic, idle_timeout_s)
        self._producer_id = opened.producer_id
        self._name = opened.name
        if options.initial_sequence_id is not None:
            self._next_sequence = options.initial_sequence_id + 1
        else:
            self._next_sequence = opened.last_sequence_id + 1
        self._send_timeout_s = options.send_timeout_ms / 1000
        self._compression = COMPRESSIONS[options.compression_type]
        self._batching = options.batching_enabled
        self._batch_max = options.batching_max_messages
        self._batch_delay_s = options.batching_max_publish_delay_ms / 1000
        self._batch: list[tuple[ProduceRequest, int]] = []
        self._batch_timer: asyncio.TimerHandle | None = None
        self._max_message_size = max_message_size
        self._pending: dict[int, _Pending] = {}
        self._slots = asyncio.Semaphore(max_pending)
        self._pending_bytes = 0
        self._bytes_freed = asyncio.Event()
        self._reconnecting = False
        self.sent = 0
        self.failed = 0
        link.add_producer(self._producer_id, self)

    # ------------------------------------------------------------------ admission

    async def admit(self) -> None:
        await self._slots.acquire()
        while self._pending_bytes >= MAX_PENDING_BYTES and not self._closing:
            self._bytes_freed.clear()
            await self._bytes_freed.wait()

    def on_sent(self, tag: object) -> None:
        self._slots.release()

    def admitted_without_answer(self) -> None:
        self._slots.release()

    def _answer(self, text: str) -> None:
        self.queue(text)  # the slot taken in admit() is freed once this is written

    # ------------------------------------------------------------------ client frames

    def on_text(self, text: str) -> None:
        try:
            request = parse_produce_request(text)
        except FrameError as exc:
            self.failed += 1
            self._answer(producer_error(exc.error, exc.message, exc.context))
            return
        if len(request.payload) > self._max_message_size:
            self.failed += 1
            self._answer(producer_error(
                WebSocketError.UnknownError,
                f"The producer {self._name} can not send message to the topic {self.topic} "
                f"within given timeout : message size {len(request.payload)} exceeds the max "
                f"message size {self._max_message_size}", request.context))
            return
        sequence_id = request.sequence_id if request.sequence_id is not None \
            else self._next_sequence
        if sequence_id in self._pending:
            self.failed += 1
            self._answer(producer_error(
                WebSocketError.UnknownError,
                f"A message with sequence id {sequence_id} is already pending", request.context))
            return
        self._next_sequence = max(self._next_sequence, sequence_id + 1)
        if self._batching and _batchable(request):
            self._batch.append((request, sequence_id))
            if len(self._batch) >= self._batch_max:
                self._flush_batch()
            elif self._batch_timer is None:
                self._batch_timer = self._loop.call_later(self._batch_delay_s, self._flush_batch)
            return
        self._flush_batch()  # what was batched before goes first
        metadata = self._metadata(request, sequence_id)
        self._send(metadata, request.payload, [request.context], batch=False,
                   highest_sequence_id=sequence_id)

    def _flush_batch(self) -> None:
        """Send the messages batched so far as one entry (Pulsar's batch format)."""
        if self._batch_timer is not None:
            self._batch_timer.cancel()
            self._batch_timer = None
        batch, self._batch = self._batch, []
        if not batch:
            return
        if len(batch) == 1:  # as the client: a batch of one goes out as a plain message
            request, sequence_id = batch[0]
            self._send(self._metadata(request, sequence_id), request.payload, [request.context],
                       batch=False, highest_sequence_id=sequence_id)
            return
        first, last = batch[0][1], max(sequence_id for _, sequence_id in batch)
        metadata = pb.MessageMetadata(producer_name=self._name, sequence_id=first,
                                      publish_time=int(time.time() * 1000),
                                      num_messages_in_batch=len(batch),
                                      highest_sequence_id=last)
        singles = []
        for request, sequence_id in batch:
            single = pb.SingleMessageMetadata(payload_size=len(request.payload),
                                              sequence_id=sequence_id)
            for key, value in request.properties.items():
                single.properties.add(key=key, value=value)
            if request.key is not None:
                single.partition_key = request.key
            if request.event_time_ms:
                single.event_time = request.event_time_ms
            singles.append((single, request.payload))
        self._send(metadata, encode_batch_payload(singles), [r.context for r, _ in batch],
                   batch=True, highest_sequence_id=last)

    def _send(self, metadata: pb.MessageMetadata, payload: bytes, contexts: list[str | None],
              *, batch: bool, highest_sequence_id: int) -> None:
        sequence_id = metadata.sequence_id
        metadata.uncompressed_size = len(payload)
        if self._compression != pb.NONE and payload:
            payload = compress(self._compression, payload)
            metadata.compression = self._compression  # type: ignore[assignment]
        entry = encode_entry(metadata, payload)
        timer = None
        if self._send_timeout_s > 0:
            timer = self._loop.call_later(self._send_timeout_s, self._timed_out, sequence_id)
        pending = _Pending(contexts, timer, entry, batch, highest_sequence_id)
        self._pending[sequence_id] = pending
        self._pending_bytes += len(entry)
        if self._reconnecting:
            return  # sent with the others once the producer is back
        try:
            self.link.send(self._send_frame(sequence_id, pending))
        except RequestError as exc:
            self.on_send_error(sequence_id, exc)

    def _send_frame(self, sequence_id: int, pending: _Pending) -> bytes:
        if pending.batch:
            return C.encode_send(self._producer_id, sequence_id, pending.entry,
                                 num_messages=len(pending.contexts),
                                 highest_sequence_id=pending.highest_sequence_id)
        return C.encode_send(self._producer_id, sequence_id, pending.entry)

    def _metadata(self, request: ProduceRequest, sequence_id: int) -> pb.MessageMetadata:
        now_ms = int(time.time() * 1000)
        md = pb.MessageMetadata(producer_name=self._name, sequence_id=sequence_id,
                                publish_time=now_ms)
        for key, value in request.properties.items():
            md.properties.add(key=key, value=value)
        if request.key is not None:
            md.partition_key = request.key
        if request.replication_clusters:
            md.replicate_to.extend(request.replication_clusters)
        if request.disable_replication:
            del md.replicate_to[:]
            md.replicate_to.append("__local__")
        if request.event_time_ms:
            md.event_time = request.event_time_ms
        deliver_at = 0
        if request.deliver_at_ms > 0:
            deliver_at = request.deliver_at_ms
        if request.deliver_after_ms > 0:
            deliver_at = now_ms + request.deliver_after_ms
        if deliver_at:
            md.deliver_at_time = deliver_at
        return md

    # ------------------------------------------------------------------ broker answers

    def on_receipt(self, sequence_id: int, ledger_id: int, entry_id: int) -> None:
        pending = self._take(sequence_id)
        if pending is None:
            return
        size = len(pending.contexts)
        self.sent += size
        for index, context in enumerate(pending.contexts):
            ref = MessageRef(ledger_id, entry_id, index, size) if pending.batch \
                else MessageRef(ledger_id, entry_id)
            self._answer(producer_ack(encode_message_id(ref), context))

    def on_send_error(self, sequence_id: int, error: RequestError) -> None:
        pending = self._take(sequence_id)
        if pending is None:
            return
        self.failed += len(pending.contexts)
        for context in pending.contexts:
            self._answer(producer_error(WebSocketError.UnknownError, error.message, context))

    def _timed_out(self, sequence_id: int) -> None:
        pending = self._pending.pop(sequence_id, None)
        if pending is None:
            return
        self._freed(pending)
        self.failed += len(pending.contexts)
        for context in pending.contexts:
            self._answer(producer_error(
                WebSocketError.UnknownError,
                f"The producer {self._name} can not send message to the topic {self.topic} "
                "within given timeout", context))

    def _take(self, sequence_id: int) -> _Pending | None:
        pending = self._pending.pop(sequence_id, None)
        if pending is not None:
            if pending.timer is not None:
                pending.timer.cancel()
            self._freed(pending)
        return pending

    def _freed(self, pending: _Pending) -> None:
        self._pending_bytes -= len(pending.entry)
        self._bytes_freed.set()

    def on_closed_by_broker(self) -> None:
        """The broker closed the producer (topic unloaded or deleted) or the whole link."""
        if self.link.closed:
            for sequence_id in list(self._pending):
                self.on_send_error(sequence_id, RequestError("The broker closed the connection"))
            self.close_with(WebSocketError.UnknownError, "the broker closed the connection")
            return
        if not self._reconnecting:
            self._reconnecting = True
            self._loop.create_task(self._recreate())

    async def _recreate(self) -> None:
        """Re-create the producer under its name, then send what is pending again, in order
        (de-duplication answers a message the broker had stored with its first id)."""
        self.link.remove_producer(self._producer_id)
        options = ProducerOptions(producer_name=self._name)

        async def attempt() -> None:
            opened = await open_producer(self.link, self.topic, options)
            self._producer_id = opened.producer_id
            self.link.add_producer(opened.producer_id, self)

        if not await self.reconnect(attempt, "the producer could not be re-created"):
            for sequence_id in list(self._pending):
                self.on_send_error(sequence_id, RequestError("The producer was closed"))
            return
        self._reconnecting = False
        for sequence_id, pending in list(self._pending.items()):
            self.link.send(self._send_frame(sequence_id, pending))

    def on_close(self) -> None:
        if self._batch_timer is not None:
            self._batch_timer.cancel()
        self.link.remove_producer(self._producer_id)
        for pending in self._pending.values():
            if pending.timer is not None:
                pending.timer.cancel()
        self._pending.clear()


def _batchable(request: ProduceRequest) -> bool:
    """As the client: a delayed message, or one naming its replication, is sent on its own."""
    return not (request.deliver_at_ms > 0 or request.deliver_after_ms > 0
                or request.replication_clusters or request.disable_replication)
