"""BrokerServer: opens the store, starts the service, the binary listener, the web app and
the metric snapshot exporter; stops them in the reverse order.

Theory of operation
-------------------
:meth:`BrokerServer.start` runs on the event loop that will serve the broker (uvloop in
production and in :mod:`broker.embed`):

1. open the segment store under ``<dataDir>/store`` (recovers ledgers, cursors, metadata);
2. start :class:`broker.topics.service.BrokerService` (default tenant/namespace, policy mirrors);
3. listen for the binary protocol on ``bindAddress:brokerServicePort``, one
   :class:`broker.net.connection.ServerConnection` per TCP connection; the server owns the
   live connections (``connections``) and runs their keep-alive timer;
4. serve the admin app (:func:`broker.admin.app.create_app`) on ``webServicePort`` with
   aiohttp's AppRunner;
5. start the metric snapshot exporter (``broker.metrics.snapshots``) writing
   ``<dataDir>/metrics`` every ``metricsExportIntervalSeconds``.

Every module is imported at start-up: a broken install fails here, never as a quieter broker.

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
from collections.abc import Iterable

from aiohttp import web

from broker import SERVER_VERSION
from broker.admin.app import create_app
from broker.config import BrokerConfig, storage_config
from broker.logs import ACCESS_LOGGER, HttpAccessLogger
from broker.metrics import create_registry
from broker.metrics.snapshots import MetricSnapshotWriter, run_exporter
from broker.net.connection import ServerConnection
from broker.topics.service import BrokerService
from storage.diskusage import MeasureSpace, statvfs_space
from storage.store import SegmentStore

__all__ = ["BrokerServer"]

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
        self.broker_port = config.broker_service_port
        self.web_port = config.web_service_port
        self.connections: set[ServerConnection] = set()
        self._keepalive: asyncio.Task[None] | None = None
        self._started = False
        self._stopped = False

    @property
    def service(self) -> BrokerService:
        assert self._service is not None, "broker not started"
        return self._service

    @property
    def data_dir(self) -> pathlib.Path:
        return pathlib.Path(self.config.data_dir)

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        data = self.data_dir
        data.mkdir(parents=True, exist_ok=True)
        self.store = await SegmentStore.open(data / STORE_DIR_NAME, storage_config(self.config),
                                             measure_space=self._measure_space)
        service = self._service = BrokerService(self.config, self.store, loop)
        await service.start()
        self._server = await loop.create_server(
            lambda: ServerConnection(service, self), host=self.config.bind_address,
            port=self.config.broker_service_port, reuse_address=True, backlog=1024)
        self.broker_port = _bound_port(self._server.sockets)
        service.broker_port = self.broker_port
        # Nagle off, or a lone SEND_RECEIPT waits for the client's delayed ACK. uvloop (and
        # asyncio) already set TCP_NODELAY on every accepted transport; the listener gets it too
        # for any other loop (Linux copies it to accepted sockets). Pinned by
        # test_accepted_connections_disable_nagle.
        for sock in self._server.sockets:
            if sock.family in (socket.AF_INET, socket.AF_INET6):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._keepalive = loop.create_task(self._keepalive_loop())
        await self._start_web(service)
        self._start_exporter(service)
        self._started = True

    # ------------------------------------------------------------------ connections

    def connection_opened(self, connection: ServerConnection) -> None:
        self.connections.add(connection)

    def connection_closed(self, connection: ServerConnection) -> None:
        self.connections.discard(connection)

    async def _keepalive_loop(self) -> None:
        """Every ``keepAliveIntervalSeconds``: PING idle connections, close silent ones."""
        interval = float(self.config.keep_alive_interval_seconds)
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(interval)
            now = loop.time()
            for conn in list(self.connections):
                conn.keepalive_tick(now, interval)

    async def _start_web(self, service: BrokerService) -> None:
        app = create_app(service)
        self._runner = web.AppRunner(app, access_log=logging.getLogger(ACCESS_LOGGER),
                                     access_log_class=HttpAccessLogger, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.config.bind_address, self.config.web_service_port,
                           reuse_address=True)
        await site.start()
        # The bound port (webServicePort may be 0): the runner lists its listeners' addresses.
        self.web_port = int(self._runner.addresses[0][1])
        service.web_port = self.web_port

    def _start_exporter(self, service: BrokerService) -> None:
        collect = create_registry(service).collect
        writer = MetricSnapshotWriter(self.data_dir, f"{self.config.advertised_address}:"
                                      f"{self.web_port}", self.config.cluster_name,
                                      self.config.metrics_export_retention_hours)
        self._exporter_stop = asyncio.Event()
        self._exporter = asyncio.get_running_loop().create_task(run_exporter(
            writer, collect, float(self.config.metrics_export_interval_seconds),
            self._exporter_stop))

    async def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        if self._server is not None:
            self._server.close()  # stop accepting
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
            service.closing = True
            await service.close()   # topics: in-flight appends finish, clients are told
        if self._keepalive is not None:
            self._keepalive.cancel()
        for conn in list(self.connections):
            conn.close("broker shutting down")
        if self._runner is not None:
            await self._runner.cleanup()
        if self._server is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), 5)
        if self.store is not None:
            await self.store.close()

    def urls(self) -> tuple[str, str]:
        host = self.config.advertised_address
        return f"pulsar://{host}:{self.broker_port}", f"http://{host}:{self.web_port}"

    def started_line(self) -> str:
        """The one log line printed at start (tests parse 'service ... web ...')."""
        service_url, web_url = self.urls()
        return (f"{SERVER_VERSION} started: service {service_url} web {web_url} "
                f"data {self.data_dir.resolve()}")


def _bound_port(sockets: Iterable[socket.socket]) -> int:
    for sock in sockets:
        return int(sock.getsockname()[1])
    raise RuntimeError("listener has no socket")
