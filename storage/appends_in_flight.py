"""Appends the group-commit writer holds: handed over by the loop, not yet handed back.

Theory of operation
-------------------
The writer (storage/writer.py) counts a batch in when the loop opens it (``new_batch``) and
out when its outcome comes back to the loop (sync_stage's hand-back), so ``batches`` is the
number of batches whose appends still wait for the write and sync threads. Both ends run on
the loop: a plain integer, no lock.

Who reads it: a busy reader of the loop, between two pieces of bulk work: a dispatcher at the
end of a dispatch slice (broker/subscriptions/dispatchers/base.py), and a connection between
two slices of a big ACK or REDELIVER frame (broker/net/sliced.py). While a publish waits for
its write and fdatasync, the storage threads need the interpreter at each step (taking the
batch, after ``writev``, after ``fdatasync``); a loop running slice after slice keeps it, and
each step then waits up to the interpreter's switch interval (5 ms). So a reader that finds a
batch in flight between two slices waits for it to come back (:meth:`AppendsInFlight.handed_back`),
:data:`WAIT_S` at most: the loop runs what else is ready and otherwise idles in the poller, and
the storage threads take the interpreter at once. Releasing it for a moment instead
(``time.sleep(0)``) was not enough once the dispatcher read its entries in place
(storage/read_fds.py) rather than waiting for read threads: a herd's deliveries then kept the
loop busy enough that another topic's publish p99 rose from ~8 to ~23 ms; waiting for the
hand-back brought it to ~14 ms. A herd's consumers acknowledge in frames of up to 1,000 ids,
applied in slices; until those slices waited too, each loop turn still ran one of them per
consumer connection while the storage threads waited: with three consumers of a million due
at once, another topic's publish p99 rose by 5.6-7.3 ms, and by 4.0-4.5 ms once they waited
(bench/README.md).
"""

from __future__ import annotations

import asyncio
from typing import Final

__all__ = ["WAIT_S", "AppendsInFlight"]

#: How long a busy reader waits at most for the appends in flight to come back (module
#: docstring). A herd of 300,000 took 2.0-2.05 s with another topic's publish p99 at 8-10 ms
#: during it; with 2 ms, 2.2-2.4 s and 12-16 ms; with 10 ms, 2.1-2.2 s and 10-11 ms.
WAIT_S: Final = 0.005


class AppendsInFlight:
    """The writer's batches not yet handed back (loop only; module docstring)."""

    __slots__ = ("_waiters", "batches")

    def __init__(self) -> None:
        self.batches = 0
        self._waiters: list[asyncio.Future[None]] = []

    def opened(self) -> None:
        """A batch was opened: its appends are on their way to the writer."""
        self.batches += 1

    def returned(self, count: int) -> None:
        """*count* batches came back to the loop (durable or failed)."""
        self.batches = max(0, self.batches - count)
        if not self.batches and self._waiters:
            waiters, self._waiters = self._waiters, []
            for waiter in waiters:
                _wake(waiter)

    async def handed_back(self, timeout: float) -> bool:
        """Wait until no batch is in flight, *timeout* seconds at most; returns whether none
        is (module docstring)."""
        if not self.batches:
            return True
        loop = asyncio.get_running_loop()
        waiter = loop.create_future()
        self._waiters.append(waiter)
        timer = loop.call_later(timeout, _wake, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            if waiter in self._waiters:   # timed out (or cancelled): not woken by a return
                self._waiters.remove(waiter)
        return not self.batches


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
