"""The web port's connections: a limit, a request-head timeout, and the file descriptors they use.

Theory of operation
-------------------
aiohttp serves the admin app (:func:`broker.admin.app.create_app`) but bounds neither how many
connections stay open nor how long a request head may take to arrive; its keep-alive timer
(``httpServerIdleTimeoutMs``, given to the AppRunner as ``keepalive_timeout``) closes a
connection that has not delivered a complete request head that long after it was accepted or
after its last response. :class:`WebConnectionGuard`, owned by the server
(:class:`broker.server.BrokerServer`), adds the rest. Its :meth:`WebConnectionGuard.protocol_factory`
wraps aiohttp's protocol factory; every accepted connection gets a :class:`GuardedConnection`
standing in front of aiohttp's handler (every protocol callback is passed on):

1. ``maxHttpServerConnections`` (Pulsar's name and default, 2048): an accepted connection
   beyond it is aborted at once, before aiohttp sees it, counted (``refused_times``) and logged
   at WARN at most once per :data:`WARN_INTERVAL_S` (with the count since the last line). Its
   file descriptor is freed at once; nothing is read from it.
2. ``httpServerRequestHeaderTimeoutMs`` (Horae's): a request head must arrive whole within
   that long of its first byte, or the connection is closed (``header_timeouts``): a client
   that trickles a head (slowloris) holds its socket no longer than that. The head is known
   whole when the request reaches the app: :meth:`WebConnectionGuard.middleware`, the app's
   first middleware, tells the connection (through the aiohttp handler, ``request.protocol``),
   and tells it again when the app is done, after which the next byte starts the timer anew.
   Bytes that arrive while a request is in the app start no timer (a pipelined head then has
   the idle timeout only).
3. The listeners share the process's file descriptors with the binary port and the store.
   :func:`raise_fd_limit` lifts the soft ``RLIMIT_NOFILE`` to the hard one at start-up, and
   :func:`web_connection_limit` keeps the web port to half of it whatever
   ``maxHttpServerConnections`` says (0 included), with a warning, so idle web sockets can never
   take the descriptors the binary port needs to accept.

Everything runs on the broker's event loop; counters are plain ints read at scrape time
(:mod:`broker.metrics.connection_families`).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import resource
from collections.abc import Awaitable, Callable

from aiohttp import web

__all__ = ["WARN_INTERVAL_S", "GuardedConnection", "WebConnectionGuard", "raise_fd_limit",
           "web_connection_limit"]

log = logging.getLogger("horae.web")

#: Refused web connections are logged at most once per this many seconds.
WARN_INTERVAL_S = 10.0

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class _Head(enum.Enum):
    IDLE = "idle"            # no request under way: the next byte starts the head timer
    ARRIVING = "arriving"    # a head has begun: the timer runs
    IN_APP = "in_app"        # the head arrived whole: the app has the request


class GuardedConnection(asyncio.Protocol):
    """One web connection: admitted or refused, its head timer, aiohttp's handler behind it."""

    def __init__(self, guard: WebConnectionGuard,
                 inner_factory: Callable[[], asyncio.Protocol]) -> None:
        self._guard = guard
        self._inner_factory = inner_factory
        self._inner: asyncio.Protocol | None = None
        self._transport: asyncio.Transport | None = None
        self._head = _Head.IDLE
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        if not self._guard.admit(transport):
            transport.abort()  # type: ignore[attr-defined]
            return
        inner = self._inner = self._inner_factory()
        self._guard.opened(inner, self)
        inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        inner = self._inner
        if inner is None:
            return
        if self._head is _Head.IDLE:
            self._head = _Head.ARRIVING
            self._timer = asyncio.get_running_loop().call_later(
                self._guard.header_timeout_s, self._head_timed_out)
        inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received() if self._inner is not None else None

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timer()
        inner = self._inner
        if inner is None:
            return
        self._inner = None
        self._guard.closed(inner)
        inner.connection_lost(exc)

    def pause_writing(self) -> None:
        if self._inner is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._inner is not None:
            self._inner.resume_writing()

    # ------------------------------------------------------------------ the head timer

    def head_arrived(self) -> None:
        """The request reached the app: its head is whole."""
        self._cancel_timer()
        self._head = _Head.IN_APP

    def request_done(self) -> None:
        self._head = _Head.IDLE

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _head_timed_out(self) -> None:
        self._timer = None
        if self._head is not _Head.ARRIVING or self._transport is None:
            return
        self._guard.header_timeouts += 1
        peer = self._transport.get_extra_info("peername")
        log.info("closing web connection from %s: no complete request head within %.0f ms",
                 peer, self._guard.header_timeout_s * 1000)
        self._transport.close()


class WebConnectionGuard:
    """The web port's connection limit and head timeout, and their figures (see module doc).

    *max_connections*: the effective limit (:func:`web_connection_limit`), 0 = none."""

    def __init__(self, max_connections: int, header_timeout_s: float) -> None:
        self.max_connections = max_connections
        self.header_timeout_s = header_timeout_s
        self.open_connections = 0
        self.refused_times = 0
        self.header_timeouts = 0
        self._by_handler: dict[asyncio.Protocol, GuardedConnection] = {}
        self._last_warning = float("-inf")
        self._refused_since_warning = 0

    def protocol_factory(self, inner_factory: Callable[[], asyncio.Protocol],
                         ) -> Callable[[], asyncio.Protocol]:
        """What the web listener calls per accepted connection instead of *inner_factory*."""
        return lambda: GuardedConnection(self, inner_factory)

    def admit(self, transport: asyncio.BaseTransport) -> bool:
        if self.max_connections <= 0 or self.open_connections < self.max_connections:
            return True
        self.refused_times += 1
        self._refused_since_warning += 1
        now = asyncio.get_running_loop().time()
        if now - self._last_warning >= WARN_INTERVAL_S:
            log.warning("refusing web connections: maxHttpServerConnections=%d are open "
                        "(%d refused since the last warning; last from %s)",
                        self.max_connections, self._refused_since_warning,
                        transport.get_extra_info("peername"))
            self._last_warning = now
            self._refused_since_warning = 0
        return False

    def opened(self, handler: asyncio.Protocol, connection: GuardedConnection) -> None:
        self.open_connections += 1
        self._by_handler[handler] = connection

    def closed(self, handler: asyncio.Protocol) -> None:
        self.open_connections -= 1
        self._by_handler.pop(handler, None)

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """The app's first middleware: the request's head arrived whole; then the app is done."""
        connection = self._by_handler.get(request.protocol)
        if connection is None:
            return await handler(request)
        connection.head_arrived()
        try:
            return await handler(request)
        finally:
            connection.request_done()


def raise_fd_limit() -> int:
    """Lift the soft ``RLIMIT_NOFILE`` to the hard limit (as the JVM does at start-up); return
    the soft limit in force (``RLIM_INFINITY`` as a large int)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard and (hard == resource.RLIM_INFINITY or soft < hard):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as exc:
            log.warning("could not raise the open-file limit from %d to %d: %s", soft, hard, exc)
    return soft if soft != resource.RLIM_INFINITY else 1 << 30


def web_connection_limit(configured: int, fd_limit: int) -> int:
    """The web port's effective connection limit: *configured* (``maxHttpServerConnections``,
    0 = none), at most half of *fd_limit* so the binary port and the store keep descriptors.
    A lowered value is logged at WARN."""
    budget = max(1, fd_limit // 2)
    if 0 < configured <= budget:
        return configured
    log.warning("maxHttpServerConnections=%d%s does not leave the binary port and the store "
                "enough of the %d open files this process may have: the web port takes at most "
                "%d connections (raise the open-file limit, e.g. LimitNOFILE, to allow more)",
                configured, " (no limit)" if configured <= 0 else "", fd_limit, budget)
    return budget
