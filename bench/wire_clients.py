"""Raw Pulsar client connections for bench/wire_load.py: a publisher window and a drainer.

Theory of operation
-------------------
:class:`RawConnection` is an asyncio protocol on Horae's sans-IO codec: during setup the
commands it receives go to a queue (:meth:`RawConnection.request` awaits the reply); once a
:class:`Publisher` or :class:`Drainer` takes it over, every socket read's frames go to that
handler in one call, which answers in at most one or two writes per read. A lost connection
fails the handler's ``done`` future, so a phase never hangs on a dead peer. PINGs are answered
everywhere. Before a producer or a subscription the connection LOOKUPs the topic, as every
Pulsar client does, so every peer does the same work per topic. Nothing here keeps time except
the receipt latencies (``time.perf_counter``). :func:`frozen_heap` keeps this process's own
full garbage collections out of what it measures.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from collections.abc import Callable, Iterator

from bench.brokers import Broker
from protocol import commands as C
from protocol import pulsar_pb as pb
from protocol.frames import NEED_DATA, Frame, FrameDecoder, UnknownCommand
from protocol.metadata import parse_metadata

T = pb.BaseCommand
SUBSCRIPTION = "wl"
REQUEST_TIMEOUT_S = 30.0
STALL_S = 0.5
"""A consumer that received nothing for this long while owed messages re-sends FLOW."""
_PONG = C.encode_pong()


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """This process is the measuring instrument: its heap is collected and frozen over the
    block, so that a full collection of the frames and latencies it holds, while receipts or
    messages wait in its sockets, is not counted as the broker's latency."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


# --------------------------------------------------------------------------- connections


class RawConnection(asyncio.Protocol):
    """A raw Pulsar connection: replies go to a queue until a handler takes the frames over."""

    def __init__(self) -> None:
        self.decoder = FrameDecoder()
        self.transport: asyncio.Transport | None = None
        self.handler: Callable[[list[Frame]], None] | None = None
        self.replies: asyncio.Queue[pb.BaseCommand] = asyncio.Queue()
        self.on_lost: Callable[[str], None] | None = None
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is no asyncio.Transport

    def data_received(self, data: bytes) -> None:
        self.decoder.receive_data(data)
        next_frame = self.decoder.next_frame
        frames: list[Frame] = []
        while (frame := next_frame()) is not NEED_DATA:
            if not isinstance(frame, UnknownCommand):   # a command this codec does not know
                frames.append(frame)
        if self.handler is not None:
            self.handler(frames)
            return
        for frame in frames:
            if frame.command.type == T.PING:
                self.write(_PONG)
            else:
                self.replies.put_nowait(frame.command)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.on_lost is not None:
            self.on_lost(f"connection lost: {exc}")

    def write(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.write(data)

    async def request(self, data: bytes, expect: int) -> pb.BaseCommand:
        self.write(data)
        cmd = await asyncio.wait_for(self.replies.get(), REQUEST_TIMEOUT_S)
        if cmd.type != expect:
            raise RuntimeError(f"expected command type {expect}, got {cmd}")
        return cmd

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


async def connect(broker: Broker) -> RawConnection:
    loop = asyncio.get_running_loop()
    _, conn = await loop.create_connection(RawConnection, broker.host, broker.port)
    await conn.request(C.encode_connect("Horae-wire-load"), T.CONNECTED)
    return conn


async def lookup(conn: RawConnection, topic: str, request_id: int) -> None:
    """LOOKUP *topic*; the (single) broker must answer Connect, i.e. that it serves it."""
    cmd = await conn.request(C.encode_lookup(topic, request_id), T.LOOKUP_RESPONSE)
    resp = cmd.lookupTopicResponse
    if resp.response != pb.CommandLookupTopicResponse.Connect:
        raise RuntimeError(f"lookup of {topic}: {resp}")


# --------------------------------------------------------------------------- publish


class Publisher:
    """Keeps ``window`` SENDs in flight on one connection; checks receipts arrive in order
    (``in_order=False``: counts those that do not, in ``out_of_order``, and goes on; the
    latencies are then taken in receipt order)."""

    def __init__(self, conn: RawConnection, frames: list[bytes], first_sequence_ids: list[int],
                 window: int, done: asyncio.Future[None], *, in_order: bool = True) -> None:
        self.conn = conn
        self.in_order = in_order
        self.out_of_order = 0
        self.frames = frames
        self.firsts = first_sequence_ids
        self.window = window
        self.done = done
        self.sent = 0
        self.acked = 0
        self.sent_at = [0.0] * len(self.frames)
        self.latencies: list[float] = []
        conn.handler = self.frames_received
        conn.on_lost = self.fail

    def fail(self, why: str) -> None:
        if not self.done.done():
            self.done.set_exception(RuntimeError(f"publish: {why} after {self.acked} receipts"))

    def _send_upto(self, end: int, now: float) -> None:
        end = min(end, len(self.frames))
        if end > self.sent:
            self.conn.write(b"".join(self.frames[self.sent : end]))
            self.sent_at[self.sent : end] = [now] * (end - self.sent)
            self.sent = end

    def start(self) -> None:
        if not self.frames:
            self.done.set_result(None)
            return
        self._send_upto(self.window, time.perf_counter())

    def frames_received(self, frames: list[Frame]) -> None:
        now = time.perf_counter()
        acked = self.acked
        firsts, sent_at, latencies = self.firsts, self.sent_at, self.latencies
        for frame in frames:
            cmd = frame.command
            if cmd.type == T.SEND_RECEIPT:
                if acked >= self.sent or cmd.send_receipt.sequence_id != firsts[acked]:
                    if self.in_order or acked >= self.sent:
                        self.fail(f"receipt out of order: {cmd.send_receipt}")
                        return
                    self.out_of_order += 1
                latencies.append(now - sent_at[acked])
                acked += 1
            elif cmd.type == T.PING:
                self.conn.write(_PONG)
            else:
                self.fail(f"unexpected {cmd}")
                return
        self.acked = acked
        if acked == len(self.frames):
            if not self.done.done():
                self.done.set_result(None)
            return
        self._send_upto(acked + self.window, now)


async def open_producer(broker: Broker, topic: str, name: str) -> RawConnection:
    conn = await connect(broker)
    await lookup(conn, topic, 1)
    cmd = await conn.request(C.encode_producer(topic, 1, 2, name), T.PRODUCER_SUCCESS)
    while cmd.producer_success.HasField("producer_ready") and not cmd.producer_success.producer_ready:
        cmd = await asyncio.wait_for(conn.replies.get(), REQUEST_TIMEOUT_S)
    return conn


# --------------------------------------------------------------------------- consume


class Drainer:
    """A Shared consumer: FLOW of ``permits`` refilled by half, batched individual acks.

    Stall guard: when no message arrived for :data:`STALL_S` while some are still owed, it
    sends a fresh FLOW of ``permits`` and counts it in ``stall_flows`` (pulsar-lite 0.2.0
    loses FLOW permits now and then under large windows and would otherwise stop dispatching).
    """

    def __init__(self, conn: RawConnection, *, batched: bool, permits: int, ack_batch: int,
                 expected: int, done: asyncio.Future[None]) -> None:
        self.conn = conn
        self.batched = batched
        self.permits = permits
        self.ack_batch = ack_batch
        self.expected = expected
        self.done = done
        self.seen: set[tuple[int, int]] = set()
        self.pending_acks: list[tuple[int, int]] = []
        self.unacked = 0
        """Messages in ``pending_acks`` (a batch entry counts all its messages)."""
        self.since_flow = 0
        self.messages = 0
        self.duplicates = 0
        self.bad_checksums = 0
        self.stall_flows = 0
        self._progress_seen = -1
        self._guard: asyncio.TimerHandle | None = None
        conn.handler = self.frames_received
        conn.on_lost = self.fail

    def fail(self, why: str) -> None:
        if not self.done.done():
            self.done.set_exception(RuntimeError(f"consume: {why} after {self.messages} messages"))

    def start(self) -> None:
        self.conn.write(C.encode_flow(1, self.permits))
        self._guard = asyncio.get_running_loop().call_later(STALL_S, self._check_progress)

    def stop(self) -> None:
        if self._guard is not None:
            self._guard.cancel()
            self._guard = None

    def _check_progress(self) -> None:
        if self.done.done():
            return
        if self.messages == self._progress_seen:
            self.stall_flows += 1
            self.conn.write(C.encode_flow(1, self.permits))
        self._progress_seen = self.messages
        self._guard = asyncio.get_running_loop().call_later(STALL_S, self._check_progress)

    def frames_received(self, frames: list[Frame]) -> None:
        seen, pending = self.seen, self.pending_acks
        for frame in frames:
            cmd = frame.command
            if cmd.type == T.MESSAGE:
                mid = cmd.message.message_id
                key = (mid.ledgerId, mid.entryId)
                count = 1
                if self.batched:
                    assert frame.entry is not None
                    count = parse_metadata(frame.entry).num_messages_in_batch or 1
                if frame.checksum_valid is False:
                    self.bad_checksums += 1
                if key in seen:
                    self.duplicates += 1
                else:
                    seen.add(key)
                    self.messages += count
                pending.append(key)
                self.unacked += count
                self.since_flow += count
            elif cmd.type == T.PING:
                self.conn.write(_PONG)
            elif cmd.type != T.ACTIVE_CONSUMER_CHANGE:
                self.fail(f"unexpected {cmd}")
                return
        if self.unacked >= self.ack_batch:  # in messages: the broker's unacked limit counts them
            self.flush_acks()
        if self.since_flow >= self.permits // 2:
            self.conn.write(C.encode_flow(1, self.since_flow))
            self.since_flow = 0
        if self.messages >= self.expected and not self.done.done():
            self.done.set_result(None)

    def flush_acks(self) -> None:
        if self.pending_acks:
            self.conn.write(C.encode_ack(1, self.pending_acks))
            self.pending_acks = []
            self.unacked = 0


async def subscribe(broker: Broker, topic: str) -> RawConnection:
    conn = await connect(broker)
    await lookup(conn, topic, 1)
    await conn.request(C.encode_subscribe(topic, SUBSCRIPTION, 1, 1, 2, initial_position=1),
                       T.SUCCESS)
    return conn
