"""A thread's wait for work, woken from the event loop without the GIL.

Theory of operation
-------------------
The storage write thread waits for the loop to queue appends (storage/writer.py). With a
``threading.Condition`` the loop's ``notify`` releases the waiter's lock holding the GIL: the
woken thread, which on this machine's few cores often preempts the loop at once, finds the GIL
held, sleeps again, and is woken a second time when the loop lets the GIL go (several context
switches per hand-off). :class:`Wakeup` keeps the Condition's shape -- one lock guarding the
shared state, :meth:`Wakeup.wait` releasing it while waiting, with or without a timeout -- but
the waiting thread blocks in ``select`` on an eventfd and the waker writes it with
``os.eventfd_write``, both of which drop the GIL around the system call: the woken thread
finds the GIL free.

A wake-up is claimed under the lock (:meth:`Wakeup.claim`: only a thread that waits and was not
woken since it began waiting is worth a system call) and made after the lock is released
(:meth:`Wakeup.wake`). The eventfd's counter keeps a wake-up made before the thread blocks, so
none is lost; a spurious one only makes the waiter look at its state again. Without
``os.eventfd`` (not Linux) a ``threading.Condition`` does the same job.
"""

from __future__ import annotations

import contextlib
import os
import select
import threading

__all__ = ["Wakeup"]


class Wakeup:
    """One waiting thread's lock and wake-up (module docstring)."""

    __slots__ = ("_cond", "_fd", "_waiting", "lock")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        """Guards the waiting thread's shared state (like a Condition's lock)."""
        self._waiting = False  # the thread waits and no wake-up was claimed since (under lock)
        eventfd = getattr(os, "eventfd", None)
        self._fd = eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC) if eventfd is not None else -1
        self._cond = threading.Condition(self.lock) if self._fd < 0 else None

    def wait(self, timeout: float | None = None) -> None:
        """Holding the lock: release it, wait for a wake-up (or *timeout* seconds), take it
        back. The caller re-checks its state afterwards (wake-ups may be spurious)."""
        if self._cond is not None:
            self._cond.wait(timeout)
            return
        self._waiting = True
        self.lock.release()
        try:
            select.select((self._fd,), (), (), timeout)
            with contextlib.suppress(BlockingIOError):
                os.eventfd_read(self._fd)  # reset: the state is looked at under the lock next
        finally:
            self.lock.acquire()
            self._waiting = False

    def claim(self) -> bool:
        """Holding the lock: True if the thread waits and nobody claimed its wake-up yet (then
        the caller must :meth:`wake` it after releasing the lock)."""
        if self._cond is not None:
            self._cond.notify()
            return False
        if self._waiting:
            self._waiting = False
            return True
        return False

    def wake(self) -> None:
        """Not holding the lock: wake the thread (the system call runs without the GIL)."""
        if self._fd >= 0:
            os.eventfd_write(self._fd, 1)

    def close(self) -> None:
        """Close the eventfd (once the waiting thread is gone)."""
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)
