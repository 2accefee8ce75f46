"""Producer access modes of one topic: Shared, Exclusive, ExclusiveWithFencing, WaitForExclusive.

Theory of operation
-------------------
:class:`ProducerAccess` is owned by a :class:`broker.topics.topic.Topic` and decides, for every
producer that asks to attach, whether it is admitted now, must wait in line
(WaitForExclusive) or is refused; it keeps the topic epoch and the name of the exclusive
producer. It has no side effects on producers: the topic carries out its decisions (fencing the
others, queueing, answering a promoted waiter). Rules, error codes and texts are Pulsar's
(``AbstractTopic.incrementTopicEpochIfNeeded``):

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

from protocol import commands as C
from protocol import pulsar_pb as pb
from protocol.errors import ProducerBusyError, ProducerFencedError

__all__ = ["Admission", "ProducerAccess"]


class Admission(enum.Enum):
    NOW = "now"  # attach the producer
    FENCE_OTHERS = "fence-others"  # attach it after fencing every other producer and waiter
    QUEUE = "queue"  # WaitForExclusive: answer producer_ready=false, promote later


class ProducerAccess:
    """The access-mode state of one topic (see the module docstring)."""

    def __init__(self) -> None:
        self.topic_epoch: int | None = None
        self.exclusive_name: str | None = None

    @property
    def has_exclusive(self) -> bool:
        return self.exclusive_name is not None

    def admit(self, mode: int, name: str, requested_epoch: int | None, *,
              has_producers: bool, has_waiters: bool) -> Admission:
        """Decide for a producer *name* in access *mode* (*has_waiters*: WaitForExclusive
        producers are in line); raises ProducerBusyError / ProducerFencedError with Pulsar's
        texts when it is refused."""
        if mode == pb.Shared:
            if self.has_exclusive or has_waiters:
                raise ProducerBusyError(
                    f"Topic has an existing exclusive producer: {self.exclusive_name}")
            return Admission.NOW
        if mode == pb.Exclusive:
            if self.has_exclusive or has_waiters:
                raise ProducerFencedError(
                    f"Topic has an existing exclusive producer: {self.exclusive_name}")
            if has_producers:
                raise ProducerFencedError("Topic has existing shared producers")
            self._grant(name, requested_epoch)
            return Admission.NOW
        if mode == pb.ExclusiveWithFencing:
            fence = self.has_exclusive or has_producers or has_waiters
            self._grant(name, requested_epoch)
            return Admission.FENCE_OTHERS if fence else Admission.NOW
        # WaitForExclusive
        if self.has_exclusive or has_producers:
            return Admission.QUEUE
        self._grant(name, requested_epoch)
        return Admission.NOW

    def producer_success(self, request_id: int, name: str, access_mode: int,
                         last_sequence_id: int, schema_version: bytes | None) -> bytes:
        """PRODUCER_SUCCESS of a producer that holds the topic now (admitted, or a waiter
        promoted): it carries the topic epoch for every access mode but Shared."""
        epoch = self.topic_epoch if access_mode != pb.Shared else None
        return C.encode_producer_success(request_id, name, last_sequence_id, schema_version,
                                         topic_epoch=epoch)

    def promote(self, name: str) -> None:
        """A queued WaitForExclusive producer takes the topic (it has no producer left)."""
        self._grant(name, None)

    def released(self, name: str, mode: int) -> None:
        """An attached producer went away; an exclusive one frees the topic."""
        if mode != pb.Shared and name == self.exclusive_name:
            self.exclusive_name = None

    def _grant(self, name: str, requested_epoch: int | None) -> None:
        current = self.topic_epoch
        if requested_epoch is not None and current is not None and requested_epoch < current:
            raise ProducerFencedError(
                f"Topic epoch has already moved. Current epoch: {current}, "
                f"Producer epoch: {requested_epoch}")
        if requested_epoch is not None:
            self.topic_epoch = requested_epoch
        else:
            self.topic_epoch = (-1 if current is None else current) + 1
        self.exclusive_name = name
