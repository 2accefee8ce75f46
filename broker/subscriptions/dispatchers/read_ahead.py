"""Reading the first due entries of a subscription ahead of their deliver time.

Theory of operation
-------------------
A delivery at a deliver time that follows a quiet spell finds everything it touches cold: the
entries' pages may have left the page cache (a delay of hours), a sealed segment's index may
be paged out, and on a machine that sat idle even the process's own memory -- the tracker's
index chunks, the read and send paths' objects and code -- costs several times its usual time
to touch again (measured on the benchmark machine: after a few seconds of idle, a 100 MiB
re-touch took 170-210 ms against 4-9 ms right after; the first due round of a window took
~30 ms to list and read 100 positions, later ones 3-4 ms). Those costs land on the first
messages' lateness.

So the tracker's timer, asked for a lead (``delayedDeliveryReadAheadMillis``), also fires
that many ms before a deadline it aims at from farther away (never within a stream of
deadlines already falling due, which are that close to each other), and
:meth:`ReadAhead.wake` lists the first positions by deliver time
(:meth:`~broker.delayed.delivery.DelayedDelivery.upcoming`, the bounded listing the REST
API's scheduled view uses) and reads them with the dispatcher's own read. The entries read are
dropped: the entry cache takes appends only (a key is put once, a disk read never enters it),
and what the delivery needs is the read having happened -- the pages in the page cache (read
then in place on the loop), the segment index paged in, the paths warm. Nothing is delivered
or changed here: a reset, an acknowledgement or a cancel meanwhile only makes a read useless.

One read-ahead at a time per dispatcher, of one dispatch read's worth of positions; it runs
only while the dispatcher has consumers, and a failed one is only logged (the delivery's own
read reports what is wrong).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from storage.positions import Position

__all__ = ["ReadAhead"]

log = logging.getLogger("horae.subscriptions.dispatchers")


class UpcomingSource(Protocol):
    """What the read-ahead asks of a subscription's delayed delivery."""

    async def upcoming(self, limit: int) -> list[Position]: ...


class ReadAhead:
    """One dispatcher's read-ahead of due entries (module docstring)."""

    __slots__ = ("_limit", "_read", "_ready", "_source", "_task")

    def __init__(self, source: UpcomingSource, read: Callable[[list[Position]], Awaitable[object]],
                 ready: Callable[[], bool], limit: int) -> None:
        self._source = source
        self._read = read
        self._ready = ready
        self._limit = limit
        self._task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self._task is not None

    def wake(self) -> None:
        """The tracker's lead: a deliver time after a quiet spell is near."""
        if self._task is not None or not self._ready():
            return
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        try:
            positions = await self._source.upcoming(self._limit)
            if positions and self._ready():
                await self._read(positions)
        except Exception:   # only a hint: the delivery's own read reports what is wrong
            log.debug("delayed read-ahead failed", exc_info=True)
        finally:
            self._task = None

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
