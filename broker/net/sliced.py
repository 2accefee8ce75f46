"""Big consumer commands applied in slices, in order, with the event loop let go between slices.

Theory of operation
-------------------
An ACK frame of the 5 MiB limit carries about 650,000 message ids; applying one takes the loop
for about two seconds, during which no other connection is read, answered or dispatched to.
:class:`SlicedCommands` is one connection's queue of such work. Each item is a generator that
applies at most :data:`SLICE_IDS` ids per step; one task steps the head item and yields to the
loop (``asyncio.sleep(0)``) after every step, so the worst stall one connection can cause is one
slice, whatever it sends.

A step yields the store's appends in flight behind what it applied (the subscription's
ledger's, or None). When a publish is waiting for the storage threads, the next step waits for
it to come back, :data:`~storage.appends_in_flight.WAIT_S` at most, as a busy dispatcher does at
a slice's end (storage/appends_in_flight.py): otherwise the slices of a few busy consumer
connections fill every loop turn and the storage threads wait for the interpreter. The wait
slows a big command only while publishes are in flight, by that bound per slice at most (a
slice of ids every 5 ms at the worst). With three consumers of a million messages due at once,
another topic's publish p99 rose by 4.5 ms instead of 6.3-7.1 meanwhile, and the herd's time
moved by less than the runs' spread (bench/README.md).

The slice is small enough for a client's own ACK frames too: the clients group up to 1000 ids
in one ACK (``ackGroupingMaxSize``), about 3 ms of work applied at once with the ids read one
by one (1.6 ms with them read in C, :func:`broker.net.consumers._entry_positions`), which a
consumer at 20,000 messages a second sends every 50 ms. Applied in one go, each such frame held the loop
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

from storage.appends_in_flight import WAIT_S, AppendsInFlight

__all__ = ["APPENDS_WAIT_S", "SLICE_IDS", "SlicedCommands", "SlicedWork"]

log = logging.getLogger("horae.net.consumers")

SLICE_IDS: Final = 250
"""Message ids applied per loop iteration: about 0.7 ms of work with the ids read one by one
(about 3 us an id), 0.4 ms with them read in C, so a client's full ACK frame
(``ackGroupingMaxSize`` 1000 ids) takes four turns of the loop."""

#: How long a step waits at most for the appends in flight it yielded (module docstring).
APPENDS_WAIT_S = WAIT_S

#: One command's work: each step applies a slice and yields the appends in flight to let
#: through before the next (None: nothing to wait for).
SlicedWork = Iterator[AppendsInFlight | None]


class SlicedCommands:
    """One connection's queue of commands applied in slices (see the module docstring)."""

    def __init__(self, hold_reading: Callable[[bool], None]) -> None:
        self._hold_reading = hold_reading
        self._queue: deque[SlicedWork] = deque()
        self._task: asyncio.Task[None] | None = None

    @property
    def busy(self) -> bool:
        """Work is queued: a command that must keep its order has to queue too."""
        return bool(self._queue)

    def run(self, work: SlicedWork) -> None:
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
                appends: AppendsInFlight | None = None
                try:
                    appends = next(queue[0])
                except StopIteration:
                    queue.popleft()
                except Exception:  # a bug fails this command only, as a handler's would
                    log.exception("applying a queued consumer command failed")
                    queue.popleft()
                await asyncio.sleep(0)
                if appends is not None and appends.batches:
                    # a publish waiting for the storage threads gets the interpreter now,
                    # not after the switch interval (storage/appends_in_flight.py)
                    await appends.handed_back(APPENDS_WAIT_S)
        finally:
            if self._task is asyncio.current_task():
                self._task = None
                self._hold_reading(False)


def _one_step(command: Callable[[], None]) -> SlicedWork:
    command()
    yield None
