"""Run a broker inside this process, on its own thread and uvloop loop (tests, embedding).

Theory of operation
-------------------
:func:`start_broker` starts a thread that creates a fresh uvloop event loop, starts a
:class:`broker.server.BrokerServer` on it (binding 127.0.0.1, advertising 127.0.0.1, ports 0 =
any free port), and reports readiness (or the start-up exception) back through a
``concurrent.futures.Future``. The returned :class:`BrokerHandle` is the only way in from other
threads: :meth:`BrokerHandle.call` runs a function on the broker loop and returns its result,
which keeps every broker object single-threaded. :meth:`BrokerHandle.stop` shuts the server
down gracefully (stop accepting, close connections, flush and close the store) and joins the
thread; it is idempotent.

Usage::

    with start_broker(data_dir=tmp) as b:
        client = pulsar.Client(b.service_url)
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import pathlib
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import uvloop

from broker.config_loading import load_config

if TYPE_CHECKING:
    from broker.server import BrokerServer
    from broker.topics.service import BrokerService
    from storage.diskusage import MeasureSpace

__all__ = ["BrokerHandle", "start_broker"]

T = TypeVar("T")

#: Bounded waits so a wedged broker fails a test instead of hanging it.
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0


class BrokerHandle:
    """A running in-process broker. Thread-safe; use :meth:`call` to touch broker objects."""

    def __init__(self, server: BrokerServer, loop: asyncio.AbstractEventLoop,
                 thread: threading.Thread, data_dir: pathlib.Path) -> None:
        self._server = server
        self._loop = loop
        self._thread = thread
        self._stopped = False
        self._stop_lock = threading.Lock()
        self.data_dir = data_dir
        self.broker_port: int = server.broker_port
        self.web_port: int = server.web_port
        self.service_url = f"pulsar://127.0.0.1:{self.broker_port}"
        self.web_url = f"http://127.0.0.1:{self.web_port}"

    @property
    def server(self) -> BrokerServer:
        """The server object (touch only on the broker thread, e.g. inside :meth:`call`)."""
        return self._server

    @property
    def service(self) -> BrokerService:
        """The BrokerService. Read it from other threads only through :meth:`call`."""
        return self._server.service

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    @property
    def running(self) -> bool:
        return not self._stopped and self._thread.is_alive()

    def call(self, fn: Callable[..., Any], *args: Any, timeout: float = 30.0) -> Any:
        """Run ``fn(*args)`` on the broker loop; await it if it returns an awaitable."""

        async def runner() -> Any:
            result = fn(*args)
            if inspect.isawaitable(result):
                result = await result
            return result

        fut = asyncio.run_coroutine_threadsafe(runner(), self._loop)
        return fut.result(timeout)

    def stop(self) -> None:
        """Graceful shutdown; idempotent."""
        with self._stop_lock:
            if self._stopped:
                return
            self._stopped = True
        if self._loop.is_running():
            fut = asyncio.run_coroutine_threadsafe(self._server.stop(), self._loop)
            try:
                fut.result(STOP_TIMEOUT_S)
            finally:
                self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(STOP_TIMEOUT_S)

    def __enter__(self) -> BrokerHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<BrokerHandle {self.service_url} {self.web_url} data={self.data_dir}>"


def start_broker(*, data_dir: pathlib.Path | str, broker_port: int = 0, web_port: int = 0,
                 config_overrides: Mapping[str, object] | None = None,
                 bind_address: str = "127.0.0.1",
                 advertised_address: str = "127.0.0.1",
                 measure_space: MeasureSpace | None = None) -> BrokerHandle:
    """Start a broker on a new thread and return once it accepts connections.

    measure_space: how storage measures disk usage (tests drive the disk watermarks)."""
    from broker.server import BrokerServer

    data_path = pathlib.Path(data_dir)
    overrides: dict[str, object] = {
        "dataDir": str(data_path),
        "brokerServicePort": broker_port,
        "webServicePort": web_port,
        "bindAddress": bind_address,
        "advertisedAddress": advertised_address,
    }
    overrides.update(config_overrides or {})
    config = load_config(None, overrides)
    loop = uvloop.new_event_loop()
    server = (BrokerServer(config) if measure_space is None
              else BrokerServer(config, measure_space=measure_space))
    ready: concurrent.futures.Future[None] = concurrent.futures.Future()

    def run() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(server.start())
        except BaseException as exc:  # report start-up failures to the caller
            ready.set_exception(exc)
            try:
                loop.run_until_complete(server.stop())
            finally:
                loop.close()
            return
        ready.set_result(None)
        try:
            loop.run_forever()
        finally:
            _drain(loop)
            loop.close()

    thread = threading.Thread(target=run, name=f"horae-broker-{data_path.name}", daemon=True)
    thread.start()
    try:
        ready.result(START_TIMEOUT_S)
    except concurrent.futures.TimeoutError:
        raise RuntimeError(f"broker did not start within {START_TIMEOUT_S} s") from None
    return BrokerHandle(server, loop, thread, data_path)


def _drain(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel what is left on the loop so closing it does not warn about pending tasks."""
    tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for t in tasks:
        t.cancel()
    if tasks:
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
    loop.run_until_complete(loop.shutdown_asyncgens())
