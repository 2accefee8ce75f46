"""Publish back-pressure: stop reading a connection instead of failing its SENDs.

Theory of operation
-------------------
Pulsar never refuses a SEND for being one too many; it stops reading the socket (Netty
autoread off) and lets TCP push back on the client. Three limits, with Pulsar's names:

* ``maxPendingPublishRequestsPerConnection`` (per connection): once that many SENDs wait for
  their receipt, the connection is not read; reading resumes when half are answered.
* ``maxMessagePublishBufferSizeInMB`` (broker-wide; Pulsar divides it among its IO threads,
  Horae has one event loop): once the bytes of SENDs received and not yet answered reach it,
  *every* connection stops being read; all resume when the total falls below half. ``<= 0``
  disables it (Pulsar's ``-1``).
* ``pulsarChannelWriteBufferHighWaterMark`` / ``LowWaterMark`` with
  ``pulsarChannelPauseReceivingRequestsIfUnwritable`` (per connection, PIP-434): once the
  connection's unsent output passes the high water mark (the transport calls
  ``pause_writing``), it is not read until the output drains below the low water mark
  (``resume_writing``). A peer that sends and never reads (a PING flood, a producer that never
  reads its receipts) then costs at most the high water mark plus the answers to one socket
  read: what was already read is still answered, in order, and goes out when the peer reads.
  The broker-wide :class:`OutputPauses` counts these pauses for the metrics.

:class:`PublishBuffer` is the broker-wide account, owned by the server
(:class:`broker.server.BrokerServer`), one per broker. :class:`ReadThrottle` is one
connection's account, owned by its :class:`broker.net.connection.ServerConnection`; the
connection calls :meth:`ReadThrottle.attach` once it has a transport, :meth:`started` /
:meth:`finished` for every SEND taken / answered, and :meth:`detach` exactly once when it is
lost. A connection is read iff nothing holds it (independent reasons, as Pulsar's
ServerCnxThrottleTracker counts them): the two limits, the connection's unsent output
(:meth:`ReadThrottle.output_full`), and :meth:`ReadThrottle.backlog_held`, set while the
connection's consumer side still applies big ACKs in slices (:mod:`broker.net.sliced`), so one
peer cannot queue more of them than one read holds. Invariant: the buffer's ``pending_bytes`` is the sum of
its attached throttles' ``pending_bytes``; a detached throttle hands its bytes back at once
(the SENDs of a lost connection never hold the broker's reads), and its later answers touch
only its own counters. Everything runs on the event loop; nothing here blocks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

__all__ = ["OutputPauses", "PublishBuffer", "ReadThrottle", "Reader"]

_MB = 1024 * 1024


class Reader(Protocol):
    """What is paused: the connection's transport."""

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...


class PublishBuffer:
    """``maxMessagePublishBufferSizeInMB``: bytes of unanswered SENDs across the broker."""

    def __init__(self, max_size_in_mb: int) -> None:
        self.max_bytes = max_size_in_mb * _MB if max_size_in_mb > 0 else 0
        self.resume_bytes = self.max_bytes // 2
        self.pending_bytes = 0
        self.throttled = False
        self.throttled_times = 0  # how often the limit was reached (a counter, for metrics)
        self._members: set[ReadThrottle] = set()

    def join(self, member: ReadThrottle) -> None:
        self._members.add(member)

    def leave(self, member: ReadThrottle) -> None:
        self._members.discard(member)

    def add(self, nbytes: int) -> None:
        self.pending_bytes += nbytes
        if self.max_bytes and not self.throttled and self.pending_bytes >= self.max_bytes:
            self.throttled = True
            self.throttled_times += 1
            for member in list(self._members):
                member.buffer_throttled(True)

    def release(self, nbytes: int) -> None:
        self.pending_bytes -= nbytes
        if self.throttled and self.pending_bytes < self.resume_bytes:
            self.throttled = False
            for member in list(self._members):
                member.buffer_throttled(False)


class OutputPauses:
    """Broker-wide figures of connections not read because their output is full (metrics)."""

    def __init__(self) -> None:
        self.paused_times = 0  # how often a connection stopped being read for it (a counter)
        self.paused_connections = 0  # connections not read for it now (a gauge)


class ReadThrottle:
    """One connection's pending SENDs (count and bytes) and whether it is read."""

    def __init__(self, buffer: PublishBuffer, max_pending_requests: int,
                 on_resume: Callable[[], None], output_pauses: OutputPauses | None = None) -> None:
        self._buffer = buffer
        self._output_pauses = output_pauses if output_pauses is not None else OutputPauses()
        self._max_requests = max_pending_requests
        self._resume_requests = max_pending_requests // 2
        self._on_resume = on_resume
        self._reader: Reader | None = None
        self._attached = False
        self._by_requests = False
        self._by_buffer = False
        self._by_output = False
        self._by_backlog = False
        self._by_rate = False
        self.pending_requests = 0
        self.pending_bytes = 0
        self.paused = False

    def attach(self, reader: Reader) -> None:
        self._reader = reader
        self._attached = True
        self._buffer.join(self)
        if self._buffer.throttled:
            self.buffer_throttled(True)

    def detach(self) -> None:
        """The connection is lost: give its bytes back to the broker (idempotent)."""
        if not self._attached:
            return
        self._attached = False
        self._reader = None
        self._buffer.leave(self)
        if self._by_output:
            self._by_output = False
            self._output_pauses.paused_connections -= 1
        held, self.pending_bytes = self.pending_bytes, 0
        if held:
            self._buffer.release(held)

    def started(self, count: int, nbytes: int) -> None:
        self.pending_requests += count
        if self._attached:
            self.pending_bytes += nbytes
            self._buffer.add(nbytes)
        if self.pending_requests >= self._max_requests and not self._by_requests:
            self._by_requests = True
            self._update()

    def finished(self, count: int, nbytes: int) -> None:
        self.pending_requests -= count
        if self._attached:
            self.pending_bytes -= nbytes
            self._buffer.release(nbytes)
        if self._by_requests and self.pending_requests <= self._resume_requests:
            self._by_requests = False
            self._update()

    def buffer_throttled(self, throttled: bool) -> None:
        """Called by the :class:`PublishBuffer` when the broker-wide limit holds or lets go."""
        if self._by_buffer is not throttled:
            self._by_buffer = throttled
            self._update()

    def output_full(self, full: bool) -> None:
        """The connection's unsent output passed the high water mark (True) or drained below
        the low one (False): the transport's pause_writing / resume_writing."""
        if self._by_output is full or not self._attached:
            return
        self._by_output = full
        pauses = self._output_pauses
        if full:
            pauses.paused_times += 1
            pauses.paused_connections += 1
        else:
            pauses.paused_connections -= 1
        self._update()

    @property
    def output_paused(self) -> bool:
        return self._by_output

    def rate_held(self, held: bool) -> None:
        """Hold reading while the topic's publish rate is exceeded (until its window ends)."""
        if self._by_rate is not held:
            self._by_rate = held
            self._update()

    def backlog_held(self, held: bool) -> None:
        """Hold reading while the connection works through commands it applies in slices."""
        if self._by_backlog is not held:
            self._by_backlog = held
            self._update()

    def _update(self) -> None:
        paused = (self._by_requests or self._by_buffer or self._by_output or self._by_backlog
                  or self._by_rate)
        if paused is self.paused:
            return
        self.paused = paused
        reader = self._reader
        if reader is None:
            return
        if paused:
            reader.pause_reading()
        else:
            self._on_resume()
            reader.resume_reading()
