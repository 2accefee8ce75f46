"""BrokerServer: opens the store, starts the service, the binary listener, the web app and
the metric snapshot exporter; stops them in the reverse order.

Theory of operation
-------------------
:meth:`BrokerServer.start` runs on the event loop that will serve the broker (uvloop in
production and in :mod:`broker.embed`):

1. open the segment store under ``<dataDir>/store`` (recovers ledgers, cursors, metadata);
2. start :class:`broker.topics.service.BrokerService` (default tenant/namespace, policy mirrors)
   and compose its metrics (:class:`broker.metrics.BrokerMetrics`: the collector, the loop-lag
   probe, the publish buffer and the listeners' figures), the one object the web app's
   ``/metrics`` and the snapshot exporter both read;
3. build the security services (:mod:`broker.security`: authentication providers, reading key
   and password files, and authorization over the service's policies) and, when
   ``brokerServicePortTls`` or ``webServicePortTls`` is set, the reloading TLS context
   (:class:`broker.security.tls.ReloadingServerContext`) and its file-watch task;
4. listen for the binary protocol on ``bindAddress:brokerServicePort`` (and
   ``brokerServicePortTls`` with TLS), one :class:`broker.net.connection.ServerConnection` per
   TCP connection; the server owns the live connections (``connections``), admits them
   against ``brokerMaxConnections``/``brokerMaxConnectionsPerIp``
   (:class:`broker.net.limits.ConnectionLimiter`), hands them the broker-wide publish buffer
   (:class:`broker.net.throttle.PublishBuffer`, ``maxMessagePublishBufferSizeInMB``), and runs
   their keep-alive and credential refresh timers (one each for all connections);
5. serve the admin app (:func:`broker.admin.app.create_app`) on ``webServicePort`` (and
   ``webServicePortTls``) with aiohttp's AppRunner (``keepalive_timeout`` =
   ``httpServerIdleTimeoutMs``), on listeners of its own (backlog ``httpServerAcceptQueueSize``)
   whose connections pass the :class:`broker.admin.listener.WebConnectionGuard`
   (``maxHttpServerConnections``, ``httpServerRequestHeaderTimeoutMs``); the soft open-file
   limit is raised to the hard one first, and the web port kept to half of it.
   Every listener binds first without serving; the bound ports are then handed to the service
   once (:meth:`broker.topics.addresses.BrokerAddresses.serve_on`: lookups and URLs read them)
   and the listeners start serving;
6. start the metric snapshot exporter (``broker.metrics.snapshots``) writing
   ``<dataDir>/metrics`` every ``metricsExportIntervalSeconds``.

Every module is imported at start-up: a broken install fails here, never as a quieter broker.
A listener on a non-loopback address with ``authenticationEnabled=false`` is logged as a
warning at start-up: anyone who can reach it may do anything.

:meth:`stop` is graceful and idempotent: stop accepting, close client connections after
their queued frames are written (in-flight appends finish first: topic close waits for the
ledger), export a last metric snapshot, close the store (flushes cursors).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import pathlib
import socket
import time
from collections.abc import Iterable

from aiohttp import web

from broker import SERVER_VERSION
from broker.admin.app import create_app
from broker.admin.listener import WebConnectionGuard, raise_fd_limit, web_connection_limit
from broker.config import BrokerConfig, storage_config
from broker.delayed.residual import is_snapshot_key
from broker.listeners import BoundPorts
from broker.logs import ACCESS_LOGGER, HttpAccessLogger
from broker.metrics import BrokerMetrics, ConnectionFigures, LoopLagProbe
from broker.metrics.snapshots import MetricSnapshotWriter, run_exporter
from broker.net.connection import ServerConnection
from broker.net.handshake import ConnectionSecurity
from broker.net.limits import ConnectionLimiter
from broker.net.lookup import is_loopback
from broker.net.output import WriteHold
from broker.net.throttle import OutputPauses, PublishBuffer
from broker.security.authentication import AuthenticationService
from broker.security.authorization import AuthorizationService
from broker.security.tls import ReloadingServerContext, TlsSettings
from broker.shutdown_request import ShutdownRequest
from broker.topics.service import BrokerService
from storage.diskusage import MeasureSpace, statvfs_space
from storage.pacing import sleep_to_beat
from storage.store import SegmentStore

__all__ = ["BrokerServer", "insecure_listener_warning"]

log = logging.getLogger("horae.server")

STORE_DIR_NAME = "store"


class BrokerServer:
    def __init__(self, config: BrokerConfig, *,
                 measure_space: MeasureSpace = statvfs_space) -> None:
        """measure_space: how storage measures disk usage (tests drive the watermarks)."""
        self.config = config
        self._measure_space = measure_space
        self.store: SegmentStore | None = None
        self._service: BrokerService | None = None
        self._server: asyncio.base_events.Server | None = None
        self._runner: web.AppRunner | None = None
        self._exporter: asyncio.Task[None] | None = None
        self._exporter_stop: asyncio.Event | None = None
        # The configured ports until the listeners bind (0 = any free port).
        self.ports = BoundPorts(config.broker_service_port, config.web_service_port)
        self.metrics: BrokerMetrics | None = None
        self.connections: set[ServerConnection] = set()
        self._limiter = ConnectionLimiter(config.broker_max_connections,
                                          config.broker_max_connections_per_ip)
        self.publish_buffer = PublishBuffer(config.max_message_publish_buffer_size_in_mb)
        self.output_pauses = OutputPauses()
        # Every connection's writes wait while the store tells a group commit's outcomes,
        # then go out in one write each (broker/net/output.py).
        self.write_hold = WriteHold()
        self.web_guard = WebConnectionGuard(config.max_http_server_connections,
                                            config.http_server_request_header_timeout_ms / 1000)
        self._web_servers: list[asyncio.base_events.Server] = []
        self._server_tls: asyncio.base_events.Server | None = None
        self.tls: ReloadingServerContext | None = None
        self._tls_stop = asyncio.Event()
        self._timers: list[asyncio.Task[None]] = []
        self._keepalive: asyncio.Task[None] | None = None
        self._started = False
        self._stopped = False
        self.shutdown_request = ShutdownRequest(self._stop_soon)
        self._stop_task: asyncio.Task[None] | None = None

    @property
    def service(self) -> BrokerService:
        assert self._service is not None, "broker not started"
        return self._service

    @property
    def broker_port(self) -> int:
        return self.ports.broker

    @property
    def web_port(self) -> int:
        return self.ports.web

    @property
    def broker_port_tls(self) -> int | None:
        return self.ports.broker_tls

    @property
    def web_port_tls(self) -> int | None:
        return self.ports.web_tls

    @property
    def data_dir(self) -> pathlib.Path:
        return pathlib.Path(self.config.data_dir)

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        data = self.data_dir
        data.mkdir(parents=True, exist_ok=True)
        # The broker records every live bucket snapshot id as a cursor property, so the
        # store's open deletes the snapshots none names (broker/delayed/residual.py).
        self.store = await SegmentStore.open(data / STORE_DIR_NAME, storage_config(self.config),
                                             measure_space=self._measure_space,
                                             is_snapshot_key=is_snapshot_key,
                                             completion_scope=self.write_hold)
        service = self._service = BrokerService(self.config, self.store, loop)
        config = self.config
        authentication = AuthenticationService.from_config(config)  # reads key files: start-up only
        self.metrics = BrokerMetrics(
            service, lag_probe=LoopLagProbe(), publish_buffer=self.publish_buffer,
            connections=ConnectionFigures(self.output_pauses, self.web_guard),
            authentication=authentication.counters,
            resource_groups=service.policies.resource_groups)
        self.web_guard.max_connections = web_connection_limit(
            self.config.max_http_server_connections, raise_fd_limit())
        await service.start()
        authorization = AuthorizationService.from_config(config, service.tenancy)
        security = ConnectionSecurity(authentication, authorization,
                                      float(config.handshake_timeout_seconds))
        if config.broker_service_port_tls is not None or config.web_service_port_tls is not None:
            self.tls = ReloadingServerContext(TlsSettings.from_config(config))
            self._timers.append(loop.create_task(self.tls.run(self._tls_stop)))
        self._server = await loop.create_server(
            lambda: ServerConnection(service, self, security,
                                     publish_buffer=self.publish_buffer,
                                     output_pauses=self.output_pauses,
                                     write_hold=self.write_hold), host=config.bind_address,
            port=config.broker_service_port, reuse_address=True, backlog=1024,
            start_serving=False)
        if config.broker_service_port_tls is not None:
            assert self.tls is not None
            self._server_tls = await loop.create_server(
                lambda: ServerConnection(service, self, security,
                                     publish_buffer=self.publish_buffer,
                                     output_pauses=self.output_pauses,
                                     write_hold=self.write_hold), host=config.bind_address,
                port=config.broker_service_port_tls, reuse_address=True, backlog=1024,
                ssl=self.tls.listening, start_serving=False)
        # Nagle off, or a lone SEND_RECEIPT waits for the client's delayed ACK. uvloop (and
        # asyncio) already set TCP_NODELAY on every accepted transport; the listener gets it too
        # for any other loop (Linux copies it to accepted sockets). Pinned by
        # test_accepted_connections_disable_nagle.
        for server in (self._server, self._server_tls):
            for sock in server.sockets if server is not None else ():
                if sock.family in (socket.AF_INET, socket.AF_INET6):
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        await self._start_web(service, authentication, authorization)
        # Every listener is bound, none serves yet: the ports are handed over once.
        self.ports = BoundPorts(
            _bound_port(self._server.sockets), _bound_port(self._web_servers[0].sockets),
            _bound_port(self._server_tls.sockets) if self._server_tls is not None else None,
            _bound_port(self._web_servers[1].sockets) if len(self._web_servers) > 1 else None)
        service.addresses.serve_on(self.ports)
        for server in (self._server, self._server_tls, *self._web_servers):
            if server is not None:
                await server.start_serving()
        self._keepalive = loop.create_task(self._keepalive_loop())
        if authentication.enabled:
            self._timers.append(loop.create_task(self._auth_refresh_loop()))
        warning = insecure_listener_warning(config)
        if warning is not None:
            log.warning("%s", warning)
        self._start_exporter(self.metrics)
        self._started = True

    # ------------------------------------------------------------------ connections

    def connection_opened(self, connection: ServerConnection) -> None:
        refusal = self._limiter.refusal(connection.remote_ip)
        if refusal is not None:
            log.warning("refusing connection from %s: %s", connection.remote_address, refusal)
            connection.close(refusal)
            return
        self.connections.add(connection)

    def connection_closed(self, connection: ServerConnection) -> None:
        if connection in self.connections:
            self.connections.discard(connection)
            self._limiter.release(connection.remote_ip)

    async def _auth_refresh_loop(self) -> None:
        """Every ``authenticationRefreshCheckSeconds``: challenge expired credentials."""
        interval = float(self.config.authentication_refresh_check_seconds)
        while True:
            await sleep_to_beat(interval)
            now_ms = int(time.time() * 1000)
            for conn in list(self.connections):
                conn.handshake.refresh_tick(now_ms)

    async def _keepalive_loop(self) -> None:
        """Every ``keepAliveIntervalSeconds``: PING idle connections, close silent ones."""
        interval = float(self.config.keep_alive_interval_seconds)
        loop = asyncio.get_running_loop()
        while True:
            await sleep_to_beat(interval)   # with the other periodic work (storage.pacing)
            now = loop.time()
            for conn in list(self.connections):
                conn.keepalive_tick(now, interval)

    async def _start_web(self, service: BrokerService, authentication: AuthenticationService,
                         authorization: AuthorizationService) -> None:
        config = self.config
        app = create_app(service, metrics_source=self.metrics, authentication=authentication,
                         authorization=authorization, web_guard=self.web_guard,
                         shutdown=self.shutdown_request)
        self._runner = web.AppRunner(app, access_log=logging.getLogger(ACCESS_LOGGER),
                                     access_log_class=HttpAccessLogger, handle_signals=False,
                                     keepalive_timeout=config.http_server_idle_timeout_ms / 1000)
        await self._runner.setup()
        # Listeners of our own rather than aiohttp's sites: every connection passes the guard.
        loop = asyncio.get_running_loop()
        handlers = self._runner.server
        assert handlers is not None  # set up above
        protocol = self.web_guard.protocol_factory(handlers)
        listener = await loop.create_server(
            protocol, host=config.bind_address, port=config.web_service_port,
            reuse_address=True, backlog=config.http_server_accept_queue_size,
            start_serving=False)
        self._web_servers.append(listener)
        if config.web_service_port_tls is not None:
            assert self.tls is not None
            listener_tls = await loop.create_server(
                protocol, host=config.bind_address, port=config.web_service_port_tls,
                reuse_address=True, backlog=config.http_server_accept_queue_size,
                ssl=self.tls.listening,
                # the TLS handshake comes before the head: it gets no longer than the head does
                ssl_handshake_timeout=config.http_server_request_header_timeout_ms / 1000,
                start_serving=False)
            self._web_servers.append(listener_tls)

    def _start_exporter(self, metrics: BrokerMetrics) -> None:
        collect = metrics.snapshot_families
        writer = MetricSnapshotWriter(self.data_dir, f"{self.config.advertised_address}:"
                                      f"{self.web_port}", self.config.cluster_name,
                                      self.config.metrics_export_retention_hours)
        self._exporter_stop = asyncio.Event()
        self._exporter = asyncio.get_running_loop().create_task(run_exporter(
            writer, collect, float(self.config.metrics_export_interval_seconds),
            self._exporter_stop))

    def _stop_soon(self) -> None:
        """The default answer to a REST shutdown: the graceful stop, on the loop."""
        self._stop_task = asyncio.get_running_loop().create_task(self.stop())

    async def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        for server in (self._server, self._server_tls, *self._web_servers):
            if server is not None:
                server.close()  # stop accepting
        self._tls_stop.set()
        for timer in self._timers:
            timer.cancel()
        # The exporter's last snapshot is taken while the topics are still loaded, so the
        # files end with the final counters (a snapshot after unloading would hold no topic).
        if self._exporter is not None and self._exporter_stop is not None:
            self._exporter_stop.set()
            try:
                await asyncio.wait_for(self._exporter, 10)
            except (TimeoutError, asyncio.CancelledError, Exception):
                log.warning("metric exporter did not stop cleanly")
        service = self._service
        if service is not None:
            await service.close()   # topics: in-flight appends finish, clients are told
        if self._keepalive is not None:
            self._keepalive.cancel()
        for conn in list(self.connections):
            conn.close("broker shutting down")
        if self._runner is not None:
            await self._runner.cleanup()
        for server in (self._server, self._server_tls, *self._web_servers):
            if server is not None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(server.wait_closed(), 5)
        if self.store is not None:
            await self.store.close()

    def urls(self) -> tuple[str, str]:
        host = self.config.advertised_address
        return f"pulsar://{host}:{self.broker_port}", f"http://{host}:{self.web_port}"

    def started_line(self) -> str:
        """The one log line printed at start (tests parse 'service ... web ...')."""
        service_url, web_url = self.urls()
        host = self.config.advertised_address
        tls = ""
        if self.broker_port_tls is not None:
            tls += f" service-tls pulsar+ssl://{host}:{self.broker_port_tls}"
        if self.web_port_tls is not None:
            tls += f" web-tls https://{host}:{self.web_port_tls}"
        return (f"{SERVER_VERSION} started: service {service_url} web {web_url}{tls} "
                f"data {self.data_dir.resolve()}")


def insecure_listener_warning(config: BrokerConfig) -> str | None:
    """The start-up warning for listeners reachable from other hosts without authentication."""
    if config.authentication_enabled or is_loopback(config.bind_address):
        return None
    return (f"authenticationEnabled is false and the listeners bind {config.bind_address} "
            "(not loopback): anyone who can reach them can produce, consume and administer "
            "everything")


def _bound_port(sockets: Iterable[socket.socket]) -> int:
    for sock in sockets:
        return int(sock.getsockname()[1])
    raise RuntimeError("listener has no socket")
