"""A condition variable for one waiting thread, waited on and signalled in C calls.

Theory of operation
-------------------
The group-commit writer's thread is the only thread that ever waits for work
(storage/writer.py); the loop signals it once per loop iteration that queued something. A
``threading.Condition`` does that in Python: its ``notify`` and ``wait`` run ~50 and ~75
bytecodes each (an owner check, a waiter lock allocated per wait, a deque of waiters) on the
two threads of every lone append. :class:`Wakeup` keeps one lock, ``signal``, that is HELD
whenever no wake-up is pending, and a flag, ``waiting``, both read and written under the
caller's mutex only:

1. :meth:`wait` (mutex held): set ``waiting``, release the mutex, block on ``signal`` (with an
   optional timeout), take the mutex again, clear ``waiting``.
2. :meth:`notify` (mutex held): if ``waiting``, clear it and release ``signal``: the waiter's
   acquire returns. Otherwise nothing (as ``Condition.notify`` without waiters).
3. A notify that lands between the waiter's timeout and its taking the mutex again has cleared
   ``waiting`` and released ``signal``: the waiter sees ``waiting`` cleared without having
   taken ``signal``, and takes it then (it returns at once). So ``signal`` is held again
   whenever no wait is in progress, and a release never meets an unheld lock.

As with a Condition, a wake-up says only "look again": callers re-check their predicate in a
loop. One waiting thread at a time; any number of notifying threads.
"""

from __future__ import annotations

import threading

__all__ = ["Wakeup"]


class Wakeup:
    """The wait/notify of a condition variable on *mutex*, for one waiting thread."""

    __slots__ = ("_mutex", "_signal", "_waiting")

    def __init__(self, mutex: threading.Lock) -> None:
        self._mutex = mutex
        self._signal = threading.Lock()
        self._signal.acquire()  # held: no wake-up pending
        self._waiting = False

    def wait(self, timeout: float | None = None) -> bool:
        """Called with the mutex held; returns with it held. True when notified, False when
        *timeout* seconds passed first."""
        self._waiting = True
        mutex = self._mutex
        mutex.release()
        got = False
        try:
            got = self._signal.acquire(True, -1 if timeout is None else timeout)
        finally:
            mutex.acquire()
            if not got and not self._waiting:
                # notified after the timeout, before the mutex was ours: take its signal
                got = self._signal.acquire(False)
            self._waiting = False
        return got

    def notify(self) -> None:
        """Called with the mutex held: wake the waiting thread, if one waits."""
        if self._waiting:
            self._waiting = False
            self._signal.release()
