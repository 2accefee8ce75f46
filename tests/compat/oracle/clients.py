"""The official Python client for one peer, quiet and closed after use."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from peers import Peer

OPERATION_TIMEOUT_S = 30


@contextlib.contextmanager
def client_for(peer: Peer, **kw: Any) -> Iterator[Any]:
    import pulsar

    kw.setdefault("operation_timeout_seconds", OPERATION_TIMEOUT_S)
    kw.setdefault("logger", pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    client = pulsar.Client(peer.service_url, **kw)
    try:
        yield client
    finally:
        client.close()
