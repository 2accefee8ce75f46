"""Big consumer commands applied in slices, in order, with the event loop let go between slices.

Theory of operation
-------------------
An ACK frame of the 5 MiB limit carries about 650,000 message ids; applying one takes the loop
for about two seconds, during which no other connection is read, answered or dispatched to.
:class:`SlicedCommands` is one connection's queue of such work. Each item is a generator that
applies at most :data:`SLICE_IDS` ids per step; one task steps the head item and yields to the
loop (``asyncio.sleep(0)``) after every step, so the worst stall one connection can cause is one
slice, whatever it sends.

The slice is small enough for a client's own ACK frames too: the clients group up to 1000 ids
in one ACK (``ackGroupingMaxSize``), about 3 ms of work applied at once, which a consumer at
20,000 messages a second sends every 50 ms. Applied in one go, each such frame held the loop
for its whole length, and every delayed message falling due meanwhile (a timer that fired,
waiting for the loop) was late by it; in slices of :data:`SLICE_IDS` the loop turns between
them, so a due timer, the dispatcher and the other connections run after each.

Order: a command of the connection that must not overtake a queued one (every ACK, REDELIVER
and CLOSE_CONSUMER, see :class:`broker.net.consumers.ConsumerSide`) is queued as well while the
queue is not empty, and the queue runs items one after another; so acks, their ACK_RESPONSEs
and redeliveries keep the order the client sent them in. A command that is small and finds the
queue empty runs at once, with no task (a client acknowledging at a low rate, a few ids a
frame).

Bound: while the queue holds work, the connection's reading is held (``hold_reading``, one of
:class:`broker.net.throttle.ReadThrottle`'s reasons), so what waits here is at most what one read
of the socket decoded. :meth:`close` (the connection was lost) drops what is left.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Iterator
from typing import Final

__all__ = ["SLICE_IDS", "SlicedCommands"]

log = logging.getLogger("horae.net.consumers")

SLICE_IDS: Final = 250
"""Message ids applied per loop iteration: about 0.7 ms of work (about 3 us an id), so a
client's full ACK frame (``ackGroupingMaxSize`` 1000 ids) takes four turns of the loop."""


class SlicedCommands:
    """One connection's queue of commands applied in slices (see the module docstring)."""

    def __init__(self, hold_reading: Callable[[bool], None]) -> None:
        self._hold_reading = hold_reading
        self._queue: deque[Iterator[None]] = deque()
        self._task: asyncio.Task[None] | None = None

    @property
    def busy(self) -> bool:
        """Work is queued: a command that must keep its order has to queue too."""
        return bool(self._queue)

    def run(self, work: Iterator[None]) -> None:
        """Queue *work* (a generator: one slice per step) after what is queued."""
        self._queue.append(work)
        if self._task is None:
            self._hold_reading(True)
            self._task = asyncio.get_running_loop().create_task(self._drain())

    def run_after(self, command: Callable[[], None]) -> None:
        """*command* now if nothing is queued, else once what is queued has run."""
        if self._queue:
            self.run(_one_step(command))
        else:
            command()

    def close(self) -> None:
        """The connection is gone: drop what is left."""
        self._queue.clear()
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _drain(self) -> None:
        queue = self._queue
        try:
            while queue:
                try:
                    next(queue[0])
                except StopIteration:
                    queue.popleft()
                except Exception:  # a bug fails this command only, as a handler's would
                    log.exception("applying a queued consumer command failed")
                    queue.popleft()
                await asyncio.sleep(0)
        finally:
            if self._task is asyncio.current_task():
                self._task = None
                self._hold_reading(False)


def _one_step(command: Callable[[], None]) -> Iterator[None]:
    command()
    yield
