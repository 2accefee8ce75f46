"""The consumer and reader endpoints: messages out as JSON, acks and commands in.

Theory of operation
-------------------
:func:`open_consumer` subscribes on the session's link (SUBSCRIBE; a refusal is raised for the
route to answer over HTTP before the upgrade). A reader is a non-durable Exclusive subscription
named ``reader-<random>`` starting at ``messageId`` (``earliest``, ``latest`` or an id, which
is itself skipped, as the client skips it). :class:`ConsumerSession` then moves messages:

1. MESSAGE frames from the broker are unpacked (a batch into its messages, skipping indexes
   the broker's ``ack_set`` says are acknowledged; a reader also skips what precedes its start)
   into ``ConsumerMessage`` JSON held in ``_held``.
2. Held messages go to the writer while the flow allows: in push mode while fewer than
   ``receiverQueueSize`` delivered messages await the client's ack (Pulsar's
   ``pendingMessages``); in pull mode while the client's ``permit`` credits last.
3. A FLOW permit goes back to the broker for each message *written to the socket*, grouped by
   half the queue as the client does. So the broker's outstanding permits, ``_held`` and the
   outbox together hold at most ``receiverQueueSize`` messages (plus the rest of one batch), as
   the client's receiver queue does, and a slow socket stops the broker's dispatch to this
   consumer. With the client's unacked messages (push mode), a session has at most twice
   ``receiverQueueSize`` messages out, as Pulsar's. Permits are also given back only while
   what is held and queued stays under :data:`MAX_BUFFERED_BYTES` (at the messages' average
   size), and the first FLOW asks for :data:`INITIAL_PERMITS` only, so large messages are
   bounded by bytes too.

Client commands: ``{"messageId"}`` acknowledges (``"ackType": "cumulative"`` cumulatively; a
message of a batch with the batch-index ``ack_set``), ``negativeAcknowledge`` hands the message
back after ``negativeAckRedeliveryDelay``, ``permit`` adds pull credits, ``unsubscribe``,
``isEndOfTopic`` (answered from the broker's REACHED_END_OF_TOPIC). ``ackTimeoutMillis``
hands back what stays unacknowledged that long. A reader's acks only free its flow; the reader
acknowledges cumulatively to the broker itself, as the client's reader does.

``maxRedeliverCount`` (and ``deadLetterTopic``) send a message handed back once more after
that many redeliveries to the dead-letter topic instead (:mod:`broker.websocket.dead_letter`).

Every table here is bounded: held and delivered messages by the flow above, the ack-timeout and
negative-ack tables by :data:`MAX_TRACKED` (past it the oldest is handed back at once).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections import OrderedDict, deque
from dataclasses import dataclass

from aiohttp import web

from broker.websocket.codecs import decompress
from broker.websocket.dead_letter import DeadLetters, Letter, default_topic
from broker.websocket.frames import (
    ConsumerCommand,
    FrameError,
    MessageRef,
    WebSocketError,
    consumer_message,
    decode_message_id,
    encode_message_id,
    end_of_topic,
    parse_consumer_command,
)
from broker.websocket.link import BrokerLink
from broker.websocket.params import ConsumerOptions, ReaderOptions
from broker.websocket.session import Session
from protocol import commands as C
from protocol import pulsar_pb as pb
from protocol.errors import RequestError
from protocol.framing import encode_command
from protocol.metadata import iter_batch, parse_metadata, split_entry
from protocol.sub_types import SubType

__all__ = ["MAX_TRACKED", "ConsumerSession", "OpenedConsumer", "open_consumer", "open_reader"]

log = logging.getLogger("horae.websocket.consumer")

#: Most positions one session tracks for ack timeouts and for pending negative acks.
MAX_TRACKED = 50_000
#: Bytes of JSON a session may hold (received, not yet written to the socket) before it gives
#: the broker fewer permits than the receiver queue would: big messages count by size too.
MAX_BUFFERED_BYTES = 16 * 1024 * 1024
#: Permits of the first FLOW: the rest of the receiver queue follows once the first message is
#: written, as far as :data:`MAX_BUFFERED_BYTES` allows at the size the messages turn out to be.
INITIAL_PERMITS = 16
_U64 = (1 << 64) - 1
_EARLIEST = (_U64, _U64)                        # MessageId.earliest (-1, -1) on the wire
_LATEST = ((1 << 63) - 1, (1 << 63) - 1)        # MessageId.latest (Long.MAX_VALUE twice)
_WHOLE_ENTRY = (1 << 31) - 1                     # a batch index past any batch's last


@dataclass(frozen=True, slots=True)
class OpenedConsumer:
    consumer_id: int
    subscription: str
    sub_type: SubType
    start: MessageRef | None = None
    """A reader's start id, which it skips (None: nothing to skip)."""
    durable: bool = True
    name: str | None = None
    priority: int = 0
    start_wire: tuple[int, int] | None = None
    """Where a reader's subscription started (its SUBSCRIBE's ``start_message_id``)."""


async def _subscribe(link: BrokerLink, topic: str, subscription: str, sub_type: SubType, *,
                     durable: bool, name: str | None, priority: int,
                     start: tuple[int, int] | None) -> int:
    consumer_id = link.next_id()
    request_id = link.next_request_id()
    cmd = pb.BaseCommand(type=pb.BaseCommand.SUBSCRIBE)
    s = cmd.subscribe
    s.topic = topic
    s.subscription = subscription
    s.subType = int(sub_type)  # type: ignore[assignment]
    s.consumer_id = consumer_id
    s.request_id = request_id
    s.durable = durable
    s.priority_level = priority
    if name is not None:
        s.consumer_name = name
    if start is not None:
        s.start_message_id.ledgerId, s.start_message_id.entryId = start
    await link.request(encode_command(cmd), request_id)
    return consumer_id


async def open_consumer(link: BrokerLink, topic: str, subscription: str,
                        options: ConsumerOptions) -> OpenedConsumer:
    consumer_id = await _subscribe(link, topic, subscription, options.sub_type,
                                   durable=options.durable, name=options.consumer_name,
                                   priority=options.priority_level, start=None)
    return OpenedConsumer(consumer_id, subscription, options.sub_type, None, options.durable,
                          options.consumer_name, options.priority_level)


async def open_reader(link: BrokerLink, topic: str, options: ReaderOptions) -> OpenedConsumer:
    """A reader; raises :class:`FrameError` for a ``messageId`` that is not an id."""
    start: MessageRef | None = None
    if options.start == "earliest":
        wire = _EARLIEST
    elif options.start == "latest":
        wire = _LATEST
    else:
        start = decode_message_id(options.start)
        wire = (start.ledger_id & _U64, start.entry_id & _U64)
    subscription = "reader-" + secrets.token_hex(5)
    consumer_id = await _subscribe(link, topic, subscription, SubType.Exclusive, durable=False,
                                   name=options.reader_name, priority=0, start=wire)
    return OpenedConsumer(consumer_id, subscription, SubType.Exclusive, start, False,
                          options.reader_name, 0, wire)


@dataclass(slots=True)
class _Held:
    text: str
    position: tuple[int, int]
    redelivery_count: int
    last_of_entry: bool
    generation: int = 0
    """Which of this endpoint's subscriptions it came from (each re-subscribe counts one up)."""


class ConsumerSession(Session):
    """One consumer or reader endpoint session (see the module docstring)."""

    def __init__(self, ws: web.WebSocketResponse, link: BrokerLink, topic: str,
                 idle_timeout_s: float, opened: OpenedConsumer, *, receiver_queue_size: int,
                 reader: bool,
                 options: ConsumerOptions | None = None) -> None:
        super().__init__(ws, link, topic, idle_timeout_s)
        self._consumer_id = opened.consumer_id
        self._opened = opened
        self._generation = 0
        self._last_written: tuple[int, int] | None = None
        self._sub_type = opened.sub_type
        self._start = opened.start
        self._is_reader = reader
        options = options or ConsumerOptions()
        self._pull = options.pull_mode and not reader
        self._queue_size = max(1, receiver_queue_size)
        # the client's commands are read while the outbox holds no more than the messages the
        # flow allows and a few answers (isEndOfTopic)
        self.outbox_limit = self._queue_size + 64
        self._nack_delay_s = options.negative_ack_delay_ms / 1000
        self._ack_timeout_s = options.ack_timeout_ms / 1000
        self._held: deque[_Held] = deque()
        self._held_bytes = 0
        self._average_size = 0.0  # of a message's JSON (moving average)
        self._unacked_by_client = 0     # push mode: delivered, not acked (Pulsar's pendingMessages)
        self._credits = 0               # pull mode: the client's permits not used yet
        self._permits_to_return = 0
        self._outstanding = 0           # permits the broker holds (granted, not yet used)
        self._cumulative_upto: tuple[int, int] | None = None  # a reader's next broker ack
        self._delivered_at: OrderedDict[tuple[int, int], float] = OrderedDict()
        self._nacks: OrderedDict[tuple[int, int], float] = OrderedDict()
        self._timer: asyncio.TimerHandle | None = None
        self._pump_scheduled = False
        self._end_of_topic = False
        self._dead_letters: DeadLetters | None = None
        if options.max_redeliver_count > 0:
            self._dead_letters = DeadLetters(
                link, topic, options.dead_letter_topic
                or default_topic(topic, opened.subscription), options.max_redeliver_count)
        self.delivered = 0
        self.acked = 0
        link.add_consumer(self._consumer_id, self)
        self._first_flow()

    def _first_flow(self) -> None:
        first = min(self._queue_size, INITIAL_PERMITS)
        self._permits_to_return = self._queue_size - first
        self._outstanding = first
        self.link.send(C.encode_flow(self._consumer_id, first))

    # ------------------------------------------------------------------ from the broker

    def on_message(self, message: pb.CommandMessage, entry: bytes) -> None:
        """Runs inside the broker's write: unpack, hold, and schedule the pump."""
        position = (message.message_id.ledgerId, message.message_id.entryId)
        redelivery = int(message.redelivery_count)
        try:
            unpacked = self._unpack(position, entry, redelivery, list(message.ack_set))
        except _Undeliverable as exc:
            self.close_with(WebSocketError.UnknownError, str(exc))
            return
        except Exception as exc:  # the broker checked it at publish: never seen, but no crash
            log.warning("dropping malformed message %s on %s: %s", position, self.topic, exc)
            self._outstanding = max(0, self._outstanding - 1)
            self._permits_to_return += 1
            return
        held, total = unpacked
        self._outstanding = max(0, self._outstanding - total)
        self._held.extend(held)
        for item in held:
            size = len(item.text)
            self._held_bytes += size
            self._average_size = size if not self._average_size else \
                0.9 * self._average_size + 0.1 * size
        if total > len(held):
            self._permits_to_return += total - len(held)  # never written: permits come back
        self._schedule_pump()

    def _unpack(self, position: tuple[int, int], entry: bytes, redelivery: int,
                ack_set: list[int]) -> tuple[list[_Held], int]:
        """The messages of one entry to deliver, and how many the entry holds."""
        metadata = parse_metadata(entry)
        _, payload = split_entry(entry)
        data = _decompress(metadata, bytes(payload), position)
        start = self._start
        count = metadata.num_messages_in_batch if metadata.HasField("num_messages_in_batch") \
            else None
        if start is not None and position < (start.ledger_id, start.entry_id):
            return [], count or 1
        candidate = self._dead_letters is not None and \
            self._dead_letters.is_candidate(redelivery)
        if count is None:
            if start is not None and position == (start.ledger_id, start.entry_id):
                return [], 1
            if candidate:
                self._note_letters(position, [(metadata, -1, data)])
            ref = MessageRef(position[0], position[1])
            return [_Held(consumer_message(encode_message_id(ref), data, metadata, None,
                                           redelivery), position, redelivery, True,
                          self._generation)], 1
        acked = _acked_indexes(ack_set, count)
        out: list[_Held] = []
        kept: list[tuple[pb.SingleMessageMetadata, int, bytes]] = []
        for index, (single, body) in enumerate(iter_batch(data, count)):
            if index in acked:
                continue
            if start is not None and position == (start.ledger_id, start.entry_id) \
                    and index <= start.batch_index:
                continue
            kept.append((single, index, body))
            ref = MessageRef(position[0], position[1], index, count)
            out.append(_Held(consumer_message(encode_message_id(ref), body, metadata, single,
                                              redelivery), position, redelivery, False,
                             self._generation))
        if out:
            out[-1].last_of_entry = True
        if candidate:
            self._note_letters(position, kept)
        return out, count

    def _note_letters(self, position: tuple[int, int],
                      messages: list[tuple[pb.MessageMetadata | pb.SingleMessageMetadata, int,
                                           bytes]]) -> None:
        assert self._dead_letters is not None
        origin = f"{position[0]}:{position[1]}:-1"
        self._dead_letters.note(position, [
            Letter(body, tuple((kv.key, kv.value) for kv in md.properties),
                   md.partition_key if md.HasField("partition_key") else None,
                   md.event_time if md.HasField("event_time") else 0, index,
                   origin if index < 0 else f"{origin}:{index}")
            for md, index, body in messages])

    def on_closed_by_broker(self) -> None:
        """The broker closed the consumer (topic unloaded, a cursor reset) or the whole link."""
        if self.link.closed:
            self.close_with(WebSocketError.UnknownError, "the broker closed the connection")
            return
        self._loop.create_task(self._resubscribe())

    async def _resubscribe(self) -> None:
        """Subscribe again, as the client does: what was held is dropped (the broker sends it
        again), a reader starts after the last message it wrote to the socket."""
        self.link.remove_consumer(self._consumer_id)
        self._generation += 1
        self._held.clear()
        self._held_bytes = 0
        self._permits_to_return = 0
        self._cumulative_upto = None
        opened = self._opened
        start = opened.start_wire
        last = self._last_written
        if self._is_reader and last is not None:
            # everything of that entry was written: skip it whole
            self._start = MessageRef(last[0], last[1], batch_index=_WHOLE_ENTRY)
            start = (last[0] & _U64, last[1] & _U64)

        async def attempt() -> None:
            consumer_id = await _subscribe(
                self.link, self.topic, opened.subscription, opened.sub_type,
                durable=opened.durable, name=opened.name, priority=opened.priority, start=start)
            self._consumer_id = consumer_id
            self.link.add_consumer(consumer_id, self)
            self._first_flow()

        await self.reconnect(attempt, "the consumer could not subscribe again")

    def on_end_of_topic(self) -> None:
        self._end_of_topic = True

    # ------------------------------------------------------------------ to the client

    def _schedule_pump(self) -> None:
        if not self._pump_scheduled:
            self._pump_scheduled = True
            self._loop.call_soon(self._pump)

    def _may_deliver(self) -> bool:
        if self._pull:
            return self._credits > 0
        return self._unacked_by_client < self._queue_size

    def _pump(self) -> None:
        self._pump_scheduled = False
        while self._held and self._may_deliver() and not self._closing:
            held = self._held.popleft()
            self._held_bytes -= len(held.text)
            if self._pull:
                self._credits -= 1
            else:
                self._unacked_by_client += 1
            self.queue(held.text, held)
        self._return_permits()

    def on_sent(self, tag: object) -> None:
        if not isinstance(tag, _Held):
            return
        self.delivered += 1
        if tag.last_of_entry:
            self._last_written = tag.position
        if tag.generation != self._generation:
            return  # from a subscription the broker closed: it owes that one no permit
        if not self._is_reader and self._ack_timeout_s > 0:
            self._track(self._delivered_at, tag.position, self._loop.time() + self._ack_timeout_s)
        if self._is_reader and tag.last_of_entry:
            self._cumulative_upto = tag.position
        self._permits_to_return += 1
        self._return_permits()

    def _return_permits(self) -> None:
        if self._permits_to_return < max(1, self._queue_size // 2) or self.link.closed:
            return
        room = (MAX_BUFFERED_BYTES - self._held_bytes - self.outbox_bytes
                - self._outstanding * self._average_size)  # what the broker may still send
        if room <= 0 or not self._average_size:
            # the next message written makes room and calls again; before the first message
            # the first FLOW stands: nothing tells yet how large they are
            return
        grant = min(self._permits_to_return, max(1, int(room // self._average_size)))
        if self._cumulative_upto is not None:
            self.link.send(C.encode_ack(self._consumer_id, [self._cumulative_upto],
                                        cumulative=True))
            self._cumulative_upto = None
        self.link.send(C.encode_flow(self._consumer_id, grant))
        self._permits_to_return -= grant
        self._outstanding += grant

    # ------------------------------------------------------------------ client frames

    def on_text(self, text: str) -> None:
        command = parse_consumer_command(text)
        kind = command.type
        if kind == "isEndOfTopic":
            self.queue(end_of_topic(self._end_of_topic))
            return
        if self._is_reader:
            self._client_done()  # a reader's ack only frees its flow
            return
        if kind == "permit":
            self._permit(command)
        elif kind == "unsubscribe":
            self._loop.create_task(self._unsubscribe())
        elif kind == "negativeAcknowledge":
            self._negative_ack(decode_message_id(command.message_id))
            self._client_done()
        else:
            self._ack(decode_message_id(command.message_id), command)
            self._client_done()

    def _client_done(self) -> None:
        if not self._pull and self._unacked_by_client > 0:
            self._unacked_by_client -= 1
        self._schedule_pump()

    def _permit(self, command: ConsumerCommand) -> None:
        if command.permit_messages is None:
            raise FrameError(WebSocketError.FailedToDeserializeFromJSON,
                             "Missing required permitMessages field for 'permit' command")
        if self._pull:
            self._credits = max(0, min(self._credits + command.permit_messages, 1 << 31))
            self._schedule_pump()

    def _ack(self, ref: MessageRef, command: ConsumerCommand) -> None:
        position = (ref.ledger_id, ref.entry_id)
        cumulative = (command.ack_type or "").lower() == "cumulative"
        if cumulative and self._sub_type.shares_messages:
            raise FrameError(WebSocketError.UnknownError,
                             "Cannot use cumulative acks on a non-exclusive/non-failover "
                             "subscription")
        cmd = pb.BaseCommand(type=pb.BaseCommand.ACK)
        a = cmd.ack
        a.consumer_id = self._consumer_id
        a.ack_type = pb.CommandAck.Cumulative if cumulative else pb.CommandAck.Individual
        mid = a.message_id.add()
        mid.ledgerId, mid.entryId = position[0] & _U64, position[1] & _U64
        if ref.batch_index >= 0:
            size = ref.batch_size if ref.batch_size > 0 else ref.batch_index + 1
            mid.ack_set.extend(_ack_set_without(ref.batch_index, size))
        self.link.send(encode_command(cmd))
        self.acked += 1
        self._delivered_at.pop(position, None)
        self._nacks.pop(position, None)
        if self._dead_letters is not None:
            self._dead_letters.acked(position, ref.batch_index)

    def _negative_ack(self, ref: MessageRef) -> None:
        position = (ref.ledger_id, ref.entry_id)
        self._delivered_at.pop(position, None)
        if self._nack_delay_s <= 0:
            self._redeliver([position])
            return
        self._track(self._nacks, position, self._loop.time() + self._nack_delay_s)

    async def _unsubscribe(self) -> None:
        request_id = self.link.next_request_id()
        try:
            await self.link.request(C.encode_unsubscribe(self._consumer_id, request_id),
                                    request_id)
        except RequestError as exc:
            self.close_with(WebSocketError.UnknownError, exc.message)
            return
        self.close(1000, "Unsubscribed")

    # ------------------------------------------------------------------ timers

    def _track(self, table: OrderedDict[tuple[int, int], float], position: tuple[int, int],
               due: float) -> None:
        table[position] = due
        table.move_to_end(position)
        if len(table) > MAX_TRACKED:
            oldest, _ = table.popitem(last=False)
            self._redeliver([oldest])
        if self._timer is None:
            self._timer = self._loop.call_at(due, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        now = self._loop.time()
        due: list[tuple[int, int]] = []
        next_due: float | None = None
        for table in (self._delivered_at, self._nacks):
            while table:
                position, when = next(iter(table.items()))
                if when > now:
                    next_due = when if next_due is None else min(next_due, when)
                    break
                table.popitem(last=False)
                due.append(position)
        if due:
            self._redeliver(due)
        if next_due is not None and not self._closing:
            self._timer = self._loop.call_at(next_due, self._on_timer)

    def _redeliver(self, positions: list[tuple[int, int]]) -> None:
        """Hand *positions* back to the broker; those whose messages reached
        ``maxRedeliverCount`` go to the dead-letter topic instead."""
        if self.link.closed:
            return
        dead = self._dead_letters
        if dead is not None:
            again = []
            for position in positions:
                letters = dead.take(position)
                if letters is None:
                    again.append(position)
                else:
                    self._loop.create_task(self._dead_letter(position, letters))
            positions = again
        if positions:
            self.link.send(C.encode_redeliver(
                self._consumer_id, [(lid & _U64, eid & _U64) for lid, eid in positions]))

    async def _dead_letter(self, position: tuple[int, int], letters: list[Letter]) -> None:
        """Store *letters* on the dead-letter topic, then acknowledge their entry."""
        assert self._dead_letters is not None
        try:
            await self._dead_letters.publish(letters)
        except RequestError as exc:
            log.warning("could not publish %s of %s to the dead-letter topic %s: %s; "
                        "redelivering it", position, self.topic, self._dead_letters.topic,
                        exc.message)
            self._redeliver([position])
            return
        if not self.link.closed:
            self.link.send(C.encode_ack(self._consumer_id,
                                        [(position[0] & _U64, position[1] & _U64)]))

    def on_close(self) -> None:
        self.link.remove_consumer(self._consumer_id)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


class _Undeliverable(Exception):
    """A message this service cannot turn into JSON (a compression it cannot undo)."""


def _decompress(metadata: pb.MessageMetadata, payload: bytes, position: tuple[int, int]) -> bytes:
    compression = metadata.compression if metadata.HasField("compression") else pb.NONE
    if compression == pb.NONE:
        return payload
    try:
        return decompress(compression, payload, metadata.uncompressed_size)
    except KeyError:
        raise _Undeliverable(f"message {position[0]}:{position[1]} is compressed with an "
                             f"unknown compression ({compression})") from None


def _acked_indexes(ack_set: list[int], count: int) -> set[int]:
    """Batch indexes the broker's ``ack_set`` marks as acknowledged (bit clear)."""
    if not ack_set:
        return set()
    bits = 0
    for i, word in enumerate(ack_set):
        bits |= (word & _U64) << (64 * i)
    return {i for i in range(count) if not bits >> i & 1}


def _ack_set_without(index: int, size: int) -> list[int]:
    """The ``ack_set`` acknowledging batch message *index* of *size*: every bit but its own."""
    bits = ((1 << size) - 1) & ~(1 << index)
    words = []
    for i in range((size + 63) // 64):
        word = bits >> (64 * i) & _U64
        words.append(word - (1 << 64) if word >= 1 << 63 else word)  # int64 on the wire
    return words
