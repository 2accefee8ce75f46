"""Appends the group-commit writer holds: handed over by the loop, not yet handed back.

Theory of operation
-------------------
The writer (storage/writer.py) counts a batch in when the loop opens it (``new_batch``) and
out when its outcome comes back to the loop (sync_stage's hand-back), so ``batches`` is the
number of batches whose appends still wait for the write and sync threads. Both ends run on
the loop: a plain integer, no lock.

Who reads it: a busy dispatcher (broker/subscriptions/dispatchers/base.py), at the end of a
dispatch slice. While a publish waits for its write and fdatasync, the storage threads need the
interpreter at each step (taking the batch, after ``writev``, after ``fdatasync``); a loop
running slice after slice keeps it, and each step then waits up to the interpreter's switch
interval (5 ms). So a dispatcher that finds a batch in flight at a slice's end waits for it to
come back (:meth:`AppendsInFlight.handed_back`), for a bounded time: the loop runs what else is
ready and otherwise idles in the poller, and the storage threads take the interpreter at once.
Releasing it for a moment instead (``time.sleep(0)``) was not enough once the dispatcher read
its entries in place (storage/read_fds.py) rather than waiting for read threads: a herd's
deliveries then kept the loop busy enough that another topic's publish p99 rose from ~8 to
~23 ms; waiting for the hand-back brought it to ~14 ms (bench/README.md).
"""

from __future__ import annotations

import asyncio

__all__ = ["AppendsInFlight"]


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
