"""One client connection: bytes in through the sans-IO decoder, commands through the state table.

Theory of operation
-------------------
:class:`ServerConnection` is an ``asyncio.Protocol``. ``data_received`` feeds the
:class:`protocol.frames.FrameDecoder` and dispatches every complete frame through
:data:`broker.net.states.TRANSITIONS` (state x command type -> handler, next state). Rules:

1. Handlers that answer from memory (PING, FLOW, ACK, ...) run synchronously, in
   arrival order. One socket read is decoded at once (``FrameDecoder.receive_frames``). SEND
   has one path: the consecutive SENDs of one producer in it, as
   :class:`protocol.send_path.SendFrame` (hand-parsed; the codec turns a SEND the hand parser
   declines into one too), go to the producer together (:meth:`Producer.on_sends`); a SEND outside
   CONNECTED or for an unknown producer gets :func:`broker.net.states.send_verdict`. Handlers that
   need IO or a topic load (PRODUCER, SUBSCRIBE, LOOKUP, ...) run as tasks
   (:class:`broker.net.requests.RequestTasks`); a :class:`protocol.errors.RequestError`
   escaping one is answered there, in one place, with ERROR carrying its code.
2. A :class:`protocol.errors.ConnectionFatalError` (oversized or malformed frame, TLS or HTTP
   on this port) closes this connection only. Nothing else on the broker is affected.
3. Outgoing frames (``write``) belong to :class:`broker.net.output.Output`: the first one
   written in an event-loop iteration goes to the transport at once (a synchronous producer's
   receipt waits for nothing); later ones are buffered and flushed with one
   ``transport.write`` in the next iteration, so a burst of receipts or messages costs at most
   two syscalls.
4. Back-pressure on publishers belongs to :class:`broker.net.throttle.ReadThrottle`: past
   ``maxPendingPublishRequestsPerConnection`` unanswered SENDs, or while the broker-wide
   :class:`broker.net.throttle.PublishBuffer` (``maxMessagePublishBufferSizeInMB``) is full,
   the transport stops reading. Back-pressure from the peer: the transport's write buffer has
   the water marks ``pulsarChannelWriteBufferHighWaterMark`` / ``LowWaterMark``;
   ``writes_paused`` mirrors its pause_writing / resume_writing, so dispatchers send nothing
   more to this connection's consumers while it is set, and the consumer side is told when
   writing may resume. With ``pulsarChannelPauseReceivingRequestsIfUnwritable`` the connection
   is not read either meanwhile (:meth:`ReadThrottle.output_full`): a peer that never reads
   cannot make the broker queue answers (PONGs, receipts) without limit.
5. The connection is owned by the server (:class:`broker.server.BrokerServer`), which it tells
   when it opens and closes (:class:`ConnectionOwner`); the server drives keep-alive (one
   timer for all connections) through :meth:`keepalive_tick`, and credential refresh through
   the connection's ``handshake`` (:meth:`broker.net.handshake.Handshake.refresh_tick`).
6. CONNECT, authentication, the handshake timeout, AUTH_CHALLENGE/AUTH_RESPONSE and the
   per-request authorization checks belong to :class:`broker.net.handshake.Handshake`; the
   lookups to :mod:`broker.net.lookup`. The state table is a constructor argument
   (``tables``, default :data:`DEFAULT_TABLES`, whose handlers are the functions of
   :mod:`broker.net.handlers`), so a test can substitute recording handlers.

Consumer commands go to :class:`broker.net.consumers.ConsumerSide`, created on first use (topic-list
watchers to :class:`broker.net.topic_watchers.TopicWatchers`, likewise);
PRODUCER and CLOSE_PRODUCER to :mod:`broker.net.producers`. The producers' registries, their
SEND hand-off and publish accounting are ``self.producer_side``
(:class:`broker.net.producer_side.ProducerSide`, the producers'
:class:`broker.topics.producer.ProducerTransport`), made with the connection.
"""

from __future__ import annotations

import asyncio
import logging
import operator
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from broker.net.consumers import ConsumerSide
from broker.net.handshake import NO_REQUEST_ID, ConnectionSecurity, Handshake
from broker.net.output import Output, WriteHold
from broker.net.producer_side import ProducerSide
from broker.net.requests import RequestTasks
from broker.net.states import (
    LIFECYCLE,
    TRANSITIONS,
    ConnState,
    Handler,
    Lifecycle,
    Unexpected,
    request_id_of,
    send_verdict,
    unexpected,
    unknown_command,
)
from broker.net.throttle import OutputPauses, PublishBuffer, ReadThrottle
from broker.net.topic_watchers import TopicWatchers
from broker.topics.producer import Producer
from broker.topics.service import BrokerService
from protocol import commands as C
from protocol import pulsar_pb as pb
from protocol.entry_metadata import BROKER_ENTRY_METADATA_VERSION
from protocol.errors import RequestError, ServerError
from protocol.frames import Frame, FrameDecoder, UnknownCommand
from protocol.limits import FRAME_PADDING
from protocol.send_path import SendFrame
from storage.handoff import YIELD_MAX_US, yield_to_waiting

__all__ = ["DEFAULT_TABLES", "ServerConnection", "StateTables", "build_tables"]

log = logging.getLogger("horae.net.connection")



class ConnectionOwner(Protocol):
    """The registry that owns the live connections (the server): told when one opens and closes."""

    def connection_opened(self, connection: ServerConnection) -> None: ...

    def connection_closed(self, connection: ServerConnection) -> None: ...


class ServerConnection(asyncio.Protocol):
    """Server side of one TCP connection (see the module docstring)."""

    def __init__(self, service: BrokerService, owner: ConnectionOwner,
                 security: ConnectionSecurity | None = None, *,
                 tables: StateTables | None = None,
                 publish_buffer: PublishBuffer | None = None,
                 output_pauses: OutputPauses | None = None,
                 write_hold: WriteHold | None = None) -> None:
        self.service = service
        self._owner = owner
        self.config = service.config
        self.max_message_size = self.config.max_message_size
        self.loop = service.loop
        self._tables = tables if tables is not None else DEFAULT_TABLES
        self._state = ConnState.CONNECTING
        self._table = self._tables[ConnState.CONNECTING]
        self.handshake = Handshake(self, security if security is not None
                                   else ConnectionSecurity.disabled(self.config))
        self.remote_address = ""
        self.remote_ip = ""
        self.local_host: str | None = None
        self.peer_certificate: bytes | None = None
        self.connected_since_ms = 0
        self.last_received = self.loop.time()
        self._ping_sent_at: float | None = None  # loop time of an unanswered keep-alive PING
        self._decoder = FrameDecoder(self.config.max_message_size + FRAME_PADDING)
        self._transport: asyncio.Transport | None = None
        self._output = Output(self.loop, self.config.pulsar_channel_write_buffer_high_water_mark,
                              write_hold)
        self.write = self._output.write  # (data: bytes) -> None: see broker.net.output
        self.writelines = self._output.writelines  # (parts: list[bytes]) -> None: the same
        self.throttle = ReadThrottle(
            publish_buffer if publish_buffer is not None else PublishBuffer(0),
            self.config.max_pending_publish_requests_per_connection, self._reading_resumed,
            output_pauses)
        self._pause_reads_when_unwritable = (
            self.config.pulsar_channel_pause_receiving_requests_if_unwritable)
        self.producer_side = ProducerSide(self)  # the producers' registry and SENDs
        self._consumer_side: ConsumerSide | None = None
        self._topic_watchers: TopicWatchers | None = None
        self._requests = RequestTasks(self.loop, self.write, lambda: self.remote_address)

    @property
    def state(self) -> ConnState:
        return self._state

    @state.setter
    def state(self, state: ConnState) -> None:
        self._state = state
        self._table = self._tables[state]  # per-state dict: dispatch hashes a plain int only

    @property
    def is_closed(self) -> bool:
        return self._state is _CLOSED

    def _on(self, event: Lifecycle) -> bool:
        """Move on by :data:`broker.net.states.LIFECYCLE`; False when *event* moves nothing."""
        next_state = LIFECYCLE.get((self._state, event))
        if next_state is None:
            return False
        self.state = next_state
        return True

    @property
    def protocol_version(self) -> int:
        return self.handshake.protocol_version

    @property
    def client_version(self) -> str:
        return self.handshake.client_version

    @property
    def receives_broker_entry_metadata(self) -> bool:
        """Pulsar's rule: the broker exposes it (exposingBrokerEntryMetadataToClientEnabled)
        and the client announced it (feature flag, protocol version 18 or later)."""
        handshake = self.handshake
        return (self.config.exposing_broker_entry_metadata_to_client_enabled
                and handshake.supports_broker_entry_metadata
                and handshake.protocol_version >= BROKER_ENTRY_METADATA_VERSION)

    def handshake_done(self) -> None:
        self._on(Lifecycle.HANDSHAKE_DONE)

    # ------------------------------------------------------------------ asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment,unused-ignore]  # uvloop's TCPTransport
        self._output.transport = self._transport
        peer = transport.get_extra_info("peername")
        sock = transport.get_extra_info("sockname")
        if peer:
            self.remote_address = f"{peer[0]}:{peer[1]}"
            self.remote_ip = str(peer[0])
        if sock:
            self.local_host = str(sock[0])
        ssl_object = transport.get_extra_info("ssl_object")
        if ssl_object is not None:
            self.peer_certificate = ssl_object.getpeercert(binary_form=True)
        self.connected_since_ms = int(time.time() * 1000)
        if self._transport is not None:
            self._transport.set_write_buffer_limits(
                high=self.config.pulsar_channel_write_buffer_high_water_mark,
                low=self.config.pulsar_channel_write_buffer_low_water_mark)
        self.throttle.attach(transport)  # type: ignore[arg-type,unused-ignore]
        self.handshake.start_timer(self.loop)
        self._owner.connection_opened(self)

    def data_received(self, data: bytes) -> None:
        if self.is_closed:
            return
        # A storage thread back from a write or an fdatasync gets the interpreter first:
        # while the loop is busy it would otherwise wait for all of it (storage/handoff.py).
        yield_to_waiting(YIELD_MAX_US)
        self.last_received = self.loop.time()
        decoder = self._decoder
        if data == _PONG and self._state is _CONNECTED and not decoder.buffered:
            return  # a keep-alive answer alone: the clock above is all it changes
        frames = decoder.receive_frames(data)
        producers = self.producer_side.producers
        if frames and type(frames[0]) is SendFrame and self._state is _CONNECTED \
                and decoder.error is None and (len(frames) == 1 or (
                    set(map(type, frames)) == _ONLY_SENDS
                    and len(set(map(_producer_id, frames))) == 1)):  # type: ignore[arg-type]
            # The usual read of a publisher: SENDs of one producer alone, handed over whole.
            producer = producers.get(frames[0].producer_id)
            if producer is not None:
                self.producer_side.on_sends(producer, frames)  # type: ignore[arg-type]
                return
        run: list[SendFrame] = []
        run_producer: Producer | None = None
        for frame in frames:
            kind = type(frame)
            if kind is not SendFrame:
                if run:
                    if not self.producer_side.on_sends(run_producer, run):  # type: ignore[arg-type]
                        return
                    run = []
                    run_producer = None
                if kind is UnknownCommand:
                    self._refuse(unknown_command(self._state),  # rule 4 of states.py
                                 f"Command type {frame.type_number}",  # type: ignore[union-attr]
                                 NO_REQUEST_ID)
                else:
                    self._dispatch(frame)  # type: ignore[arg-type]
                if self.is_closed:
                    return
                continue
            # A SEND: the consecutive SENDs of one producer go to it together.
            producer = producers.get(frame.producer_id)  # type: ignore[union-attr]
            if producer is None or self._state is not _CONNECTED:
                if run and not self.producer_side.on_sends(run_producer, run):  # type: ignore[arg-type]
                    return
                run = []
                run_producer = None
                if producer is None and self._state is _CONNECTED:
                    # Pulsar closes the connection too: the client's view of its producers
                    # is wrong. SEND has no request id: nothing can be answered.
                    log.warning("SEND for unknown producer %d from %s",
                                frame.producer_id, self.remote_address)  # type: ignore[union-attr]
                    self.close("send for unknown producer")
                else:
                    self._refuse(send_verdict(self._state), "SEND", None)
                if self.is_closed:
                    return
                continue
            if producer is not run_producer:
                if run and not self.producer_side.on_sends(run_producer, run):  # type: ignore[arg-type]
                    return
                run = []
                run_producer = producer
            run.append(frame)  # type: ignore[arg-type]
        if run and not self.producer_side.on_sends(run_producer, run):  # type: ignore[arg-type]
            return
        error = decoder.error
        if error is not None and not self.is_closed:
            log.warning("closing connection from %s: %s", self.remote_address, error)
            self.close(str(error))

    def eof_received(self) -> bool | None:
        return None  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self._on(Lifecycle.CLOSED)
        self._output.close()
        self.handshake.stop_timer()
        self.throttle.detach()
        self._owner.connection_closed(self)
        self._requests.cancel_all()
        self.producer_side.close()
        side = self._consumer_side
        if side is not None:
            self._consumer_side = None
            side.close()
        if self._topic_watchers is not None:
            self._topic_watchers.close()

    def pause_writing(self) -> None:
        self._output.paused = True
        if self._pause_reads_when_unwritable:
            self.throttle.output_full(True)

    def resume_writing(self) -> None:
        self._output.paused = False
        if self._pause_reads_when_unwritable:
            self.throttle.output_full(False)
        if self._consumer_side is not None:
            self._consumer_side.on_writable()
        if self._topic_watchers is not None:
            self._topic_watchers.on_writable()

    # ------------------------------------------------------------------ output

    @property
    def writes_paused(self) -> bool:
        return self._output.paused

    def close(self, reason: str = "") -> None:
        """Flush what is queued and close the transport (idempotent)."""
        if self.is_closed:
            return
        if reason:
            log.debug("closing connection %s: %s", self.remote_address, reason)
        self._output.flush()
        self._output.closed = True
        self._on(Lifecycle.CLOSED)
        if self._transport is not None:
            self._transport.close()

    # ------------------------------------------------------------------ dispatch

    def _dispatch(self, frame: Frame) -> None:
        cmd = frame.command
        entry = self._table.get(cmd.type)
        if entry is None:
            self._refuse(unexpected(self._state, cmd),
                         f"Command {pb.BaseCommand.Type.Name(cmd.type)}", request_id_of(cmd))
            return
        handler, next_state = entry
        if next_state is not self._state:
            self.state = next_state  # before the handler, which may move it on (handshake)
        try:
            handler(self, frame)
        except RequestError as exc:  # a synchronous handler refused the request
            rid = request_id_of(cmd)
            if rid is not None:
                self.write(C.encode_error(rid, exc.code, exc.message))
            else:
                log.warning("%s from %s failed: %s", pb.BaseCommand.Type.Name(cmd.type),
                            self.remote_address, exc)
            return
        except Exception:
            # A bug must cost this connection only, never the broker.
            log.exception("handling %s from %s failed", pb.BaseCommand.Type.Name(cmd.type),
                          self.remote_address)
            self.close("internal error")

    def _refuse(self, action: Unexpected | None, what: str, request_id: int | None) -> None:
        """A command the state table does not serve here (:func:`broker.net.states.unexpected`,
        :func:`~broker.net.states.unknown_command`, :func:`~broker.net.states.send_verdict`):
        ERROR NotAllowedError with *request_id* and the connection stays, or it is closed, or
        the frame is dropped."""
        if action is Unexpected.ERROR:
            assert request_id is not None
            self.write(C.encode_error(request_id, ServerError.NotAllowedError,
                                      f"{what} is not supported by this broker"))
        elif action is Unexpected.CLOSE:
            log.warning("closing connection from %s: unexpected %s in state %s",
                        self.remote_address, what, self.state.name)
            self.close(f"unexpected {what}")

    def spawn(self, coro: Awaitable[Any], request_id: int | None = None,
              on_error: Callable[[RequestError], bytes] | None = None) -> asyncio.Task[Any]:
        """Run a request handler as a task (:class:`broker.net.requests.RequestTasks`)."""
        return self._requests.spawn(coro, request_id, on_error)

    # ------------------------------------------------------------------ keep-alive

    def keepalive_tick(self, now: float, interval: float) -> None:
        """Called by the server every *interval* s: PING when idle, close when a PING went unanswered.

        As Pulsar's PulsarHandler does, a connection is closed only after the broker has sent a
        PING and heard nothing at all for a whole interval since: a loop stall that delays the
        tick can then never close a healthy connection without asking first.
        """
        if self.throttle.paused:
            return  # we stopped reading (back-pressure): silence is ours, not the peer's
        pinged = self._ping_sent_at
        if pinged is not None and self.last_received < pinged:
            if now - pinged >= interval:
                log.info("closing %s: keep-alive PING unanswered for %.1f s",
                         self.remote_address, now - pinged)
                self.close("keep-alive timeout")
            return
        if now - self.last_received < interval or self.state is not ConnState.CONNECTED:
            return  # an unfinished handshake is the handshake timer's business
        self._ping_sent_at = now
        self._output.write_alone(C.encode_ping())

    # ------------------------------------------------------------------ reading

    def hold_reading(self, held: bool) -> None:
        """The consumer side applies big commands in slices: hold reading meanwhile."""
        self.throttle.backlog_held(held)

    def _reading_resumed(self) -> None:
        self.last_received = self.loop.time()  # the keep-alive clock restarts

    # ------------------------------------------------------------------ consumers

    def consumer_side(self) -> ConsumerSide:
        """The connection's ConsumerSide, created on first use."""
        side = self._consumer_side
        if side is None:
            side = self._consumer_side = ConsumerSide(self)
        return side

    @property
    def existing_consumer_side(self) -> ConsumerSide | None:
        return self._consumer_side

    def topic_watchers(self) -> TopicWatchers:
        """The connection's topic-list watchers, created on first use."""
        watchers = self._topic_watchers
        if watchers is None:
            watchers = self._topic_watchers = TopicWatchers(self)
        return watchers

    @property
    def serves_topic_watchers(self) -> bool:
        return self.config.enable_broker_side_subscription_pattern_evaluation

    def __repr__(self) -> str:
        return f"<ServerConnection {self.remote_address} {self.state.name}>"


_CONNECTED = ConnState.CONNECTED
_PONG = C.encode_pong()
_ONLY_SENDS = frozenset({SendFrame})
_producer_id = operator.itemgetter(0)  # SendFrame.producer_id
_CLOSED = ConnState.CLOSED


StateTables = dict[ConnState, dict[int, tuple[Handler, ConnState]]]
"""One ``command type -> (handler, next state)`` dict per state."""


def build_tables(handlers: Mapping[tuple[ConnState, int], tuple[Handler, ConnState]],
                 ) -> StateTables:
    """Split ``(state, type) -> entry`` into one ``type -> entry`` dict per state."""
    tables: StateTables = {s: {} for s in ConnState}
    for (state, cmd_type), entry in handlers.items():
        tables[state][int(cmd_type)] = entry
    return tables


DEFAULT_TABLES: StateTables = build_tables({
    key: (t.handler, t.next_state) for key, t in TRANSITIONS.items()
})
"""The broker's state table: every (state, command type) pair of :data:`TRANSITIONS`."""
