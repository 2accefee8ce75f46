"""One connection's producers: their registry, their SENDs and their back-pressure accounting.

Theory of operation
-------------------
A :class:`ProducerSide` per connection (``ServerConnection.producer_side``), made with the
connection, as :class:`broker.net.consumers.ConsumerSide` is for consumers. It is the
:class:`broker.topics.producer.ProducerTransport` every producer of the connection is created
with:

- the registries: ``producers`` (attached), ``waiting_producers`` (WaitForExclusive, queued),
  ``producers_creating`` (PRODUCER requests in flight). The PRODUCER and CLOSE_PRODUCER
  handlers (:mod:`broker.net.producers`) fill and empty them; a topic changes them only through
  :meth:`producer_detached` and :meth:`producer_ready`;
- SENDs: the connection hands each producer's consecutive SENDs of one read over as one run
  (:meth:`on_sends`, the one SEND entry); a failure there closes this connection only;
- back-pressure: SENDs started and answered are counted by the connection's
  :class:`broker.net.throttle.ReadThrottle` (:meth:`publish_started`, :meth:`publish_finished`),
  and a producer over its topic's publish rate holds reading until the window ends
  (:meth:`hold_reading_for`).

When the connection is lost, :meth:`close` closes every producer and abandons the queued ones.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from broker.net.throttle import ReadThrottle
from broker.topics.producer import Producer
from protocol.send_path import SendFrame

__all__ = ["ProducerSide", "ProducerSideConnection"]

log = logging.getLogger("horae.net.connection")


class ProducerSideConnection(Protocol):
    """What the producer side asks of its connection
    (:class:`broker.net.connection.ServerConnection`)."""

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    @property
    def is_closed(self) -> bool: ...

    @property
    def remote_address(self) -> str: ...

    @property
    def client_version(self) -> str: ...

    @property
    def throttle(self) -> ReadThrottle: ...

    def write(self, data: bytes) -> None: ...

    def close(self, reason: str = "") -> None: ...


class ProducerSide:
    """Per-connection registry of producers and the hand-off of their SENDs."""

    def __init__(self, connection: ProducerSideConnection) -> None:
        self.connection = connection
        self.loop = connection.loop
        self.write = connection.write  # (data: bytes) -> None: the connection's output
        self.producers: dict[int, Producer] = {}
        self.waiting_producers: dict[int, Producer] = {}  # WaitForExclusive, queued
        self.producers_creating: set[int] = set()  # PRODUCER requests in flight
        self._rate_release: asyncio.TimerHandle | None = None

    # ------------------------------------------------------------------ ProducerTransport

    @property
    def is_closed(self) -> bool:
        return self.connection.is_closed

    @property
    def remote_address(self) -> str:
        return self.connection.remote_address

    @property
    def client_version(self) -> str:
        return self.connection.client_version

    def publish_started(self, count: int = 1, nbytes: int = 0) -> None:
        self.connection.throttle.started(count, nbytes)

    def publish_finished(self, count: int = 1, nbytes: int = 0) -> None:
        self.connection.throttle.finished(count, nbytes)

    def hold_reading_for(self, seconds: float) -> None:
        """A topic's publish rate is exceeded: not read until its window ends."""
        self.connection.throttle.rate_held(True)
        if self._rate_release is None:
            self._rate_release = self.loop.call_later(seconds, self._release_rate_hold)

    def _release_rate_hold(self) -> None:
        self._rate_release = None
        self.connection.throttle.rate_held(False)

    def producer_detached(self, producer: Producer) -> None:
        if self.producers.get(producer.producer_id) is producer:
            del self.producers[producer.producer_id]
        if self.waiting_producers.get(producer.producer_id) is producer:
            del self.waiting_producers[producer.producer_id]

    def producer_ready(self, producer: Producer) -> None:
        self.waiting_producers.pop(producer.producer_id, None)
        self.producers[producer.producer_id] = producer

    # ------------------------------------------------------------------ SENDs, close

    def on_sends(self, producer: Producer, run: list[SendFrame]) -> bool:
        """Hand one producer's consecutive SENDs over (the one SEND entry of a producer);
        False when the connection was closed."""
        try:
            producer.on_sends(run)
        except Exception:
            log.exception("SEND from %s failed", self.connection.remote_address)
            self.connection.close("internal error")
            return False
        return not self.connection.is_closed

    def close(self) -> None:
        """The connection is gone: close every producer, abandon the queued ones."""
        for producer in list(self.producers.values()):
            producer.close()
        self.producers.clear()
        for waiting in self.waiting_producers.values():
            waiting.abandon()  # never promoted
        self.waiting_producers.clear()
