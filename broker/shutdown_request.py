"""A graceful shutdown asked for over REST (Pulsar's ``POST /admin/v2/brokers/shutdown``).

Theory of operation: the server owns one :class:`ShutdownRequest` and hands it to the admin
app. The route answers 204 first, then calls :meth:`ShutdownRequest.request`, which runs the
handler once: by default the server's own graceful stop (topics unloaded, in-flight appends
answered, cursors and snapshots flushed, the store closed); the ``horae serve`` process
installs its own handler, which runs that same stop under ``brokerShutdownTimeoutMs`` and then
exits, exactly as on SIGTERM. A second request while the first runs changes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

__all__ = ["ShutdownRequest"]

log = logging.getLogger("horae.server")


class ShutdownRequest:
    """One broker's shutdown switch (module docstring)."""

    def __init__(self, handler: Callable[[], None]) -> None:
        self._handler = handler
        self.requested = False

    def on_request(self, handler: Callable[[], None]) -> None:
        """Replace what a request runs (the process entry point's stop-and-exit)."""
        self._handler = handler

    def request(self, max_concurrent_unload_per_sec: int, forced_terminate_topic: bool) -> None:
        if self.requested:
            return
        self.requested = True
        log.info("graceful shutdown requested over REST (maxConcurrentUnloadPerSec=%d, "
                 "forcedTerminateTopic=%s)", max_concurrent_unload_per_sec,
                 forced_terminate_topic)
        self._handler()
