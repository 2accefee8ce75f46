"""The storage threads' one ordered channel back to the event loop.

Theory of operation
-------------------
The write and sync threads (storage/writer.py, storage/sync_stage.py) hand the loop what it
must run -- a group commit's outcome, a barrier's completion -- as callables in ONE FIFO
(``collections.deque``: append and popleft are atomic). Whatever wakes the loop, it runs
:meth:`Handback._deliver`, which runs every callable queued so far, in order; a wake-up that
finds the FIFO already emptied does nothing. So outcomes reach the loop in the order the
threads queued them, whichever of the two wake-ups below arrives first.

Two ways to wake the loop:

- :meth:`Handback.post` (a thread that goes on working: the sync thread between rounds, the
  write thread before a control or a pre-zero write): ``loop.call_soon_threadsafe``, which
  makes its wake-up write holding the GIL, so the posting thread goes on at once.
- :meth:`Handback.post_and_wait` (a thread about to wait for more work: the write thread after
  a round it synced itself, nothing more queued): a write to an eventfd the loop watches
  (``loop.add_reader``), made by ``os.eventfd_write``, which drops the GIL around the system
  call. The loop, woken by it, finds the GIL free and runs the outcome at once, instead of
  waiting for the posting thread to reach its own wait (on this machine's few cores a woken
  thread that finds the GIL held costs several context switches per hand-off). The posting
  thread takes the GIL back after the loop's turn, on its way to its wait.

Without ``os.eventfd`` (not Linux) both use ``call_soon_threadsafe``. A loop that is closed
takes nothing more: what is queued then is dropped with the loop (nobody waits for it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections import deque
from collections.abc import Callable

log = logging.getLogger("horae.storage")

__all__ = ["Handback"]


class Handback:
    """The ordered hand-back of the storage threads to the loop (module docstring). Created
    and closed on the loop's thread."""

    __slots__ = ("_fd", "_items", "_loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._items: deque[Callable[[], None]] = deque()
        self._fd = -1
        eventfd = getattr(os, "eventfd", None)
        if eventfd is not None:
            self._fd = eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
            try:
                loop.add_reader(self._fd, self._on_readable)
            except (NotImplementedError, RuntimeError):  # a loop without add_reader
                os.close(self._fd)
                self._fd = -1

    def post(self, item: Callable[[], None]) -> None:
        """Queue *item* for the loop and wake it holding the GIL (any thread that goes on
        working)."""
        self._items.append(item)
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
            self._loop.call_soon_threadsafe(self._deliver)

    def post_and_wait(self, item: Callable[[], None]) -> None:
        """Queue *item* for the loop and wake it without the GIL (a thread that waits for more
        work right after this)."""
        fd = self._fd
        if fd < 0:
            self.post(item)
            return
        self._items.append(item)
        try:
            os.eventfd_write(fd, 1)
        except OSError:  # closed meanwhile (the loop is gone): the ordinary wake-up
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._deliver)

    def _on_readable(self) -> None:
        with contextlib.suppress(BlockingIOError):
            os.eventfd_read(self._fd)
        self._deliver()

    def _deliver(self) -> None:
        """On the loop: run everything queued so far, in order."""
        items = self._items
        while items:
            item = items.popleft()
            try:
                item()
            except Exception:
                log.exception("storage: a hand-back to the loop failed")

    def close(self) -> None:
        """Stop watching the eventfd and close it (on the loop, after the threads that post
        stopped); runs what is still queued."""
        fd, self._fd = self._fd, -1
        if fd >= 0:
            with contextlib.suppress(RuntimeError, ValueError):  # a closed loop
                self._loop.remove_reader(fd)
            os.close(fd)
        if not self._loop.is_closed():
            self._deliver()
