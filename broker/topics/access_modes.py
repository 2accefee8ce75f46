"""Producer admission of one topic: access modes (Shared, Exclusive, ExclusiveWithFencing,
WaitForExclusive), the attached producers, the WaitForExclusive line.

Theory of operation
-------------------
:class:`ProducerAdmission` is owned by a topic (:class:`broker.topics.topic.Topic` and
:class:`broker.topics.nonpersistent.NonPersistentTopic` alike) and is its producer registry:
the attached producers by name (``producers``), their rate meters, and the WaitForExclusive
producers waiting in line. It attaches a producer (:meth:`ProducerAdmission.add`), fences the
others out for ExclusiveWithFencing, forgets a producer that went away
(:meth:`ProducerAdmission.remove`) and then promotes the first live waiter, answering it with
the PRODUCER_SUCCESS its topic builds (the ``success`` callback). The topic checks its own
state (closed, fenced, terminated, backlog quota) before it asks.

:class:`ProducerAccess` holds the rules alone: for every producer that asks to attach, whether
it is admitted now, must wait in line (WaitForExclusive) or is refused; it keeps the topic
epoch and the producer holding the topic exclusively, by identity (a displaced or fenced
producer of the same name that goes away does not release the topic its successor holds).
Rules, error codes and texts are Pulsar's (``AbstractTopic.incrementTopicEpochIfNeeded``):

- Shared: refused with ProducerBusy while an exclusive producer holds the topic or waits for it.
- Exclusive: refused with ProducerFenced while another exclusive producer holds (or waits for)
  the topic, or while shared producers are attached.
- ExclusiveWithFencing: always admitted; every other producer and waiter is fenced out.
- WaitForExclusive: queued (FIFO) while any producer is attached; promoted when the topic has
  none left.

The topic epoch starts unset and grows by one on every exclusive grant (a producer that comes
back with the epoch it was given keeps it); an exclusive producer that presents an epoch older
than the topic's was superseded in between and is fenced. The epoch lives as long as the
loaded topic (it is not persisted).
"""

from __future__ import annotations

import enum
import logging
from collections import deque
from collections.abc import Callable

from broker.metrics.rates import RateMeter
from broker.topics.producer import Producer
from protocol import commands as C
from protocol import pulsar_pb as pb
from protocol.errors import ProducerBusyError, ProducerFencedError, ServerError

__all__ = ["Admission", "ProducerAccess", "ProducerAdmission"]

log = logging.getLogger("horae.topic")

#: PRODUCER_SUCCESS of a producer that holds the topic: (producer, request id, schema version).
SuccessFrame = Callable[[Producer, int, "bytes | None"], bytes]


class Admission(enum.Enum):
    NOW = "now"  # attach the producer
    FENCE_OTHERS = "fence-others"  # attach it after fencing every other producer and waiter
    QUEUE = "queue"  # WaitForExclusive: answer producer_ready=false, promote later


class ProducerAccess:
    """The access-mode rules and state of one topic (see the module docstring)."""

    def __init__(self) -> None:
        self.topic_epoch: int | None = None
        self.holder: Producer | None = None  # the producer holding the topic exclusively

    @property
    def exclusive_name(self) -> str | None:
        return self.holder.name if self.holder is not None else None

    def admit(self, producer: Producer, requested_epoch: int | None, *,
              has_producers: bool, has_waiters: bool) -> Admission:
        """Decide for *producer* by its access mode (*has_waiters*: WaitForExclusive
        producers are in line); raises ProducerBusyError / ProducerFencedError with Pulsar's
        texts when it is refused."""
        mode = producer.access_mode
        if mode == pb.Shared:
            if self.holder is not None or has_waiters:
                raise ProducerBusyError(
                    f"Topic has an existing exclusive producer: {self.exclusive_name}")
            return Admission.NOW
        if mode == pb.Exclusive:
            if self.holder is not None or has_waiters:
                raise ProducerFencedError(
                    f"Topic has an existing exclusive producer: {self.exclusive_name}")
            if has_producers:
                raise ProducerFencedError("Topic has existing shared producers")
            self._grant(producer, requested_epoch)
            return Admission.NOW
        if mode == pb.ExclusiveWithFencing:
            fence = self.holder is not None or has_producers or has_waiters
            self._grant(producer, requested_epoch)
            return Admission.FENCE_OTHERS if fence else Admission.NOW
        # WaitForExclusive
        if self.holder is not None or has_producers:
            return Admission.QUEUE
        self._grant(producer, requested_epoch)
        return Admission.NOW

    def producer_success(self, request_id: int, producer: Producer, last_sequence_id: int,
                         schema_version: bytes | None) -> bytes:
        """PRODUCER_SUCCESS of a producer that holds the topic now (admitted, or a waiter
        promoted): it carries the topic epoch for every access mode but Shared."""
        epoch = self.topic_epoch if producer.access_mode != pb.Shared else None
        return C.encode_producer_success(request_id, producer.name, last_sequence_id,
                                         schema_version, topic_epoch=epoch)

    def promote(self, producer: Producer) -> None:
        """A queued WaitForExclusive producer takes the topic (it has no producer left)."""
        self._grant(producer, None)

    def released(self, producer: Producer) -> None:
        """An attached producer went away; the holder frees the topic."""
        if producer is self.holder:
            self.holder = None

    def _grant(self, producer: Producer, requested_epoch: int | None) -> None:
        current = self.topic_epoch
        if requested_epoch is not None and current is not None and requested_epoch < current:
            raise ProducerFencedError(
                f"Topic epoch has already moved. Current epoch: {current}, "
                f"Producer epoch: {requested_epoch}")
        if requested_epoch is not None:
            self.topic_epoch = requested_epoch
        else:
            self.topic_epoch = (-1 if current is None else current) + 1
        self.holder = producer


class ProducerAdmission:
    """The producers of one topic and their admission (see the module docstring).

    *success* builds the PRODUCER_SUCCESS of a producer that holds the topic (the topic knows
    its sequence state); *accepting* says whether the topic may still take a producer (a
    waiter is not promoted onto a closing topic); *full* names the topic in logs.

    ``maxProducersPerTopic`` is decided in :meth:`add`, in the step that registers the
    producer: a check made before the PRODUCER's awaits (topic load, sequence recovery,
    schema) would let a burst that waited together pass it together."""

    def __init__(self, full: str, success: SuccessFrame, accepting: Callable[[], bool]) -> None:
        self.full = full
        self.access = ProducerAccess()
        self.producers: dict[str, Producer] = {}
        self._success = success
        self._accepting = accepting
        self._rates: dict[Producer, RateMeter] = {}
        # WaitForExclusive producers: (producer, PRODUCER request id, schema version answered)
        self._waiters: deque[tuple[Producer, int, bytes | None]] = deque()

    @property
    def waiting(self) -> int:
        """WaitForExclusive producers queued for the topic (stats ``waitingPublishers``)."""
        return len(self._waiters)

    def check_limit(self, max_producers: int) -> None:
        """ProducerBusy when one more attached producer would pass *max_producers* (0 = no
        limit): Pulsar's ``AbstractTopic.internalAddProducer``."""
        if 0 < max_producers <= len(self.producers):
            raise ProducerBusyError("Topic reached max producers limit")

    def add(self, producer: Producer, requested_epoch: int | None,
            max_producers: int = 0) -> Admission:
        """Attach *producer* by its access mode and *max_producers* (0 = no limit); returns
        NOW/FENCE_OTHERS when it is attached, QUEUE when the caller must queue it
        (:meth:`queue`). Raises ProducerBusyError / ProducerFencedError."""
        existing = self.producers.get(producer.name)
        if existing is not None:
            if existing.connection.is_closed or producer.epoch > existing.epoch:
                # The client reconnected (its epoch grows on every reconnect, Pulsar's
                # isSuccessorTo) before this broker noticed the old connection was gone.
                existing.connection.producer_detached(existing)
                existing.close()
            elif producer.access_mode != pb.ExclusiveWithFencing:
                raise ProducerBusyError(
                    f"Producer with name '{producer.name}' is already connected to topic")
        self._drop_dead_waiters()
        admission = self.access.admit(producer, requested_epoch,
                                      has_producers=bool(self.producers),
                                      has_waiters=bool(self._waiters))
        if admission is Admission.QUEUE:
            return admission
        if admission is Admission.FENCE_OTHERS:
            self._fence_others()
        else:
            # NOW beside other producers is Shared only, whose admission changed nothing.
            self.check_limit(max_producers)
        self._register(producer)
        return admission

    def queue(self, producer: Producer, request_id: int, schema_version: bytes | None) -> None:
        """A WaitForExclusive producer waits (FIFO) until the topic has no producer."""
        self._waiters.append((producer, request_id, schema_version))

    def remove(self, producer: Producer) -> None:
        """*producer* went away: forget it, then promote a waiter if none is left."""
        if self.producers.get(producer.name) is producer:
            del self.producers[producer.name]
        self.access.released(producer)
        self._rates.pop(producer, None)
        if not self.producers and self._waiters:
            self._promote_waiter()

    def _fence_others(self) -> None:
        """ExclusiveWithFencing took the topic: fail every waiter, close every producer (the
        new holder is already granted, so their removal does not release the topic)."""
        waiters = list(self._waiters)
        self._waiters.clear()
        for waiter, request_id, _ in waiters:
            waiter.abandon()
            waiter.connection.producer_detached(waiter)
            waiter.connection.write(C.encode_error(request_id, ServerError.ProducerFenced,
                                                   "Fenced out"))
        for p in list(self.producers.values()):
            log.info("fencing out producer %s on %s", p.name, self.full)
            p.disconnect()

    def _drop_dead_waiters(self) -> None:
        live = [w for w in self._waiters if not (w[0].closed or w[0].connection.is_closed)]
        if len(live) != len(self._waiters):
            self._waiters = deque(live)

    def _register(self, producer: Producer) -> None:
        self.producers[producer.name] = producer
        self._rates[producer] = RateMeter()

    def _promote_waiter(self) -> None:
        while self._waiters and self._accepting():
            producer, request_id, schema_version = self._waiters.popleft()
            conn = producer.connection
            if conn.is_closed or producer.closed:
                continue
            self.access.promote(producer)
            self._register(producer)
            conn.producer_ready(producer)
            conn.write(self._success(producer, request_id, schema_version))
            return

    # ------------------------------------------------------------------ rates

    def resume_rates(self, since: float) -> None:
        """Rate sampling paused while the producers stood still (:meth:`RateMeter.resume`)."""
        for meter in self._rates.values():
            meter.resume(since)

    def sample_rates(self, now: float) -> None:
        for p, meter in self._rates.items():
            meter.sample(now, (p.msg_in_counter, p.bytes_in_counter))

    def producer_rates(self, producer: Producer, now: float) -> tuple[float, float]:
        """(msgRateIn, msgThroughputIn) of one attached producer, per second."""
        meter = self._rates.get(producer)
        if meter is None:
            return 0.0, 0.0
        r = meter.rates(now, (producer.msg_in_counter, producer.bytes_in_counter))
        return r[0], r[1]
