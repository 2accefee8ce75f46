"""A connection's outgoing frames: the first of an event-loop iteration at once, the rest in one
write at the end of it; while a group commit is told, all of them in one write at its end.

Theory of operation
-------------------
:class:`Output` belongs to one :class:`broker.net.connection.ServerConnection`, which hands it
the transport once connected and tells it of the transport's pause_writing / resume_writing.
A lone frame (a synchronous producer's SEND_RECEIPT) must not wait a loop iteration for the
flush; frames written after it in the same iteration are queued and go out together in the
flush scheduled by the first, so a burst costs at most two writes. Invariant: the queue is
non-empty only while a flush is scheduled (frames stay in order). Queued frames count as unsent
output: past the high water mark (``pulsarChannelWriteBufferHighWaterMark``) they go to the
transport at once, so its pause_writing (and the connection's pause of reading) comes while
the burst is being made, not after it (one event-loop turn may read a socket many times).
``paused`` mirrors the transport's pause_writing / resume_writing. Once closed it writes
nothing more.

:meth:`Output.writelines` takes frames as consecutive buffers (a MESSAGE's head and its large
entry apart, see :mod:`broker.subscriptions.consumer`) and hands them to the transport's
``writelines`` (uvloop: one vectored write that references the buffers, no copy). While such
buffers are queued, the flush joins only the runs of small buffers between the large ones
(:data:`BY_REFERENCE_BYTES`), so a large entry is never copied into a joined write.

:class:`WriteHold` is the server's, shared by every connection's Output and handed to the store
as its completion scope (:class:`storage.sync_stage.CompletionScope`): while the store tells a
group commit's outcomes (the producers' SEND_RECEIPTs, and the MESSAGEs of the dispatch rounds
the new entries start in that same callback) no Output writes at once; each queues, and the
hold's ``end`` flushes every Output that queued, once. A connection that both publishes and
consumes a topic then gets a receipt and the message it made deliverable in one write: the
official client's I/O thread is woken once for both, and the message does not wait for the
next loop iteration's flush behind the receipt. Frames of a burst already under way (a flush
scheduled before the hold) keep their scheduled flush.
"""

from __future__ import annotations

import asyncio
import logging

from protocol.framing import BY_REFERENCE_BYTES, coalesce

__all__ = ["BY_REFERENCE_BYTES", "Output", "WriteHold"]

log = logging.getLogger("horae.net.output")


class WriteHold:
    """Every Output queues instead of writing at once between :meth:`begin` and :meth:`end`
    (module docstring); the store calls both on the loop around each group commit's outcomes."""

    __slots__ = ("_held", "holding")

    def __init__(self) -> None:
        self.holding = False
        self._held: list[Output] = []  # the Outputs that queued while holding: end() flushes

    def begin(self) -> None:
        self.holding = True

    def end(self) -> None:
        self.holding = False
        held, self._held = self._held, []
        for output in held:
            try:  # one connection's failure must not leave the others' frames queued
                output.flush()
            except Exception:
                log.exception("flushing a connection's held frames failed")

    def add(self, output: Output) -> None:
        """*output* queued its first frame while holding: :meth:`end` is its flush."""
        self._held.append(output)



class Output:
    """The outgoing side of one connection (module docstring)."""

    __slots__ = ("_by_reference", "_flush_scheduled", "_hold", "_limit", "_loop", "_out",
                 "_out_bytes", "closed", "paused", "transport")

    def __init__(self, loop: asyncio.AbstractEventLoop, high_water_mark: int,
                 hold: WriteHold | None = None) -> None:
        self._loop = loop
        self._hold = hold if hold is not None else WriteHold()
        self._limit = high_water_mark
        self.transport: asyncio.Transport | None = None
        self._out: list[bytes] = []
        self._out_bytes = 0
        self._flush_scheduled = False
        self._by_reference = False  # _out holds buffers queued by writelines
        self.paused = False  # the transport's pause_writing until its resume_writing
        self.closed = False

    def write(self, data: bytes) -> None:
        """Send a frame: the first one of a loop iteration at once, later ones queued (all
        of them while the hold holds)."""
        if self.closed:
            return
        if self._flush_scheduled:
            self._out.append(data)
            self._out_bytes += len(data)
            if self._out_bytes >= self._limit:
                self._write_out()
            return
        self._flush_scheduled = True
        if self._hold.holding:
            self._hold.add(self)
            self._out.append(data)
            self._out_bytes += len(data)
            return
        self._loop.call_soon(self.flush)
        transport = self.transport
        if transport is not None and not transport.is_closing():
            transport.write(data)

    def write_alone(self, data: bytes) -> None:
        """Send a frame that starts no burst (a keep-alive PING): at once and without
        scheduling a flush when nothing is queued, else as :meth:`write`."""
        transport = self.transport
        if self._flush_scheduled or self.closed or transport is None:
            self.write(data)
        elif not transport.is_closing():
            transport.write(data)

    def writelines(self, parts: list[bytes]) -> None:
        """Send complete frames given as consecutive buffers, like :meth:`write`, without
        joining them (the large ones are written by reference)."""
        if self.closed or not parts:
            return
        if self._flush_scheduled:
            self._out.extend(parts)
            self._out_bytes += sum(map(len, parts))
            self._by_reference = True
            if self._out_bytes >= self._limit:
                self._write_out()
            return
        self._flush_scheduled = True
        if self._hold.holding:
            self._hold.add(self)
            self._out.extend(parts)
            self._out_bytes += sum(map(len, parts))
            self._by_reference = True
            return
        self._loop.call_soon(self.flush)
        transport = self.transport
        if transport is not None and not transport.is_closing():
            if len(parts) == 1:
                transport.write(parts[0])
            else:
                transport.writelines(parts)

    def flush(self) -> None:
        """Write what is queued now (the scheduled flush, or before a close)."""
        self._flush_scheduled = False
        self._write_out()

    def _write_out(self) -> None:
        out = self._out
        self._out_bytes = 0
        by_reference, self._by_reference = self._by_reference, False
        transport = self.transport
        if not out or transport is None or transport.is_closing():
            out.clear()
            return
        if by_reference and len(out) > 1:
            parts = coalesce(out)
            out.clear()
            transport.writelines(parts)
            return
        data = out[0] if len(out) == 1 else b"".join(out)
        out.clear()
        transport.write(data)

    @property
    def queued(self) -> int:
        """Bytes queued for the next flush."""
        return sum(len(frame) for frame in self._out)

    def close(self) -> None:
        """Write nothing more; drop what is queued (the peer is gone)."""
        self.closed = True
        self._out.clear()
        self._out_bytes = 0
        self._by_reference = False
