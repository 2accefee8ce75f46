"""Publish refusals: producers blocked while storage is read-only, counted by reason.

Theory of operation
-------------------
When disk usage reaches ``diskUsageThreshold`` the store turns read-only (storage/diskusage.py)
and every append fails with ``StorageReadOnlyError``; nothing is fenced and no topic is
reloaded. The broker must tell the producer, and the official C++/Python client (3.13, C++
4.2.0) leaves only one way that makes the application see an error instead of a send that is
re-sent forever: a SEND_ERROR other than ChecksumError makes it close the whole connection
(consumers on it included) and re-send; a producer re-creation refused with
``ProducerBlockedQuotaExceededException`` makes it fail every pending send with that result
(``ProducerImpl::handleCreateProducer``). So, as Pulsar does for a backlog quota with the
``producer_exception`` policy:

1. a SEND whose append was refused is not answered; the producer (:class:`Producer`) drops
   what it still queues, releases the connection's pending-publish count, closes itself and
   sends CLOSE_PRODUCER (it stays registered on its connection until the client re-creates or
   closes it, so SENDs already on the wire are dropped instead of closing the connection);
2. the client re-creates the producer (same producer id): :meth:`PublishRefusals.check_producer`
   refuses it while the store is read-only, and the client fails the pending sends;
3. below ``diskUsageLwmThreshold`` the store is writable again by itself; the client's next
   re-creation attempt (its reconnection back-off) succeeds and publishing resumes.

Consumers are untouched throughout: reads, acknowledgements and trimming (which frees the
space) keep working.

``counts`` (reason -> refusals) is ``horae_publish_refused_total{reason}``: every refused
SEND and every refused producer creation counts one. Owned by the BrokerService; loop only.
"""

from __future__ import annotations

from typing import Protocol

from protocol.errors import RequestError, ServerError

__all__ = ["REASON_DISK", "DiskState", "PublishRefusals"]

#: ``reason`` label of refusals because the store is read-only (disk above the watermark).
REASON_DISK = "disk"


class DiskState(Protocol):
    """The store's disk monitor (storage.diskusage.DiskMonitor)."""

    read_only: bool
    usage: float


class PublishRefusals:
    """Counts refused publishes by reason; refuses producer creation while storage is full."""

    def __init__(self, disk: DiskState) -> None:
        self._disk = disk
        self.counts: dict[str, int] = {REASON_DISK: 0}

    def count(self, reason: str, refused: int = 1) -> None:
        self.counts[reason] = self.counts.get(reason, 0) + refused

    def check_producer(self) -> None:
        """Raise ProducerBlockedQuotaExceededException while the store is read-only."""
        if self._disk.read_only:
            self.count(REASON_DISK)
            raise RequestError(
                f"Cannot create producer: storage is read-only, disk usage "
                f"{self._disk.usage:.1%} reached diskUsageThreshold; publishing resumes once "
                "it falls below diskUsageLwmThreshold",
                ServerError.ProducerBlockedQuotaExceededException)
