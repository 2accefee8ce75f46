"""ConnectionView: what every part of a connection may ask of it, stated once.

Theory of operation: :class:`broker.net.connection.ServerConnection` owns its parts (the
handshake, the lookups, the producer and consumer handlers); each part sees the connection
only through a narrow ``typing.Protocol`` that extends :class:`ConnectionView` with what that
part alone needs. The view has the three members all of them share: the peer's address (for
logs), :meth:`write` (a complete frame, buffered per loop iteration) and :meth:`spawn` (run a
request as a task whose :class:`protocol.errors.RequestError` is answered with ERROR, or with
``on_error``'s frame, for ``request_id``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from protocol.errors import RequestError

__all__ = ["ConnectionView"]


class ConnectionView(Protocol):
    @property
    def remote_address(self) -> str: ...

    def write(self, data: bytes) -> None: ...

    def spawn(self, coro: Awaitable[Any], request_id: int | None = None,
              on_error: Callable[[RequestError], bytes] | None = None) -> asyncio.Task[Any]: ...
