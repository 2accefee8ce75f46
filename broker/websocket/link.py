"""An in-process Pulsar binary connection from a WebSocket session to the broker.

Theory of operation
-------------------
Pulsar's WebSocket service drives the broker through an embedded Pulsar client, so the broker
sees an ordinary client connection. :class:`BrokerLink` does the same without a socket: it
builds one :class:`broker.net.connection.ServerConnection` per WebSocket session, hands it a
:class:`_MemoryTransport`, and speaks the binary protocol to it in memory (frames encoded with
``protocol``, the broker's answers decoded with :class:`protocol.frames.FrameDecoder`). The
WebSocket package thus depends on the wire protocol and on the connection being an
``asyncio.Protocol`` built from (service, owner, security), and on nothing inside topics,
subscriptions or producers; this module is the one place that builds the connection.

Security: the session authenticated over HTTP; its link is built with an authentication
service that is *disabled* and whose anonymous role is that authenticated role, and with the
broker's real authorization service, so every PRODUCER and SUBSCRIBE is authorized by the
broker exactly as for a binary client of that role.

Frames from the broker arrive synchronously inside ``ServerConnection.write``. They are decoded
at once and routed without calling back into the connection: request answers resolve the
futures of :meth:`BrokerLink.request`; SEND_RECEIPT / SEND_ERROR / CLOSE_PRODUCER go to the
registered :class:`ProducerListener`, MESSAGE / CLOSE_CONSUMER / REACHED_END_OF_TOPIC to the
:class:`ConsumerListener`; a PING is answered with PONG on the next loop iteration. How much
the broker may send is bounded by the sessions themselves (FLOW permits for messages, their
own limit of pending sends for receipts), so nothing here buffers without bound. Listeners run
inside the broker's write: they record and wake, and never send to the broker from there.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import Any, Protocol

from broker.config import BrokerConfig
from broker.net.connection import ServerConnection
from broker.net.handshake import ConnectionSecurity
from broker.security.authentication import AuthenticationService
from broker.security.authorization import AuthorizationService
from broker.topics.service import BrokerService
from protocol import commands as C
from protocol import pulsar_pb as pb
from protocol.errors import RequestError, ServerError
from protocol.frames import Frame, FrameDecoder
from protocol.limits import FRAME_PADDING

__all__ = ["CLIENT_VERSION", "BrokerLink", "ConsumerListener", "LinkClosedError",
           "ProducerListener"]

log = logging.getLogger("horae.websocket.link")

#: What the link announces in CONNECT (the broker's stats show it as the clients' version).
CLIENT_VERSION = "Horae-WebSocket"

_T = pb.BaseCommand
# Answers that carry the request id they answer, and where it is.
_ANSWERS: dict[int, str] = {
    _T.SUCCESS: "success",
    _T.ERROR: "error",
    _T.PRODUCER_SUCCESS: "producer_success",
    _T.GET_LAST_MESSAGE_ID_RESPONSE: "getLastMessageIdResponse",
    _T.ACK_RESPONSE: "ackResponse",
}


class LinkClosedError(RequestError):
    """The link (or the broker's side of it) was closed while a request was outstanding."""

    default_code = ServerError.ServiceNotReady


class ProducerListener(Protocol):
    def on_receipt(self, sequence_id: int, ledger_id: int, entry_id: int) -> None: ...

    def on_send_error(self, sequence_id: int, error: RequestError) -> None: ...

    def on_closed_by_broker(self) -> None: ...


class ConsumerListener(Protocol):
    def on_message(self, message: pb.CommandMessage, entry: bytes) -> None: ...

    def on_closed_by_broker(self) -> None: ...

    def on_end_of_topic(self) -> None: ...


class _Owner:
    """The connection's owner: a link's connection is registered with no server."""

    def connection_opened(self, connection: ServerConnection) -> None:
        return None

    def connection_closed(self, connection: ServerConnection) -> None:
        return None


_OWNER = _Owner()


class _MemoryTransport(asyncio.Transport):
    """The connection's transport: its writes go straight to the link's decoder."""

    def __init__(self, link: BrokerLink, peer: tuple[str, int]) -> None:
        super().__init__()
        self._link = link
        self._peer = peer
        self._closing = False
        self.reading = True

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not self._closing:
            self._link._from_broker(bytes(data))

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        if not self._closing:
            self._closing = True
            self._link._broker_closed()

    def abort(self) -> None:
        self.close()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "peername":
            return self._peer
        return default

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        return None

    def get_write_buffer_size(self) -> int:
        return 0

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def is_reading(self) -> bool:
        return self.reading


def link_security(config: BrokerConfig, role: str,
                  authorization: AuthorizationService) -> ConnectionSecurity:
    """The security of a link acting as *role* (authenticated by the WebSocket session)."""
    return ConnectionSecurity(
        AuthenticationService(enabled=False, anonymous_user_role=role), authorization,
        float(config.handshake_timeout_seconds))


class BrokerLink:
    """One WebSocket session's connection to the broker (see the module docstring)."""

    def __init__(self, service: BrokerService, role: str,
                 authorization: AuthorizationService, peer: tuple[str, int]) -> None:
        self._loop = service.loop
        self._service = service
        self._decoder = FrameDecoder(service.config.max_message_size + FRAME_PADDING)
        self._requests: dict[int, asyncio.Future[pb.BaseCommand]] = {}
        self._request_ids = itertools.count(1)
        self._ids = itertools.count(1)
        self._producers: dict[int, ProducerListener] = {}
        self._consumers: dict[int, ConsumerListener] = {}
        self._connected: asyncio.Future[None] = self._loop.create_future()
        self.closed = False
        self._connection = ServerConnection(
            service, _OWNER, link_security(service.config, role, authorization))
        self._transport = _MemoryTransport(self, peer)

    # ------------------------------------------------------------------ lifecycle

    async def open(self) -> None:
        """CONNECT and wait for CONNECTED."""
        self._connection.connection_made(self._transport)
        self.send(C.encode_connect(CLIENT_VERSION))
        await self._connected

    def close(self) -> None:
        """Drop the connection: the broker closes its producers and consumers (unacked
        messages go back to their subscriptions)."""
        if self.closed:
            return
        self.closed = True
        self._transport._closing = True
        self._connection.connection_lost(None)
        self._fail_all(LinkClosedError("The connection to the broker was closed"))

    def _broker_closed(self) -> None:
        """The broker closed the connection (a fatal error on it, or it stops)."""
        if self.closed:
            return
        self.closed = True
        self._loop.call_soon(self._connection.connection_lost, None)
        self._fail_all(LinkClosedError("The broker closed the connection"))
        for producer in list(self._producers.values()):
            producer.on_closed_by_broker()
        for consumer in list(self._consumers.values()):
            consumer.on_closed_by_broker()

    def _fail_all(self, error: RequestError) -> None:
        if not self._connected.done():
            self._connected.set_exception(error)
        for future in self._requests.values():
            if not future.done():
                future.set_exception(error)
        self._requests.clear()

    # ------------------------------------------------------------------ to the broker

    @property
    def broker_closing(self) -> bool:
        """The broker is shutting down: what it closes now will not come back."""
        return bool(self._service.closing)

    @property
    def reading(self) -> bool:
        """False while the broker's connection has stopped reading (its publish limits)."""
        return self._transport.reading

    def next_request_id(self) -> int:
        return next(self._request_ids)

    def next_id(self) -> int:
        """A fresh producer or consumer id on this link."""
        return next(self._ids)

    def send(self, frame: bytes) -> None:
        """Hand one encoded frame to the broker's connection."""
        if self.closed:
            raise LinkClosedError("The connection to the broker was closed")
        self._connection.data_received(frame)

    async def request(self, frame: bytes, request_id: int) -> pb.BaseCommand:
        """Send a request and wait for its answer; ERROR raises :class:`RequestError`."""
        future: asyncio.Future[pb.BaseCommand] = self._loop.create_future()
        self._requests[request_id] = future
        try:
            self.send(frame)
            return await future
        finally:
            self._requests.pop(request_id, None)

    def add_producer(self, producer_id: int, listener: ProducerListener) -> None:
        self._producers[producer_id] = listener

    def add_consumer(self, consumer_id: int, listener: ConsumerListener) -> None:
        self._consumers[consumer_id] = listener

    def remove_consumer(self, consumer_id: int) -> None:
        self._consumers.pop(consumer_id, None)

    def remove_producer(self, producer_id: int) -> None:
        self._producers.pop(producer_id, None)

    # ------------------------------------------------------------------ from the broker

    def _from_broker(self, data: bytes) -> None:
        frames = self._decoder.receive_frames(data, send_frames=False)
        for frame in frames:
            if isinstance(frame, Frame):
                try:
                    self._route(frame)
                except Exception:  # a session's bug must not break the broker's write
                    log.exception("handling %s from the broker failed",
                                  _T.Type.Name(frame.command.type))
        if self._decoder.error is not None:
            log.warning("closing a WebSocket session's broker link: %s", self._decoder.error)
            self._transport.close()

    def _route(self, frame: Frame) -> None:
        cmd = frame.command
        kind = cmd.type
        if kind == _T.MESSAGE:
            consumer = self._consumers.get(cmd.message.consumer_id)
            if consumer is not None and frame.entry is not None:
                consumer.on_message(cmd.message, bytes(frame.entry))
        elif kind == _T.SEND_RECEIPT:
            r = cmd.send_receipt
            producer = self._producers.get(r.producer_id)
            if producer is not None:
                producer.on_receipt(r.sequence_id, r.message_id.ledgerId, r.message_id.entryId)
        elif kind == _T.SEND_ERROR:
            e = cmd.send_error
            producer = self._producers.get(e.producer_id)
            if producer is not None:
                producer.on_send_error(e.sequence_id, RequestError(e.message, int(e.error)))
        elif kind in _ANSWERS:
            self._answer(cmd, getattr(cmd, _ANSWERS[kind]))
        elif kind == _T.CONNECTED:
            if not self._connected.done():
                self._connected.set_result(None)
        elif kind == _T.CLOSE_PRODUCER:
            producer = self._producers.pop(cmd.close_producer.producer_id, None)
            if producer is not None:
                producer.on_closed_by_broker()
        elif kind == _T.CLOSE_CONSUMER:
            consumer = self._consumers.pop(cmd.close_consumer.consumer_id, None)
            if consumer is not None:
                consumer.on_closed_by_broker()
        elif kind == _T.REACHED_END_OF_TOPIC:
            consumer = self._consumers.get(cmd.reachedEndOfTopic.consumer_id)
            if consumer is not None:
                consumer.on_end_of_topic()
        elif kind == _T.PING:
            self._loop.call_soon(self._pong)
        # ACTIVE_CONSUMER_CHANGE and the like change nothing for a WebSocket session

    def _answer(self, cmd: pb.BaseCommand, body: Any) -> None:
        if cmd.type == _T.ERROR and not self._connected.done():
            self._connected.set_exception(RequestError(body.message, int(body.error)))
            return
        future = self._requests.get(int(body.request_id))
        if future is None or future.done():
            return
        if cmd.type == _T.PRODUCER_SUCCESS and body.HasField("producer_ready") \
                and not body.producer_ready:
            return  # queued for exclusive access: the second answer completes the request
        if cmd.type == _T.ERROR or (cmd.type == _T.ACK_RESPONSE and body.HasField("error")):
            future.set_exception(RequestError(body.message, int(body.error)))
        else:
            future.set_result(cmd)

    def _pong(self) -> None:
        if not self.closed:
            self.send(C.encode_pong())
