"""A connection's request tasks: run a handler coroutine, answer its failure, cancel on close.

Theory of operation
-------------------
Handlers that need IO or a topic load (PRODUCER, SUBSCRIBE, LOOKUP, schema requests, ...) run
as tasks. :class:`RequestTasks` is owned by one :class:`broker.net.connection.ServerConnection`
and is the one place where what escapes such a task is answered:

* a :class:`protocol.errors.RequestError` becomes ERROR with its code for the request id (or
  the frame the caller's ``on_error`` builds, for requests answered by their own response
  command, e.g. PARTITIONED_METADATA_RESPONSE);
* any other exception is a bug: it is logged with its traceback and answered as UnknownError,
  and the connection stays open;
* ``CancelledError`` passes (the connection was lost).

The set of live tasks is kept so :meth:`cancel_all` can stop them when the connection is lost.
Frames go out through the ``write`` callable the owner hands in; nothing here touches the
transport. Runs on the event loop only.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from protocol import commands as C
from protocol.errors import RequestError

__all__ = ["RequestTasks"]

log = logging.getLogger("horae.net.connection")


class RequestTasks:
    """The request tasks of one connection (see the module docstring)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, write: Callable[[bytes], None],
                 peer: Callable[[], str]) -> None:
        self._loop = loop
        self._write = write
        self._peer = peer
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Awaitable[Any], request_id: int | None = None,
              on_error: Callable[[RequestError], bytes] | None = None) -> asyncio.Task[Any]:
        """Run *coro* as a task; RequestErrors become ERROR (or *on_error*'s frame)."""
        task = self._loop.create_task(self._run(coro, request_id, on_error))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def cancel_all(self) -> None:
        for task in list(self._tasks):
            task.cancel()

    async def _run(self, coro: Awaitable[Any], request_id: int | None,
                   on_error: Callable[[RequestError], bytes] | None) -> None:
        try:
            await coro
        except RequestError as exc:
            self._answer(exc, request_id, on_error)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("request %s on %s failed", request_id, self._peer())
            self._answer(RequestError(f"{type(exc).__name__}: {exc}"), request_id, on_error)

    def _answer(self, exc: RequestError, request_id: int | None,
                on_error: Callable[[RequestError], bytes] | None) -> None:
        if on_error is not None:
            self._write(on_error(exc))
        elif request_id is not None:
            self._write(C.encode_error(request_id, exc.code, exc.message))
