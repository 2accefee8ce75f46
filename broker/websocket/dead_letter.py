"""A consumer session's dead-letter topic (``maxRedeliverCount``, ``deadLetterTopic``).

Theory of operation
-------------------
Pulsar's client implements the dead-letter policy, so the WebSocket service (a client) does
too, as the Java client's ``ConsumerImpl``: a message that arrives with ``redeliveryCount >=
maxRedeliverCount`` is a *candidate* (:meth:`DeadLetters.note`); when such a message would be
handed back again (negative ack, ack timeout), it is published to the dead-letter topic
instead (default ``<topic>-<subscription>-DLQ``) with the properties ``REAL_TOPIC`` and
``ORIGIN_MESSAGE_ID`` added, and acknowledged on its subscription once the dead-letter topic
has stored it (:meth:`DeadLetters.publish`). The producer is created on the session's link on
first use, as the session's role.

Bounds: candidates are kept per entry position for at most :data:`MAX_CANDIDATES` positions
(the oldest forgotten first: such a message is then simply redelivered once more).
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from broker.websocket.link import BrokerLink
from protocol import commands as C
from protocol import pulsar_pb as pb
from protocol.errors import RequestError
from protocol.metadata import encode_entry

__all__ = ["MAX_CANDIDATES", "DeadLetters", "Letter", "default_topic"]

#: Most entry positions whose messages are kept as dead-letter candidates.
MAX_CANDIDATES = 10_000


def default_topic(topic: str, subscription: str) -> str:
    """Pulsar's WebSocket default: ``String.format("%s-%s-DLQ", topic, subscription)``."""
    return f"{topic}-{subscription}-DLQ"


@dataclass(frozen=True, slots=True)
class Letter:
    """One message that may go to the dead-letter topic."""

    payload: bytes
    properties: tuple[tuple[str, str], ...]
    key: str | None
    event_time: int
    batch_index: int
    origin_id: str
    """Pulsar's ``MessageId.toString()``: ``ledger:entry:partition[:batchIndex]``."""


class _Receipts:
    """The dead-letter producer's listener: one future per sequence id."""

    def __init__(self, closed: Callable[[], None]) -> None:
        self.waiting: dict[int, asyncio.Future[None]] = {}
        self._closed = closed

    def on_receipt(self, sequence_id: int, ledger_id: int, entry_id: int) -> None:
        future = self.waiting.pop(sequence_id, None)
        if future is not None and not future.done():
            future.set_result(None)

    def on_send_error(self, sequence_id: int, error: RequestError) -> None:
        future = self.waiting.pop(sequence_id, None)
        if future is not None and not future.done():
            future.set_exception(error)

    def on_closed_by_broker(self) -> None:
        self._closed()  # the next publish creates the producer again
        for future in self.waiting.values():
            if not future.done():
                future.set_exception(RequestError("The dead-letter producer was closed"))
        self.waiting.clear()


class DeadLetters:
    """Candidates and the dead-letter producer of one consumer session."""

    def __init__(self, link: BrokerLink, source_topic: str, topic: str,
                 max_redeliver_count: int) -> None:
        self._link = link
        self._source_topic = source_topic
        self.topic = topic
        self.max_redeliver_count = max_redeliver_count
        self._candidates: OrderedDict[tuple[int, int], list[Letter]] = OrderedDict()
        self._producer: tuple[int, str, _Receipts] | None = None
        self._opening: asyncio.Lock = asyncio.Lock()
        self._next_sequence = 0

    def is_candidate(self, redelivery_count: int) -> bool:
        return redelivery_count >= self.max_redeliver_count

    def note(self, position: tuple[int, int], letters: list[Letter]) -> None:
        if not letters:
            return
        self._candidates[position] = letters
        self._candidates.move_to_end(position)
        while len(self._candidates) > MAX_CANDIDATES:
            self._candidates.popitem(last=False)

    def take(self, position: tuple[int, int]) -> list[Letter] | None:
        return self._candidates.pop(position, None)

    def acked(self, position: tuple[int, int], batch_index: int) -> None:
        """The client acknowledged a message (of a batch: index *batch_index*, else -1)."""
        letters = self._candidates.get(position)
        if letters is None:
            return
        kept = [letter for letter in letters
                if batch_index >= 0 and letter.batch_index != batch_index]
        if kept:
            self._candidates[position] = kept
        else:
            del self._candidates[position]

    async def publish(self, letters: list[Letter]) -> None:
        """Store *letters* on the dead-letter topic; raises :class:`RequestError`."""
        producer_id, name, receipts = await self._open()
        futures = []
        for letter in letters:
            sequence_id = self._next_sequence
            self._next_sequence += 1
            md = pb.MessageMetadata(producer_name=name, sequence_id=sequence_id,
                                    publish_time=int(time.time() * 1000))
            for key, value in letter.properties:
                md.properties.add(key=key, value=value)
            md.properties.add(key="REAL_TOPIC", value=self._source_topic)
            md.properties.add(key="ORIGIN_MESSAGE_ID", value=letter.origin_id)
            if letter.key is not None:
                md.partition_key = letter.key
            if letter.event_time:
                md.event_time = letter.event_time
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            receipts.waiting[sequence_id] = future
            futures.append(future)
            self._link.send(C.encode_send(producer_id, sequence_id,
                                          encode_entry(md, letter.payload)))
        await asyncio.gather(*futures)

    async def _open(self) -> tuple[int, str, _Receipts]:
        async with self._opening:
            if self._producer is None:
                producer_id = self._link.next_id()
                request_id = self._link.next_request_id()
                answer = await self._link.request(
                    C.encode_producer(self.topic, producer_id, request_id), request_id)
                success = answer.producer_success
                last = success.last_sequence_id if success.HasField("last_sequence_id") else -1
                self._next_sequence = last + 1
                receipts = _Receipts(self._producer_closed)
                self._link.add_producer(producer_id, receipts)
                self._producer = (producer_id, success.producer_name, receipts)
            return self._producer

    def _producer_closed(self) -> None:
        self._producer = None
