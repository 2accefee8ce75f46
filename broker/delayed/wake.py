"""PreciseWake: an event loop woken at a wall-clock time itself, for the trackers' timers.

Theory of operation
-------------------
uvloop's timers count whole milliseconds of a clock read once per loop turn, and the loop
sleeps in ``epoll_wait`` for whole milliseconds: a timer aimed at a deliver time runs up to a
millisecond after it (0.8 ms at the median with 20,000 messages falling due a second), which
was most of a due message's time inside the broker. A ``timerfd`` armed at an absolute
``CLOCK_REALTIME`` time (the clock deliver times are counted in) is one of the kernel's
high-resolution timers: its descriptor turns readable at that time (plus the kernel's timer
slack, 50 µs by default) and the loop runs the reader then. The kernel never fires it early.

One descriptor per event loop serves every tracker's timer: a heap of (time, sequence,
handle), the descriptor armed at the earliest live one. A cancelled handle stays in the heap
until its time comes or until cancelled handles outnumber live ones, when the heap is rebuilt
from the live ones (so the heap is bounded by the timers armed). The descriptor is closed
once no handle has been live for :data:`IDLE_CLOSE_S` (a firing usually leaves none live
until its dispatch round arms the next deadline a loop turn later: closing and opening it
around every firing cost four system calls each), and opened again by the next
:meth:`PreciseWake.call_at_ns`. Callbacks run from the reader in
time order, each as a loop callback would (an exception goes to the loop's handler); the
descriptor is aimed again after them, so a callback that arms the next deadline (the usual
case) costs no close and reopen.

Optional: the timerfd calls are in ``broker/delayed/_packed_accel.c`` (Python 3.11's ``os``
has none). Without them (no compiler, not Linux), or when a descriptor cannot be had (the
process's descriptor limit), :func:`precise_wake` answers None and the trackers aim
``loop.call_at`` as before. A descriptor that could not be had is asked for again
:data:`OPEN_RETRY_S` later at the soonest (the trackers re-aim up to a thousand times a second:
not a failing system call and a warning each), and the warning is logged once per loop.
Loop-only: nothing here is thread-safe.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import os
import time
import weakref
from collections.abc import Callable

__all__ = ["AVAILABLE", "IDLE_CLOSE_S", "OPEN_RETRY_S", "PreciseWake", "WakeHandle",
           "precise_wake"]

log = logging.getLogger("horae.delayed")

try:
    from broker.delayed._packed_accel import timerfd_arm, timerfd_open
except ImportError:   # built without a compiler, or not Linux: loop.call_at instead
    AVAILABLE = False
else:
    AVAILABLE = True

#: Cancelled handles kept in the heap beyond twice the live ones before it is rebuilt.
_STALE_SLACK = 64

#: How long the descriptor stays open with no live handle (s).
IDLE_CLOSE_S = 1.0

#: After a descriptor could not be had, how long the loop's timers are used before it is
#: asked for again (s).
OPEN_RETRY_S = 1.0


class WakeHandle:
    """One armed wake-up; :meth:`cancel` it, as an ``asyncio.TimerHandle``."""

    __slots__ = ("_callback", "_wake", "done")

    def __init__(self, wake: PreciseWake, callback: Callable[[], object]) -> None:
        self._wake = wake
        self._callback = callback
        #: Ran or cancelled: nothing more will happen to it.
        self.done = False

    def cancel(self) -> None:
        if not self.done:
            self.done = True
            self._wake._cancelled()


class PreciseWake:
    """The loop's one timerfd and the heap of handles it serves (module docstring)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._heap: list[tuple[int, int, WakeHandle]] = []
        self._live = 0
        self._fd = -1
        self._armed_ns = 0
        self._seq = 0
        self._idle_check: asyncio.TimerHandle | None = None
        self._retry_at = 0.0     # loop time before which no descriptor is asked for
        self._warned = False

    @property
    def open(self) -> bool:
        """A descriptor is held (some handle is live)."""
        return self._fd >= 0

    def call_at_ns(self, when_ns: int, callback: Callable[[], object]) -> WakeHandle | None:
        """Run ``callback`` on the loop at ``when_ns`` (epoch ns, ``time.time_ns()``'s clock)
        or just after it, never before. None when no descriptor can be had: the caller aims
        a loop timer instead."""
        if self._fd < 0 and not self._open():
            return None
        handle = WakeHandle(self, callback)
        self._seq += 1
        heapq.heappush(self._heap, (when_ns, self._seq, handle))
        self._live += 1
        if not self._armed_ns or when_ns < self._armed_ns:
            self._arm(when_ns)
        return handle

    def _open(self) -> bool:
        now = self._loop.time()
        if now < self._retry_at:
            return False
        try:
            fd = timerfd_open()
        except OSError as exc:
            self._retry_at = now + OPEN_RETRY_S
            if not self._warned:
                self._warned = True
                log.warning("delayed delivery: no timerfd (%s); its timers use the loop's "
                            "until one can be had (said once)", exc)
            return False
        try:
            self._loop.add_reader(fd, self._readable)
        except (NotImplementedError, RuntimeError, OSError):   # a loop without readers
            os.close(fd)
            return False
        self._fd = fd
        return True

    def _idle(self) -> None:
        """No handle is live: the heap holds only cancelled ones; the descriptor is closed
        if none is armed again within :data:`IDLE_CLOSE_S`."""
        self._heap.clear()
        if self._idle_check is None and self._fd >= 0:
            self._idle_check = self._loop.call_later(IDLE_CLOSE_S, self._close_if_idle)

    def _close_if_idle(self) -> None:
        self._idle_check = None
        if not self._live:   # else it is checked again when none is
            self._close()

    def _close(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            self._loop.remove_reader(fd)
            os.close(fd)
        self._heap.clear()
        self._armed_ns = 0

    def _arm(self, when_ns: int) -> None:
        when_ns = max(1, when_ns)   # 0 would disarm it
        timerfd_arm(self._fd, when_ns)
        self._armed_ns = when_ns

    def _cancelled(self) -> None:
        self._live -= 1
        if not self._live:
            self._idle()
        elif len(self._heap) > 2 * self._live + _STALE_SLACK:
            self._heap = [item for item in self._heap if not item[2].done]
            heapq.heapify(self._heap)

    def _readable(self) -> None:
        # the expiry count, read so the descriptor is quiet again (none: aimed again
        # meanwhile; what is due still runs)
        with contextlib.suppress(BlockingIOError):
            os.read(self._fd, 8)
        now = time.time_ns()
        heap = self._heap
        due: list[WakeHandle] = []
        while heap and heap[0][0] <= now:
            handle = heapq.heappop(heap)[2]
            if not handle.done:
                handle.done = True
                self._live -= 1
                due.append(handle)
        self._armed_ns = 0
        for handle in due:
            try:
                handle._callback()
            except Exception as exc:   # as a loop callback's: reported, the others still run
                self._loop.call_exception_handler({
                    "message": "Exception in a delayed-delivery timer callback",
                    "exception": exc, "handle": handle})
        while heap and heap[0][2].done:
            heapq.heappop(heap)
        if heap:
            if not self._armed_ns or heap[0][0] < self._armed_ns:
                self._arm(heap[0][0])
        elif not self._live:
            self._idle()


_WAKES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, PreciseWake] = \
    weakref.WeakKeyDictionary()


def precise_wake(loop: object) -> PreciseWake | None:
    """The loop's :class:`PreciseWake`, None where there is none (the C calls missing, or
    not a running event loop: a test's fake loop)."""
    if not AVAILABLE or not isinstance(loop, asyncio.AbstractEventLoop):
        return None
    wake = _WAKES.get(loop)
    if wake is None:
        wake = _WAKES[loop] = PreciseWake(loop)
    return wake
