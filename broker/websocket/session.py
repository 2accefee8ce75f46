"""What every WebSocket session shares: its socket's loop, a bounded outbox, closing.

Theory of operation
-------------------
A :class:`Session` owns one upgraded aiohttp ``WebSocketResponse`` and the session's
:class:`broker.websocket.link.BrokerLink`. :meth:`Session.run` has two loops:

* the *reader* reads the client's frames one at a time and hands each text frame to
  :meth:`Session.on_text`, answering pings itself (so the idle clock sees them); a binary frame
  closes the session (1003), and aiohttp closes it (1009) for a frame over
  ``webSocketMaxTextFrameSize``;
* the *writer* sends what the session queued with :meth:`Session.queue`, awaiting each send, so
  a client that reads slowly holds the writer back (aiohttp waits for its transport to drain).

The outbox is bounded by its producers, not by a size check: the producer session admits a frame
only when it has a slot for its answer, the consumer sessions queue a message only when their
flow control (receiverQueueSize, permits) allows one. So a slow socket stops the broker from
sending (no FLOW, no new SEND) instead of growing a buffer.

A producer or consumer the broker closes (its topic unloaded, a cursor reset) is re-created
by the session (:meth:`Session.reconnect`), as the client inside Pulsar's service does.

Idle sessions: a session with nothing received from the client and nothing sent to it for
``webSocketSessionIdleTimeoutMillis`` is closed with 1001 "Connection Idle Timeout", as Jetty
closes Pulsar's. Errors close the session with a standard code (1003 for a frame that does not
deserialize, 1011 otherwise) and Pulsar's description as the reason (see :func:`close_code`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable

from aiohttp import WSCloseCode, WSMsgType, web

from broker.websocket.frames import FrameError, WebSocketError
from broker.websocket.link import BrokerLink
from protocol.errors import RequestError, ServerError

__all__ = ["SHUTDOWN_REASON", "Session", "close_code"]

log = logging.getLogger("horae.websocket")

#: Re-creating a producer or consumer the broker closed, as the client's backoff does: the
#: first wait, the longest, and when to give up (the client's operation timeout).
RECONNECT_FIRST_S = 0.1
RECONNECT_MAX_S = 3.0
RECONNECT_GIVE_UP_S = 30.0
#: Refusals that another attempt cannot change.
_PERMANENT = frozenset({
    ServerError.TopicTerminatedError, ServerError.AuthorizationError,
    ServerError.AuthenticationError, ServerError.InvalidTopicName,
    ServerError.IncompatibleSchema, ServerError.ProducerFenced, ServerError.NotAllowedError,
    ServerError.TopicNotFound, ServerError.ProducerBlockedQuotaExceededException,
})
#: The reason of the close (1001) when the broker shuts down.
SHUTDOWN_REASON = "Broker is shutting down"
#: How long a closing session waits for its queued frames to be written.
CLOSE_DRAIN_S = 2.0
#: Jetty's reason when it closes an idle WebSocket session.
IDLE_REASON = "Connection Idle Timeout"


def close_code(error: WebSocketError) -> int:
    """The WebSocket close code of one of Pulsar's errors. Pulsar passes its own code (1..8)
    to Jetty, which refuses codes below 1000 (RFC 6455 reserves them), so no close frame is
    sent; Horae sends a valid code and Pulsar's description as the reason."""
    if error in (WebSocketError.FailedToDeserializeFromJSON, WebSocketError.PayloadEncodingError):
        return int(WSCloseCode.UNSUPPORTED_DATA)
    if error in (WebSocketError.AuthenticationError, WebSocketError.NotAuthorizedError):
        return int(WSCloseCode.POLICY_VIOLATION)
    return int(WSCloseCode.INTERNAL_ERROR)


class Session:
    """One WebSocket session (see the module docstring); subclasses handle the frames."""

    def __init__(self, ws: web.WebSocketResponse, link: BrokerLink, topic: str,
                 idle_timeout_s: float) -> None:
        self.ws = ws
        self.link = link
        self.topic = topic
        self._idle_timeout_s = idle_timeout_s
        self._loop = asyncio.get_running_loop()
        self._outbox: deque[tuple[str, object]] = deque()
        self._outbox_ready = asyncio.Event()
        self._outbox_shrunk = asyncio.Event()
        #: the default :meth:`admit` reads the next client frame only below this many queued
        self.outbox_limit = 64
        #: characters of the frames queued and not yet written
        self.outbox_bytes = 0
        self._last_activity = self._loop.time()
        self._closing = False
        self._reader: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ subclass hooks

    def on_text(self, text: str) -> None:
        """A text frame from the client."""
        raise NotImplementedError

    def on_sent(self, tag: object) -> None:
        """The writer handed the frame queued with *tag* to the socket."""

    async def admit(self) -> None:
        """Wait until the session may take the next frame from the client: by default, until
        the outbox holds at most :attr:`outbox_limit` frames (the client's commands may each
        queue an answer)."""
        while len(self._outbox) > self.outbox_limit and not self._closing:
            self._outbox_shrunk.clear()
            await self._outbox_shrunk.wait()

    def admitted_without_answer(self) -> None:
        """The frame :meth:`admit` let in queued no answer (a ping, a pong)."""

    def on_close(self) -> None:
        """The session ends: release what it holds (the link is closed after this)."""

    # ------------------------------------------------------------------ output

    def queue(self, text: str, tag: object = None) -> None:
        """Queue one frame for the writer (*tag* comes back to :meth:`on_sent`)."""
        self._outbox.append((text, tag))
        self.outbox_bytes += len(text)
        self._outbox_ready.set()

    @property
    def outbox_size(self) -> int:
        return len(self._outbox)

    def close_with(self, error: WebSocketError, message: str | None = None) -> None:
        """Close the session for one of Pulsar's errors (reason: its description)."""
        reason = error.description if not message else f"{error.description}: {message}"
        log.warning("closing WebSocket session on %s: %s", self.topic, reason)
        self.close(close_code(error), reason)

    async def reconnect(self, attempt: Callable[[], Awaitable[None]], what: str) -> bool:
        """Run *attempt* (re-create what the broker closed) until it succeeds, with the
        client's backoff; a permanent refusal, or none succeeding within
        :data:`RECONNECT_GIVE_UP_S`, closes the session. True when it succeeded."""
        delay = RECONNECT_FIRST_S
        deadline = self._loop.time() + RECONNECT_GIVE_UP_S
        while not self._closing and not self.link.closed:
            if self.link.broker_closing:
                self.close(int(WSCloseCode.GOING_AWAY), SHUTDOWN_REASON)
                return False
            try:
                await attempt()
                return True
            except RequestError as exc:
                if exc.code in _PERMANENT or self._loop.time() + delay > deadline:
                    self.close_with(WebSocketError.UnknownError, f"{what}: {exc.message}")
                    return False
                log.info("re-creating the %s on %s failed (%s); trying again in %.1f s",
                         what, self.topic, exc.message, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, RECONNECT_MAX_S)
        return False

    def close(self, code: int, reason: str) -> None:
        if self._closing:
            return
        self._closing = True
        self._loop.create_task(self._close(code, reason))

    async def _close(self, code: int, reason: str) -> None:
        # answers queued before the close go out first (bounded: the writer may be stuck on a
        # client that does not read)
        deadline = self._loop.time() + CLOSE_DRAIN_S
        while self._outbox and not self.ws.closed and self._loop.time() < deadline:
            self._outbox_shrunk.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._outbox_shrunk.wait(), deadline - self._loop.time())
        with contextlib.suppress(Exception):
            # a close reason is at most 123 bytes (RFC 6455, 5.5)
            await self.ws.close(code=code, message=reason.encode()[:123])
        if self._reader is not None:
            self._reader.cancel()  # it may wait in admit() for answers that will not come

    # ------------------------------------------------------------------ the loops

    async def run(self) -> None:
        reader = self._reader = self._loop.create_task(self._read_loop())
        writer = self._loop.create_task(self._write_loop())
        idle = self._loop.create_task(self._idle_loop())
        try:
            await asyncio.wait([reader])
        finally:
            self._closing = True
            for task in (reader, writer, idle):
                task.cancel()
            try:
                self.on_close()
            finally:
                self.link.close()
            for task in (reader, writer, idle):
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    async def _read_loop(self) -> None:
        ws = self.ws
        while not self._closing:
            await self.admit()
            if self._closing:
                break
            msg = await ws.receive()
            self._last_activity = self._loop.time()
            if msg.type == WSMsgType.TEXT:
                try:
                    self.on_text(msg.data)
                except FrameError as exc:
                    self.close_with(exc.error, exc.message)
            elif msg.type in (WSMsgType.PING, WSMsgType.PONG):
                self.admitted_without_answer()
                if msg.type == WSMsgType.PING:
                    await ws.pong(msg.data)
            elif msg.type == WSMsgType.BINARY:
                self.close(int(WSCloseCode.UNSUPPORTED_DATA), "Binary frames are not supported")
            elif msg.type == WSMsgType.ERROR:
                # aiohttp closed the socket itself (1009 for a frame over max_msg_size)
                log.info("WebSocket session on %s: %s", self.topic, ws.exception())
                break
            elif msg.type in (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED):
                break

    async def _write_loop(self) -> None:
        ws = self.ws
        outbox = self._outbox
        while True:
            while not outbox:
                self._outbox_ready.clear()
                await self._outbox_ready.wait()
            text, tag = outbox.popleft()
            if ws.closed:
                return
            await ws.send_str(text)  # waits while the client's socket is full
            self.outbox_bytes -= len(text)
            self._last_activity = self._loop.time()
            self._outbox_shrunk.set()
            self.on_sent(tag)

    async def _idle_loop(self) -> None:
        timeout = self._idle_timeout_s
        if timeout <= 0:
            return
        while not self._closing:
            remaining = self._last_activity + timeout - self._loop.time()
            if remaining <= 0:
                self.close(int(WSCloseCode.GOING_AWAY), IDLE_REASON)
                return
            await asyncio.sleep(remaining)
