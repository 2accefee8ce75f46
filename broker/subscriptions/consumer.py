"""One consumer attached to a subscription: permits, pending acks, counters.

Theory of operation
-------------------
A :class:`Consumer` is created by :class:`broker.net.consumers.ConsumerSide` for every SUBSCRIBE
that succeeds and is attached to one subscription (the side keeps which). It reaches its
connection only through the narrow :class:`ConsumerTransport` it is given. The dispatcher of that
subscription is the only code that sends messages to it, through :meth:`Consumer.send`, which
charges FLOW permits (in messages: a batch entry costs ``num_messages_in_batch``) and records the
position in :attr:`pending` until it is acknowledged or handed back for redelivery.

Invariants:

* ``pending`` maps a position to ``(messages, sticky_hash)`` for every entry sent to this consumer
  and neither acknowledged nor handed back. The subscription keeps the reverse index
  (``position -> consumer``) so an ack finds its owner in O(1).
* ``permits`` may go negative: a batch entry is sent whole even when it costs more permits than
  are left, as Pulsar does; the consumer simply gets fewer messages until its next FLOW.
* Frames for one consumer are queued in ``_out`` during a dispatch round and written with one
  ``side.write`` by :meth:`flush` (coalesced writes) when the dispatcher yields the loop or runs
  out of work; a busy dispatcher may leave a few for its next slice (:meth:`holds_queued`). A frame whose entry is at least
  :data:`BY_REFERENCE_BYTES` (a batch entry, a large message) is queued as its head and the
  entry apart and the flush hands the connection a list of buffers (``side.writelines``: a
  vectored write), so the entry is never copied into a frame or a joined write. Each queued frame carries the cursor
  revision (PIP-269) it was made under (queued in revision order: revisions only grow); the
  dispatcher checks :attr:`oldest_queued_revision` once per flush and, if it is outdated, drops
  those frames with :meth:`drop_queued` and hands their positions back; a reset drops the
  queue the same way. A dropped frame gives its permits back; it never reached the client.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, Protocol

from broker.metrics.rates import RateMeter, iso_ms
from protocol.commands import (
    encode_active_consumer_change,
    encode_close_consumer,
    encode_message,
    encode_message_head,
    encode_message_run,
    encode_reached_end_of_topic,
)
from protocol.entry_metadata import has_prefix as has_broker_entry_metadata
from protocol.framing import BY_REFERENCE_BYTES, coalesce
from protocol.limits import MAGIC_BROKER_ENTRY_METADATA
from protocol.sub_types import SubType
from storage.positions import Position

__all__ = ["BY_REFERENCE_BYTES", "END_OF_TOPIC_CLIENTS", "HOLD_FRAMES",
           "MAX_UNACKED_MESSAGES_PER_CONSUMER", "Consumer", "HashRange"]


#: Pulsar's maxUnackedMessagesPerConsumer default: a Shared/Key_Shared consumer holding this
#: many unacknowledged messages gets nothing more until it has acked half of them (protects
#: against a stuck client).
MAX_UNACKED_MESSAGES_PER_CONSUMER = 50_000

#: CONNECT client_version prefixes of the clients that handle REACHED_END_OF_TOPIC (the Java
#: client sends "Pulsar-Java-v<version>"; the WebSocket API's in-process link "Horae-WebSocket").
#: The C++ client, and the Python client built on it, close the connection on that command, so
#: the others are never sent it.
END_OF_TOPIC_CLIENTS = ("Pulsar-Java-", "Horae-WebSocket")


#: A busy dispatcher (one that goes on after yielding the loop) writes a consumer's queued
#: frames when they reach this many, when the consumer runs out of permits, or every
#: few slices (:data:`broker.subscriptions.dispatchers.base.HOLD_SLICES`); else they wait for
#: its next slice. A dispatcher that runs out of work writes everything at once.
HOLD_FRAMES = 128

#: The first byte of a stored form with broker entry metadata (a plain entry's is 0: its
#: metadata size is below 16 MiB), as :func:`protocol.commands.encode_message` tells them apart.
_PREFIX_FIRST_BYTE = MAGIC_BROKER_ENTRY_METADATA >> 8
#: ``pending``'s (messages, sticky hash) of a lone message routed on no key
_PLAIN = (1, 0)
#: a queued frame's position and entry (:data:`_Queued`)
_POSITION, _ENTRY = itemgetter(1), itemgetter(3)

#: A queued frame: (cursor revision, position, messages, entry, encoded, whole). ``encoded`` is
#: None for the common delivery, encoded at the flush; else the frame (``whole``) or its head,
#: with the entry written after it apart (large entries).
_Queued = tuple[int, Position, int, bytes, bytes | None, bool]


class ConsumerTransport(Protocol):
    """What a consumer may ask of the connection it was subscribed on (implemented by
    :class:`broker.net.consumers.ConsumerSide`): write frames, know whether the peer reads,
    describe the client, and drop a consumer the broker closed."""

    @property
    def writes_paused(self) -> bool: ...

    @property
    def protocol_version(self) -> int: ...

    @property
    def remote_address(self) -> str: ...

    @property
    def client_version(self) -> str: ...

    def write(self, data: bytes) -> None: ...

    def writelines(self, parts: list[bytes]) -> None:
        """Write complete frames given as consecutive buffers (one vectored write)."""
        ...

    def forget(self, consumer: Consumer) -> None: ...


@dataclass(frozen=True, slots=True)
class HashRange:
    """An inclusive range of Key_Shared sticky-key hashes, as in Pulsar's IntRange."""

    start: int
    end: int

    def overlaps(self, other: HashRange) -> bool:
        return self.start <= other.end and other.start <= self.end


class Consumer:
    """Broker-side state of one consumer (``consumer_id`` is unique per connection only)."""

    def __init__(
        self,
        side: ConsumerTransport,
        consumer_id: int,
        *,
        name: str,
        sub_type: SubType | int,
        priority_level: int = 0,
        key_shared_mode: int | None = None,
        hash_ranges: tuple[HashRange, ...] = (),
        allow_out_of_order: bool = False,
        metadata: dict[str, str] | None = None,
        partition: int | None = None,
        broker_metadata: bool = False,
        max_unacked_messages: int = MAX_UNACKED_MESSAGES_PER_CONSUMER,
    ) -> None:
        self.side = side
        self.broker_metadata = broker_metadata
        """MESSAGE frames keep the broker entry metadata of stored entries (else stripped)."""
        #: maxUnackedMessagesPerConsumer (0: no limit); Shared/Key_Shared only
        self.max_unacked_messages = max_unacked_messages
        self.blocked_on_unacked = False
        self.consumer_id = consumer_id
        self.name = name
        self.sub_type = SubType(sub_type)
        self.priority_level = priority_level
        self.key_shared_mode = key_shared_mode
        self.hash_ranges = hash_ranges
        self.allow_out_of_order = allow_out_of_order
        self.metadata = metadata or {}
        self.partition = partition
        self.permits = 0
        self.pending: dict[Position, tuple[int, int]] = {}
        self.unacked_messages = 0
        self.closed = False
        self.is_active: bool | None = None  # Failover: last ACTIVE_CONSUMER_CHANGE sent
        self.end_of_topic_sent = False  # REACHED_END_OF_TOPIC goes out once
        # Counters are plain ints read by stats()/metrics at scrape time.
        self.msg_out_counter = 0
        self.bytes_out_counter = 0
        self.msg_redeliver_counter = 0
        self.msg_ack_counter = 0
        self.connected_since_ms = int(time.time() * 1000)
        self.last_acked_ms = 0
        self.last_consumed_ms = 0
        self.last_flow_ms = 0
        self._out: list[_Queued] = []   # frames for the next flush (see _Queued)
        self._by_reference = 0  # queued frames whose entry is written apart
        self._encoded = 0  # queued frames encoded when queued (the others at the flush)
        self._rates = RateMeter()

    # ------------------------------------------------------------------ sending

    @property
    def writable(self) -> bool:
        """False while the connection's transport asks us to stop writing (back-pressure)."""
        return not self.side.writes_paused

    @property
    def available(self) -> bool:
        return (self.permits > 0 and not self.closed and self.writable
                and not self.blocked_on_unacked)

    def reached_end_of_topic(self) -> None:
        """Tell the client it has consumed everything of a terminated topic (Pulsar's
        CommandReachedEndOfTopic; the Java client's ``hasReachedEndOfTopic()``): once, and
        only to a client that handles the command (:data:`END_OF_TOPIC_CLIENTS`)."""
        if self.end_of_topic_sent or self.closed:
            return
        if not self.side.client_version.startswith(END_OF_TOPIC_CLIENTS):
            return
        self.end_of_topic_sent = True
        self.side.write(encode_reached_end_of_topic(self.consumer_id))

    def send(
        self,
        position: Position,
        entry: bytes,
        *,
        messages: int,
        sticky_hash: int = 0,
        redelivery_count: int = 0,
        ack_set: list[int] | None = None,
        revision: int,
    ) -> None:
        """Queue one MESSAGE frame made under cursor ``revision``; call :meth:`flush` at the end
        of the dispatch round. The common delivery (a plain entry, first delivery, no ack set)
        is encoded at the flush, with the others queued for it (:func:`encode_message_run`);
        the rest is encoded now."""
        if redelivery_count or ack_set or (entry and entry[0] == _PREFIX_FIRST_BYTE):
            if len(entry) < BY_REFERENCE_BYTES or has_broker_entry_metadata(entry):
                # small, or a stored form whose prefix is kept or dropped: one joined frame
                self._out.append((revision, position, messages, entry, encode_message(
                    self.consumer_id,
                    position.ledger_id,
                    position.entry_id,
                    entry,
                    redelivery_count=redelivery_count,
                    ack_set=ack_set,
                    partition=self.partition,
                    broker_metadata=self.broker_metadata,
                ), True))
            else:
                self._out.append((revision, position, messages, entry, encode_message_head(
                    self.consumer_id,
                    position.ledger_id,
                    position.entry_id,
                    entry,
                    redelivery_count=redelivery_count,
                    ack_set=ack_set,
                    partition=self.partition,
                ), False))
                self._by_reference += 1
            self._encoded += 1
        else:
            self._out.append((revision, position, messages, entry, None, False))
            if len(entry) >= BY_REFERENCE_BYTES:
                self._by_reference += 1
        self.permits -= messages
        # one shared tuple for the usual pending message (a herd keeps 100,000s pending)
        self.pending[position] = _PLAIN if messages == 1 and not sticky_hash \
            else (messages, sticky_hash)
        self.unacked_messages += messages
        if 0 < self.max_unacked_messages <= self.unacked_messages and \
                self.sub_type.shares_messages:
            self.blocked_on_unacked = True
        self.msg_out_counter += messages
        self.bytes_out_counter += len(entry)
        if redelivery_count:
            self.msg_redeliver_counter += messages

    def holds_queued(self) -> bool:
        """May the queued frames wait for the next slice of a busy dispatcher instead of being
        written now? Yes while they are few (:data:`HOLD_FRAMES`) and the consumer still has
        permits: a write wakes the client, so a herd goes out in fewer, larger writes. A
        consumer out of permits is written at once (its client asks for more when it has
        received them)."""
        return 0 < len(self._out) < HOLD_FRAMES and self.permits > 0

    @property
    def oldest_queued_revision(self) -> int | None:
        """The cursor revision the oldest queued frame was made under (None: nothing queued).
        Frames queue in revision order, so if none of them is outdated, this one is not."""
        return self._out[0][0] if self._out else None

    def flush(self) -> None:
        """Write the queued frames (the dispatcher dropped the outdated ones first): one write,
        a vectored one when an entry is large enough to go by reference."""
        out = self._out
        if not out:
            return
        if self._encoded:
            parts = self._frame_parts(out)
        elif len(out) == 1:   # one frame (one message in flight): the one-frame encoder
            item = out[0]
            pos, entry = item[1], item[3]
            parts = [encode_message_head(self.consumer_id, pos[0], pos[1], entry,
                                         partition=self.partition), entry]
        else:   # the positions and entries of the queued frames, taken out in C
            parts = encode_message_run(self.consumer_id, self.partition,
                                       list(map(_POSITION, out)), list(map(_ENTRY, out)))
        by_reference = self._by_reference
        out.clear()
        self._by_reference = self._encoded = 0
        self.last_consumed_ms = int(time.time() * 1000)
        if self.closed:
            return
        if by_reference:
            self.side.writelines(coalesce(parts))
        else:
            self.side.write(b"".join(parts))

    def _frame_parts(self, out: list[_Queued]) -> list[bytes]:
        """The buffers of the queued frames, some encoded when queued, the others now (runs of
        them in one call)."""
        parts: list[bytes] = []
        positions: list[Position] = []
        entries: list[bytes] = []
        for _, pos, _, entry, encoded, whole in out:
            if encoded is None:
                positions.append(pos)
                entries.append(entry)
                continue
            if positions:
                parts += encode_message_run(self.consumer_id, self.partition, positions, entries)
                positions, entries = [], []
            parts.append(encoded)
            if not whole:
                parts.append(entry)
        if positions:
            parts += encode_message_run(self.consumer_id, self.partition, positions, entries)
        return parts

    def drop_queued(self, which: Callable[[int], bool] | None = None) -> list[Position]:
        """Forget queued, unwritten frames (all, or those whose revision ``which`` selects):
        their permits and out counters come back. They stay in ``pending`` for the caller
        (the dispatcher) to release or hand back. Returns their positions."""
        kept: list[_Queued] = []
        dropped: list[Position] = []
        for item in self._out:
            if which is not None and not which(item[0]):
                kept.append(item)
                continue
            _, pos, messages, entry, encoded, whole = item
            if len(entry) >= BY_REFERENCE_BYTES and not whole:
                self._by_reference -= 1
            if encoded is not None:
                self._encoded -= 1
            self.permits += messages
            self.msg_out_counter -= messages
            self.bytes_out_counter -= len(entry)
            dropped.append(pos)
        self._out = kept
        return dropped

    def take_pending(self, position: Position) -> tuple[int, int] | None:
        """Forget a pending position (acked or handed back); returns (messages, hash) if it was ours."""
        item = self.pending.pop(position, None)
        if item is not None:
            self.unacked_messages -= item[0]
            if self.blocked_on_unacked and \
                    self.unacked_messages <= self.max_unacked_messages // 2:
                self.blocked_on_unacked = False   # Pulsar unblocks at half the limit
        return item

    def take_pending_many(self, positions: list[Position]) -> list[tuple[int, int] | None]:
        """:meth:`take_pending` of each position (an ACK's ids at once): their (messages,
        hash), None for a position that was not pending here."""
        pop = self.pending.pop
        items = [pop(pos, None) for pos in positions]
        plain = items.count(_PLAIN)   # the usual ACK: every id a lone pending message, in C
        taken = plain if plain == len(items) else \
            sum(item[0] for item in items if item is not None)
        if taken:
            self.unacked_messages -= taken
            if self.blocked_on_unacked and \
                    self.unacked_messages <= self.max_unacked_messages // 2:
                self.blocked_on_unacked = False   # Pulsar unblocks at half the limit
        return items

    def notify_active(self, is_active: bool) -> None:
        """ACTIVE_CONSUMER_CHANGE (Failover), sent only when the state changes."""
        if self.is_active is is_active or self.closed:
            return
        self.is_active = is_active
        if self.side.protocol_version >= 12:
            self.side.write(encode_active_consumer_change(self.consumer_id, is_active))

    def disconnect(self) -> None:
        """Broker-initiated close: the client re-subscribes (after a seek or a reset)."""
        if not self.closed:
            self.side.write(encode_close_consumer(self.consumer_id, 0))

    # ------------------------------------------------------------------ stats

    @property
    def sub_type_name(self) -> str:
        return self.sub_type.name

    def _counter_values(self) -> tuple[float, ...]:
        return (self.msg_out_counter, self.bytes_out_counter, self.msg_redeliver_counter,
                self.msg_ack_counter)

    def resume_rates(self, since: float) -> None:
        """Rate sampling paused while this consumer stood still (:meth:`RateMeter.resume`)."""
        self._rates.resume(since)

    def sample_rates(self, now: float) -> None:
        self._rates.sample(now, self._counter_values())

    def rates(self, now: float) -> tuple[float, ...]:
        """(msgRateOut, msgThroughputOut, msgRateRedeliver, messageAckRate) per second."""
        return tuple(self._rates.rates(now, self._counter_values()))

    def stats(self, now: float | None = None) -> dict[str, Any]:
        """Pulsar's ConsumerStats shape."""
        rate_out, thr_out, rate_redeliver, ack_rate = (
            self.rates(now) if now is not None else (0.0, 0.0, 0.0, 0.0))
        return {
            "msgRateOut": rate_out,
            "msgThroughputOut": thr_out,
            "bytesOutCounter": self.bytes_out_counter,
            "msgOutCounter": self.msg_out_counter,
            "msgRateRedeliver": rate_redeliver,
            "messageAckRate": ack_rate,
            "chunkedMessageRate": 0.0,
            "consumerName": self.name,
            "availablePermits": self.permits,
            "unackedMessages": self.unacked_messages,
            "avgMessagesPerEntry": 0,
            "blockedConsumerOnUnackedMsgs": self.blocked_on_unacked,
            "lastAckedTimestamp": self.last_acked_ms,
            "lastConsumedTimestamp": self.last_consumed_ms,
            "lastConsumedFlowTimestamp": self.last_flow_ms,
            "keyHashRanges": [f"[{r.start}, {r.end}]" for r in self.hash_ranges] or None,
            "metadata": dict(self.metadata),
            "address": self.side.remote_address,
            "connectedSince": iso_ms(self.connected_since_ms),
            "clientVersion": self.side.client_version,
            "priorityLevel": self.priority_level,
        }
